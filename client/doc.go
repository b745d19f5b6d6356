// Package client is vkrt's user-facing runtime: a [Client] owns one device
// (a device.Device: Vulkan where the program links the vk backend, the
// pure-Go device/cpu one, or any other handed with WithBackend), its
// streams, each stream's memory manager, the buffers and kernel launches on
// them, and the environment memory records go to.
//
// # Streams
//
// A client starts with a default stream and makes more with NewStream. A
// stream's operations run in order, one at a time; different streams run
// concurrently. Every stream has its own pools (a memory.Manager over the
// device's storage), by default the Virtual layout with no plan: where the
// device has sparse residency a stream's buffers lie in one virtual range
// bound to device memory under live bytes only, elsewhere they get the
// SubSlices pools (see WithLayout, InstallMemoryPools). Methods of Client
// act on the calling stream: the one WithStream put on the context, else
// the default stream; a stream of another client there is refused with
// *ForeignStreamError (ErrForeignStream), not replaced by the default one.
//
// # Buffers and launches
//
// Buffers are zero-initialised and belong to the stream they were made on;
// a launch binds buffers of its own stream only. Launch and Run submit one
// kernel of the kernel package and wait for it; LaunchBatch submits a chain
// of kernels at once. A launch whose context ends stops waiting: what the
// device already runs finishes before anything else on it, but no more of
// the launch starts, so its outputs may be partly written.
// A fresh buffer's memory is cleared in the submission of the first launch
// that binds it.
//
// # Dry runs
//
// Under a context marked with dryrun.With, allocations are lazy (their pages
// get ids but no device memory), launches are validated and dropped, writes
// are dropped and reads return zeros: the pools see the workload's exact
// allocation stream while the device holds nothing for it. A dryrun.RealRun
// scope inside executes, and gives device memory to the buffers it uses. The
// report after a dry run is what a measured plan is made from (MeasurePlan).
//
// # Out of memory
//
// An allocation the device or a capped pool refuses is retried once after a
// cleanup of every stream's pools; if it fails again the error is an
// *AllocationError naming the size asked, the largest live buffers, the
// pools' usage and the installed layout. An op whose buffers hold their
// memory, refused memory of its own by the device (a transfer's staging
// buffer, a launch's descriptors), is run again after a cleanup the same
// way; refused again, its error names the op and what it needed the memory
// for, and matches runtime.ErrOutOfDeviceMemory, but is no *AllocationError:
// no buffer was refused.
//
// # Misuse
//
// A freed, nil or zero Buffer is vkruntime.ErrNotFound; a buffer handed to
// a stream that did not make it is *ForeignBufferError (ErrForeignBuffer);
// a read or write outside a buffer is *RangeError (ErrOutOfRange). A
// refused call changes nothing: a launch is checked against every buffer's
// size before any buffer a dry run made is given device memory (where the
// device then refuses one of them memory, those given it before keep it:
// see LaunchBatch).
//
// A nil *Client or *Stream (or a zero one, which neither Open nor NewStream
// makes) is no client: a method of it that returns an error returns ErrNil,
// the others their zero value (Stream.Closed says true), rather than
// dereferencing nil. A call given a nil context, Open's too, is refused
// with ErrNilContext, and Open given a nil Option, or a memory limit below
// the device's alignment that no buffer fits under (*MemoryLimitError),
// with ErrInvalidOption.
// A device whose properties the client cannot run on (slices aligned to
// other than a power of two of whole 32-bit words: *AlignmentError) is
// refused by Open with ErrUnsupportedDevice, and closed.
package client
