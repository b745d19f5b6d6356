package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/runtime/environment"
)

// DeviceConfig is what a check asks of a fresh client.
type DeviceConfig struct {
	// MemoryLimit, when non-zero, caps the device memory the client's
	// device may hold at once: past it allocations fail with
	// runtime.ErrOutOfDeviceMemory. A device that cannot be limited
	// returns an error matching ErrNotSupported, and the checks that need
	// a limit are not supported.
	MemoryLimit uint64
	// Options are client options the client must be opened with (an
	// environment to record into).
	Options []client.Option
	// Wrap, when set, must be applied to the device before the client
	// gets it: a check stages a failure (a lost device) in a wrapper. A
	// factory that cannot wrap returns an error matching ErrNotSupported.
	Wrap func(device.Device) device.Device
}

// OpenClient opens a client on a fresh instance of the device under test,
// configured as asked. OnDevice and DefaultDevice make one.
type OpenClient func(ctx context.Context, cfg DeviceConfig) (*client.Client, error)

// OnDevice opens every client on a device of its own that open makes
// (cpu.Open, a backend's opener, a test's own), handed to the client with
// client.WithBackend.
func OnDevice(open device.Opener) OpenClient {
	return func(ctx context.Context, cfg DeviceConfig) (*client.Client, error) {
		d, err := open(ctx, device.Config{MemoryLimit: cfg.MemoryLimit})
		if err != nil {
			return nil, err
		}
		if cfg.Wrap != nil {
			d = cfg.Wrap(d)
		}
		return client.Open(ctx, append(slices.Clone(cfg.Options), client.WithBackend(d))...)
	}
}

// DefaultDevice opens the device at index of the backend linked into the
// program (device.Open).
func DefaultDevice(index int) OpenClient {
	return OnDevice(func(ctx context.Context, cfg device.Config) (device.Device, error) {
		cfg.Index = index
		return device.Open(ctx, cfg)
	})
}

// RunDevice runs the device checks outside go test. The report's target is
// o.Target, else the device's name, read under the guard of a check (its
// panics recovered, bounded by o.Timeout): a device that cannot be opened
// and named is "unknown (…)", saying why, and the checks still run.
func RunDevice(ctx context.Context, open OpenClient, o Options) Report {
	// The device is named before the checks: a run that ctx ends (a
	// signal to vkrt conformance) names it too. Opened after them, with
	// ctx ended, it was not, and the reports lost their target. The open
	// is for the name alone (every check opens a device of its own), so a
	// caller that knows the name saves it.
	if o.Target == "" {
		o.Target = nameDevice(ctx, open, o.Timeout)
	}
	return runChecks(ctx, "device", deviceChecks(open), o)
}

// nameDevice opens the device for its name as a check opens it, under the
// same guard (a panic, a hang past the timeout, an open that gives no
// client): it ran unguarded, and a Name that panicked ended the program, a
// Close that blocked hung the run before its first check. A device it
// cannot name is "unknown", with why.
func nameDevice(ctx context.Context, open OpenClient, timeout time.Duration) string {
	var name atomic.Pointer[string]
	r := runCheck(ctx, Check{Name: "device/name", Rule: "The device opens and says its name", run: func(c *checkState) {
		n := deviceName(openClient(c, open, DeviceConfig{}))
		name.Store(&n)
	}}, timeout, "")
	if n := name.Load(); n != nil {
		return *n // named, even if closing it then failed
	}
	if ctx.Err() != nil {
		return "" // the run is interrupted: no check runs
	}
	why := r.Reason
	if r.Status == Fail {
		why = r.Evidence[0]
	}
	why, _, _ = strings.Cut(why, "\n")
	return "unknown (opening the device for its name: " + why + ")"
}

// DeviceChecks lists the checks RunDevice and TestDevice run, in order,
// with their names and rules.
func DeviceChecks() []Check { return deviceChecks(nil) }

// deviceLimit is the memory limit of the out-of-memory checks.
const deviceLimit = 16 << 20

// openClient opens a client for one check and closes it when the check
// ends; closing must succeed (a device reports leaks and misuse there). A
// factory refusing the configuration stops the check as not supported;
// refusing the zero configuration fails it.
func openClient(c *checkState, open OpenClient, cfg DeviceConfig) *client.Client {
	cl, err := open(c.Context(), cfg)
	var asked []string
	if cfg.MemoryLimit != 0 {
		asked = append(asked, fmt.Sprintf("a memory limit of %d B", cfg.MemoryLimit))
	}
	if cfg.Wrap != nil {
		asked = append(asked, "a wrapper")
	}
	if len(cfg.Options) != 0 {
		asked = append(asked, "client options")
	}
	if len(asked) == 0 {
		c.needPlain(err, "opening the device", "device")
	} else {
		c.need(err, "opening the device with "+strings.Join(asked, " and "))
	}
	if cl == nil {
		c.Fatalf("opening the device: no client and no error")
	}
	c.Cleanup(func() {
		if err := cl.Close(); err != nil {
			c.Errorf("closing the client: %v", err)
		}
	})
	return cl
}

// storageOf makes the device's storage a NewStorage: each call opens a
// client with the limit asked and hands out its device's storage.
func storageOf(open OpenClient) NewStorage {
	return func(cfg StorageConfig) (StorageTarget, error) {
		cl, err := open(context.Background(), DeviceConfig{MemoryLimit: cfg.MemoryLimit})
		if err != nil {
			return StorageTarget{}, err
		}
		t := deviceStorage(cl)
		t.Close = cl.Close
		return t, nil
	}
}

func deviceChecks(open OpenClient) []Check {
	checks := storageChecks(storageOf(open))
	checks = append(checks, []Check{
		{
			Name: "device/properties",
			Rule: "The device's properties can drive the pools: a power-of-two alignment of at least 4 B, a max page size that is a multiple of it, a non-zero memory size",
			run: func(c *checkState) {
				p := openClient(c, open, DeviceConfig{}).Properties()
				if err := p.Validate(); err != nil {
					c.Errorf("%+v: %v", p, err)
				}
				if p.Alignment < 4 {
					c.Errorf("alignment %d B: kernels bind 32-bit words, so at least 4 B", p.Alignment)
				}
				if p.MemorySize == 0 {
					c.Errorf("memory size 0")
				}
			},
		},
		{
			Name: "device/zero-initialised",
			Rule: "Every new buffer reads as zeros, through a read and through a kernel, however its memory was used before",
			run:  withClient(open, checkZeroed),
		},
		{
			Name: "device/create-round-trip",
			Rule: "A buffer created from bytes reads back those bytes, at every size",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				ctx := c.Context()
				for i, size := range []uint64{1, 3, 4, 15, 17, 255, 4097, 65539} {
					want := pattern(uint64(300+i), size)
					b, err := cl.Create(ctx, want)
					if err != nil {
						c.Errorf("Create(%d B): %v", size, err)
						continue
					}
					got, err := b.Read(ctx)
					if err != nil {
						c.Errorf("reading a buffer of %d B: %v", size, err)
					} else {
						compareBytes(c, want, got, fmt.Sprintf("a created buffer of %d B", size))
					}
					freeBuffer(c, b)
				}
			},
		},
		{
			Name: "device/transfer-odd-ranges",
			Rule: "Writes and reads of a buffer at odd offsets and sizes move exactly the bytes asked and leave every other byte as it was",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				ctx := c.Context()
				const size = 4099
				mirror := pattern(7, size)
				b, err := cl.Create(ctx, mirror)
				if err != nil {
					c.Fatalf("Create(%d B): %v", size, err)
				}
				defer freeBuffer(c, b)
				for i, r := range []struct{ off, n uint64 }{{0, 1}, {1, 1}, {3, 5}, {7, 13}, {1, 4096}, {4095, 4}, {4098, 1}, {17, 1023}, {2048, 2051}, {9, 0}} {
					data := pattern(uint64(400+i), r.n)
					if err := b.Write(ctx, r.off, data); err != nil {
						c.Errorf("Write(%d B at %d): %v", r.n, r.off, err)
						continue
					}
					copy(mirror[r.off:], data)
					got, err := b.Stream().ReadAt(ctx, b, r.off, r.n)
					if err != nil {
						c.Errorf("ReadAt(%d, %d): %v", r.off, r.n, err)
						continue
					}
					compareBytes(c, data, got, fmt.Sprintf("%d B read back at %d", r.n, r.off))
				}
				got, err := b.Read(ctx)
				if err != nil {
					c.Fatalf("reading the buffer: %v", err)
				}
				compareBytes(c, mirror, got, "the whole buffer after writes at odd ranges")
			},
		},
		{
			Name: "device/transfer-bounds",
			Rule: "A write or read reaching past the end of a buffer is an error and changes nothing",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				ctx := c.Context()
				want := pattern(8, 1000)
				b, err := cl.Create(ctx, want)
				if err != nil {
					c.Fatalf("Create: %v", err)
				}
				defer freeBuffer(c, b)
				for _, r := range []struct{ off, n uint64 }{{0, 1001}, {999, 2}, {1000, 1}, {1 << 40, 1}, {^uint64(0), 2}} {
					if err := b.Write(ctx, r.off, make([]byte, r.n)); err == nil {
						c.Errorf("writing %d B at %d into a buffer of 1000 B succeeded", r.n, r.off)
					}
					if _, err := b.Stream().ReadAt(ctx, b, r.off, r.n); err == nil {
						c.Errorf("reading %d B at %d from a buffer of 1000 B succeeded", r.n, r.off)
					}
				}
				got, err := b.Read(ctx)
				if err != nil {
					c.Fatalf("reading the buffer: %v", err)
				}
				compareBytes(c, want, got, "the buffer after refused transfers")
			},
		},
		{
			Name: "device/free-twice-not-found",
			Rule: "Freeing a buffer twice is runtime.ErrNotFound, and a freed buffer can be neither read nor written",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				ctx := c.Context()
				b, err := cl.Create(ctx, pattern(9, 64))
				if err != nil {
					c.Fatalf("Create: %v", err)
				}
				if err := b.Free(); err != nil {
					c.Fatalf("the first free: %v", err)
				}
				if err := b.Free(); !errors.Is(err, vkruntime.ErrNotFound) {
					c.Errorf("the second free: %v, want ErrNotFound", err)
				}
				if _, err := b.Read(ctx); err == nil {
					c.Errorf("reading a freed buffer succeeded")
				}
				if err := b.Write(ctx, 0, []byte{1}); err == nil {
					c.Errorf("writing a freed buffer succeeded")
				}
			},
		},
		{
			Name: "device/stream-ownership",
			Rule: "A buffer belongs to its stream: another stream's write, read, free or launch of it is an error and changes nothing",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				ctx := c.Context()
				other, err := cl.NewStream()
				if err != nil {
					c.Fatalf("NewStream: %v", err)
				}
				want := pattern(10, 256)
				b, err := cl.Create(ctx, want)
				if err != nil {
					c.Fatalf("Create: %v", err)
				}
				defer freeBuffer(c, b)
				if err := other.Write(ctx, b, 0, make([]byte, 256)); err == nil {
					c.Errorf("stream %d wrote stream %d's buffer", other.ID(), b.Stream().ID())
				}
				if _, err := other.Read(ctx, b); err == nil {
					c.Errorf("stream %d read stream %d's buffer", other.ID(), b.Stream().ID())
				}
				if err := other.Free(b); err == nil {
					c.Errorf("stream %d freed stream %d's buffer", other.ID(), b.Stream().ID())
				}
				if err := other.Run(ctx, kernel.FillWords(64, 0), b); err == nil {
					c.Errorf("stream %d launched a kernel on stream %d's buffer", other.ID(), b.Stream().ID())
				}
				got, err := b.Read(ctx)
				if err != nil {
					c.Fatalf("reading the buffer: %v", err)
				}
				compareBytes(c, want, got, "the buffer after another stream's attempts")
			},
		},
		{
			Name: "device/churn-integrity",
			Rule: "Through churn of buffers under every layout (persistent windows included), every live buffer keeps every byte written to it: 0 corrupt bytes",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				for _, l := range churnLayouts(cl.Properties()) {
					churnBuffers(c, cl, l)
				}
			},
		},
		{
			Name: "device/oom-classified",
			Rule: "Under a memory limit, a buffer the device cannot hold fails with an error matching runtime.ErrOutOfDeviceMemory, as a *client.AllocationError naming the size asked",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{MemoryLimit: deviceLimit})
				bufs, err := fillDevice(c, cl)
				defer freeAll(c, bufs)
				size := fillSize(cl.Properties())
				if err == nil {
					c.Fatalf("%d buffers of %d B under a limit of %d B all succeeded", len(bufs), size, deviceLimit)
				}
				if !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
					c.Errorf("buffer %d of %d B under a limit of %d B: %v (%T), which is not ErrOutOfDeviceMemory", len(bufs), size, deviceLimit, err, err)
				}
				var ae *client.AllocationError
				if !errors.As(err, &ae) {
					c.Errorf("%v (%T) is not a *client.AllocationError", err, err)
				} else if ae.Size != size {
					c.Errorf("the error names %d B, %d B were asked: %v", ae.Size, size, err)
				}
			},
		},
		{
			Name: "device/usable-after-oom",
			Rule: "After out of memory the stream stays usable: live buffers keep their bytes, kernels run, and a buffer fits once memory is freed",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{MemoryLimit: deviceLimit})
				ctx := c.Context()
				bufs, err := fillDevice(c, cl)
				defer func() { freeAll(c, bufs) }()
				size := fillSize(cl.Properties())
				if err == nil || len(bufs) < 2 {
					c.Fatalf("%d buffers of %d B under a limit of %d B, then: %v", len(bufs), size, deviceLimit, err)
				}
				want := pattern(11, 4096)
				if err := bufs[0].Write(ctx, 0, want); err != nil {
					c.Errorf("writing a live buffer after out of memory: %v", err)
				}
				if err := cl.DefaultStream().Err(); err != nil {
					c.Errorf("the stream is in an error state after out of memory: %v", err)
				}
				if err := cl.Run(ctx, kernel.CopyWords(1024), bufs[0], bufs[1]); err != nil {
					c.Errorf("a kernel after out of memory: %v", err)
				} else if got, err := bufs[1].Stream().ReadAt(ctx, bufs[1], 0, 4096); err != nil {
					c.Errorf("reading after out of memory: %v", err)
				} else {
					compareBytes(c, want, got, "a copy made after out of memory")
				}
				last := bufs[len(bufs)-1]
				freeBuffer(c, last)
				bufs = bufs[:len(bufs)-1]
				b, err := cl.Empty(ctx, size)
				if err != nil {
					c.Errorf("a buffer of %d B after freeing one of that size: %v", size, err)
				} else {
					bufs = append(bufs, b)
				}
			},
		},
		{
			Name: "device/cleanup-returns-memory",
			Rule: "Once every buffer is freed and the pools cleaned up, the device holds what it held when opened",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				held := deviceStorage(cl).Held
				start := held()
				for _, l := range churnLayouts(cl.Properties()) {
					churnBuffers(c, cl, l)
				}
				cl.MemoryCleanup(c.Context())
				if end := held(); end != start {
					c.Errorf("the device holds %d B after every buffer was freed and the pools cleaned up, %d B when opened", end, start)
				}
			},
		},
		{
			Name: "device/memory-budget",
			Rule: "Where the device reports a memory budget, it is non-zero and no more than the heap, and the usage it reports grows when the device allocates",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				b, ok := any(cl.Device()).(interface {
					Budget() (budget, usage uint64, ok bool)
				})
				if !ok {
					c.NotSupportedf("the device reports no memory budget")
				}
				budget, usage, ok := b.Budget()
				if !ok {
					c.NotSupportedf("the device reports no memory budget (no VK_EXT_memory_budget)")
				}
				heap := cl.Properties().MemorySize
				if budget == 0 || budget > heap {
					c.Errorf("budget %d B with a heap of %d B", budget, heap)
				}
				size := upToLargestPage(cl.Properties(), 64<<20)
				buf, err := cl.Empty(c.Context(), size)
				if err != nil {
					c.Fatalf("a buffer of %d B: %v", size, err)
				}
				defer freeBuffer(c, buf)
				if err := buf.Write(c.Context(), 0, []byte{1}); err != nil {
					c.Fatalf("writing the buffer: %v", err)
				}
				if _, after, _ := b.Budget(); after <= usage {
					c.Errorf("usage %d B before a buffer of %d B, %d B after", usage, size, after)
				}
			},
		},
		{
			Name: "device/host-visible",
			Rule: "Where the device's memory is host-visible, host writes are seen by kernels and kernel writes by the host straight after the launch",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				hv, ok := any(cl.Device()).(interface{ HostVisible() bool })
				if !ok || !hv.HostVisible() {
					c.NotSupportedf("the device's memory is not host-visible")
				}
				ctx := c.Context()
				want := pattern(12, 4096)
				src, err := cl.Create(ctx, want)
				if err != nil {
					c.Fatalf("Create: %v", err)
				}
				defer freeBuffer(c, src)
				dst, err := cl.Empty(ctx, 4096)
				if err != nil {
					c.Fatalf("Empty: %v", err)
				}
				defer freeBuffer(c, dst)
				for round := range 3 {
					want = pattern(uint64(13+round), 4096)
					if err := src.Write(ctx, 0, want); err != nil {
						c.Fatalf("Write: %v", err)
					}
					if err := cl.Run(ctx, kernel.CopyWords(1024), src, dst); err != nil {
						c.Fatalf("copy: %v", err)
					}
					got, err := dst.Read(ctx)
					if err != nil {
						c.Fatalf("Read: %v", err)
					}
					compareBytes(c, want, got, fmt.Sprintf("round %d: a kernel's copy of a host write", round))
				}
			},
		},
		{
			Name: "device/dryrun-fidelity",
			Rule: "A workload's dry run reports the same pools as its real run (usage, pages, peaks, largest allocation), at its peak and at its end",
			run:  withClient(open, checkDryRunFidelity),
		},
		{
			Name: "device/dryrun-holds-nothing",
			Rule: "A dry run holds no device memory: reads return zeros, writes and launches are dropped, and the device's holdings do not move",
			run:  withClient(open, checkDryRunHoldsNothing),
		},
		{
			Name: "device/measured-plan-fits",
			Rule: "A plan measured from a workload's dry run fits its real run: no reservation spills and the real run holds no more pages than the dry run peaked at",
			run:  withClient(open, checkMeasuredPlan),
		},
		{
			Name: "install/invalid-layout",
			Rule: "Installing an invalid layout (no pools, a zero page, a slice larger than its page, a page cap outside 1..65535) is an *memory.InstallError of kind InvalidLayout and changes nothing",
			run:  withClient(open, checkInvalidLayouts),
		},
		{
			Name: "install/pools-in-use",
			Rule: "Installing while the stream holds live buffers is an *memory.InstallError of kind PoolsInUse, transient, keeping the old layout and every byte; once they are freed it succeeds",
			run:  withClient(open, checkPoolsInUse),
		},
		{
			Name: "install/applies-to-new-streams",
			Rule: "An installed layout is the calling stream's and becomes the layout of streams created afterwards, which serve buffers under it",
			run:  withClient(open, checkInstallAppliesToNewStreams),
		},
		{
			Name: "install/stream-local",
			Rule: "A layout installed on one stream alone leaves the layout of the client, of other streams and of streams created afterwards as they were",
			run:  withClient(open, checkStreamLocalInstall),
		},
		{
			Name: "records/round-trip",
			Rule: "A memory record written to an environment (SQLite in a directory of its own) reads back with the same label and the same report, after the environment is reopened",
			run:  func(c *checkState) { checkRecordsRoundTrip(c, open) },
		},
		{
			Name: "device/concurrent-streams",
			Rule: "Streams used concurrently under load (churn, kernels, a dry run, cleanups) each see only their own data, all of it correct",
			run:  withClient(open, checkConcurrentStreams),
		},
	}...)
	checks = append(checks, lostChecks(open)...)
	checks = append(checks, contractChecks(open)...)
	return append(checks, kernelChecks(open)...)
}

// withClient is a check run on a client of its own.
func withClient(open OpenClient, check func(c *checkState, cl *client.Client)) func(c *checkState) {
	return func(c *checkState) { check(c, openClient(c, open, DeviceConfig{})) }
}

func freeBuffer(c *checkState, b *client.Buffer) {
	if err := b.Free(); err != nil {
		c.Errorf("freeing buffer %d (%d B): %v", b.ID(), b.Size(), err)
	}
}

func freeAll(c *checkState, bufs []*client.Buffer) {
	for _, b := range bufs {
		freeBuffer(c, b)
	}
}

// upToLargestPage is size, or the device's largest page where that is
// less, in whole alignment units: a device may allocate no more than a few
// MiB at once, and a buffer past every pool is refused for its size, not
// for want of memory.
func upToLargestPage(p vkruntime.DeviceProperties, size uint64) uint64 {
	if p.MaxPageSize != 0 && p.MaxPageSize < size {
		size = p.MaxPageSize
		if a := p.Alignment; a > 1 && size >= a {
			size -= size % a
		}
	}
	return size
}

// fillSize is the size of fillDevice's buffers: a quarter of the limit,
// or the device's largest page where that is less.
func fillSize(p vkruntime.DeviceProperties) uint64 { return upToLargestPage(p, deviceLimit/4) }

// fillDevice makes buffers of fillSize until the device refuses one (or
// twice the limit fits), writing a byte into each so it is held.
func fillDevice(c *checkState, cl *client.Client) ([]*client.Buffer, error) {
	var bufs []*client.Buffer
	size := fillSize(cl.Properties())
	for range 2 * deviceLimit / size {
		b, err := cl.Empty(c.Context(), size)
		if err != nil {
			return bufs, err
		}
		bufs = append(bufs, b)
		if err := b.Write(c.Context(), 0, []byte{1}); err != nil {
			return bufs, err
		}
	}
	return bufs, nil
}

func checkZeroed(c *checkState, cl *client.Client) {
	ctx := c.Context()
	sizes := []uint64{1, 3, 4, 17, 255, 4096, 4099, 65537}
	// Dirty the memory the pools will hand out next: write a pattern into
	// buffers of every size and free them.
	for round := range 2 {
		var dirty []*client.Buffer
		for i, size := range sizes {
			b, err := cl.Create(ctx, pattern(uint64(500+i), size))
			if err != nil {
				c.Fatalf("Create(%d B): %v", size, err)
			}
			dirty = append(dirty, b)
		}
		freeAll(c, dirty)
		for _, size := range sizes {
			b, err := cl.Empty(ctx, size)
			if err != nil {
				c.Fatalf("Empty(%d B): %v", size, err)
			}
			var got []byte
			if round == 0 {
				got, err = b.Read(ctx)
			} else {
				// Through a kernel: copy the fresh buffer into a dirty one.
				words := (size + 3) / 4
				dst, cerr := cl.Create(ctx, pattern(600, 4*words))
				if cerr != nil {
					c.Fatalf("Create: %v", cerr)
				}
				src := b
				if size%4 != 0 {
					// Kernels bind whole words: read a word-sized fresh buffer.
					freeBuffer(c, b)
					if src, err = cl.Empty(ctx, 4*words); err != nil {
						c.Fatalf("Empty(%d B): %v", 4*words, err)
					}
					b = src
				}
				if err = cl.Run(ctx, kernel.CopyWords(uint32(words)), src, dst); err == nil {
					got, err = dst.Read(ctx)
				}
				freeBuffer(c, dst)
			}
			if err != nil {
				c.Errorf("round %d: a fresh buffer of %d B: %v", round, size, err)
			} else {
				compareBytes(c, make([]byte, len(got)), got, fmt.Sprintf("a fresh buffer of %d B read %s", len(got), []string{"by the host", "through a kernel"}[round]))
			}
			freeBuffer(c, b)
		}
	}
	// A partial write leaves the rest zero.
	b, err := cl.Empty(ctx, 4099)
	if err != nil {
		c.Fatalf("Empty: %v", err)
	}
	defer freeBuffer(c, b)
	if err := b.Write(ctx, 1001, pattern(700, 13)); err != nil {
		c.Fatalf("Write: %v", err)
	}
	got, err := b.Read(ctx)
	if err != nil {
		c.Fatalf("Read: %v", err)
	}
	want := make([]byte, 4099)
	copy(want[1001:], pattern(700, 13))
	compareBytes(c, want, got, "a fresh buffer after 13 B were written at 1001")
}

// churnBuffers is churn through the client: a stream with layout l
// installed, buffers made, written, read back and freed at random, some
// inside a persistent window.
func churnBuffers(c *checkState, cl *client.Client, l memory.Layout) {
	s, err := cl.NewStream()
	if err != nil {
		c.Fatalf("NewStream: %v", err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			c.Errorf("closing stream %d: %v", s.ID(), err)
		}
	}()
	ctx := client.WithStream(c.Context(), s)
	if err := cl.InstallMemoryPools(ctx, l); err != nil {
		c.Errorf("installing %v on a fresh stream: %v", l, err)
		return
	}
	type live struct {
		b    *client.Buffer
		seed uint64
	}
	var bufs []live
	rng := rand.New(rand.NewPCG(0xC4, uint64(l.Kind())))
	corrupt := 0
	verify := func(x live, when string) {
		got, err := x.b.Read(ctx)
		if err != nil {
			c.Errorf("layout %v: reading buffer %d (%d B) %s: %v", l, x.b.ID(), x.b.Size(), when, err)
			return
		}
		corrupt += compareBytes(c, pattern(x.seed, x.b.Size()), got, fmt.Sprintf("layout %v: buffer %d (%d B) %s", l, x.b.ID(), x.b.Size(), when))
	}
	step := func(i int) {
		if len(bufs) >= 24 || (len(bufs) > 0 && rng.IntN(3) == 0) {
			k := rng.IntN(len(bufs))
			verify(bufs[k], "when freed")
			freeBuffer(c, bufs[k].b)
			bufs[k] = bufs[len(bufs)-1]
			bufs = bufs[:len(bufs)-1]
			return
		}
		size := churnSize(rng, 256<<10)
		seed := uint64(1000 + i)
		b, err := s.Create(ctx, pattern(seed, size))
		if errors.Is(err, vkruntime.ErrBufferTooBig) {
			return
		}
		if err != nil {
			c.Errorf("layout %v: a buffer of %d B: %v", l, size, err)
			return
		}
		bufs = append(bufs, live{b, seed})
	}
	const steps = 120
	for i := range steps / 3 {
		step(i)
	}
	err = cl.Persistent(ctx, func(ctx context.Context) error {
		for i := steps / 3; i < steps/2; i++ {
			step(i)
		}
		return nil
	})
	if err != nil {
		c.Errorf("layout %v: a persistent window: %v", l, err)
	}
	for i := steps / 2; i < steps; i++ {
		step(i)
	}
	for _, x := range bufs {
		verify(x, "at the end of the churn")
		freeBuffer(c, x.b)
	}
	if corrupt > 0 {
		c.Errorf("layout %v: %d corrupt bytes in all", l, corrupt)
	}
}

// workload is a small model-shaped piece of work: weights in a persistent
// window, layers of matmul and activation with temporaries (some of odd
// sizes) freed as it goes. peak is called where it holds the most.
func workload(cl *client.Client, peak func(ctx context.Context)) client.Workload {
	return func(ctx context.Context) error {
		const rows, width = 8, 96
		x, err := cl.Create(ctx, pattern(800, 4*rows*width))
		if err != nil {
			return err
		}
		// Weights live in a persistent window, as a model's do.
		var weights []*client.Buffer
		err = cl.Persistent(ctx, func(ctx context.Context) error {
			for layer := range 4 {
				w, err := cl.Create(ctx, pattern(uint64(810+layer), 4*width*width))
				if err != nil {
					return err
				}
				weights = append(weights, w)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for layer, w := range weights {
			// A scratch buffer of an odd size per layer, freed out of order.
			scratch, err := cl.Empty(ctx, uint64(1000+777*layer))
			if err != nil {
				return err
			}
			h, err := cl.Empty(ctx, 4*rows*width)
			if err != nil {
				return err
			}
			if err := scratch.Free(); err != nil {
				return err
			}
			if err := cl.Run(ctx, kernel.MatMul(rows, width, width), x, w, h); err != nil {
				return err
			}
			act, err := cl.Empty(ctx, 4*rows*width)
			if err != nil {
				return err
			}
			if err := cl.Run(ctx, kernel.GELU(rows*width), h, act); err != nil {
				return err
			}
			if layer == len(weights)-1 && peak != nil {
				peak(ctx)
			}
			if err := h.Free(); err != nil {
				return err
			}
			if err := x.Free(); err != nil {
				return err
			}
			x = act
		}
		if _, err := x.Read(ctx); err != nil {
			return err
		}
		for _, w := range append(weights, x) {
			if err := w.Free(); err != nil {
				return err
			}
		}
		return nil
	}
}

// reportJSON is a report in its JSON form, which is how reports compare.
func reportJSON(r memory.Report) string {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Sprintf("(unencodable report: %v)", err)
	}
	return string(b)
}

// comparableReport strips what a dry run legitimately differs in: its pages are
// unmapped.
func comparableReport(r memory.Report) memory.Report {
	r.Dynamic = append([]memory.PoolReport(nil), r.Dynamic...)
	for i := range r.Dynamic {
		r.Dynamic[i].PagesUnmapped = 0
	}
	r.Persistent.PagesUnmapped = 0
	return r
}

func checkDryRunFidelity(c *checkState, cl *client.Client) {
	run := func(dry bool) (peak, end memory.Report) {
		s, err := cl.NewStream()
		if err != nil {
			c.Fatalf("NewStream: %v", err)
		}
		defer s.Close()
		ctx := client.WithStream(c.Context(), s)
		if dry {
			ctx = dryrun.With(ctx)
		}
		if err := workload(cl, func(context.Context) { peak = s.Report() })(ctx); err != nil {
			c.Fatalf("the workload (dry run %v): %v", dry, err)
		}
		return peak, s.Report()
	}
	dryPeak, dryEnd := run(true)
	realPeak, realEnd := run(false)
	for _, x := range []struct {
		when      string
		dry, real memory.Report
	}{{"at the peak", dryPeak, realPeak}, {"at the end", dryEnd, realEnd}} {
		d, r := reportJSON(comparableReport(x.dry)), reportJSON(comparableReport(x.real))
		if d != r {
			c.Errorf("%s: the dry run reports %s, the real run %s", x.when, d, r)
		}
	}
	if u := dryPeak.Usage(); u.NumberAllocs == 0 {
		c.Errorf("the dry run's report at the peak shows no allocations: %+v", dryPeak)
	}
}

func checkDryRunHoldsNothing(c *checkState, cl *client.Client) {
	held := deviceStorage(cl).Held
	s, err := cl.NewStream()
	if err != nil {
		c.Fatalf("NewStream: %v", err)
	}
	defer s.Close()
	ctx := dryrun.With(client.WithStream(c.Context(), s))
	before := held()
	b, err := cl.Create(ctx, pattern(900, 4096))
	if err != nil {
		c.Fatalf("Create under a dry run: %v", err)
	}
	if err := b.Write(ctx, 5, []byte{1, 2, 3}); err != nil {
		c.Errorf("Write under a dry run: %v", err)
	}
	out, err := cl.Empty(ctx, 4096)
	if err != nil {
		c.Fatalf("Empty under a dry run: %v", err)
	}
	if err := cl.Run(ctx, kernel.FillWords(1024, 0xFFFFFFFF), out); err != nil {
		c.Errorf("a launch under a dry run: %v", err)
	}
	for _, x := range []*client.Buffer{b, out} {
		got, err := x.Read(ctx)
		if err != nil {
			c.Errorf("Read under a dry run: %v", err)
		} else {
			compareBytes(c, make([]byte, x.Size()), got, fmt.Sprintf("buffer %d read under a dry run", x.ID()))
		}
	}
	if after := held(); after != before {
		c.Errorf("the device held %d B before the dry run's buffers and %d B with them", before, after)
	}
	if err := cl.Run(ctx, kernel.FillWords(2048, 0), out); err == nil {
		c.Errorf("a launch past the end of a buffer was accepted under a dry run (launches are validated)")
	}
	freeBuffer(c, b)
	freeBuffer(c, out)
}

func checkMeasuredPlan(c *checkState, cl *client.Client) {
	s, err := cl.NewStream()
	if err != nil {
		c.Fatalf("NewStream: %v", err)
	}
	defer s.Close()
	ctx := client.WithStream(c.Context(), s)
	m, err := cl.MeasurePlan(ctx, workload(cl, nil), client.MeasureOptions{Verify: true})
	if err != nil {
		c.Fatalf("MeasurePlan: %v", err)
	}
	if !m.Verified {
		c.Errorf("the real run under the plan did not run")
	}
	if m.Spills != 0 {
		c.Errorf("%d reservations spilled past the plan %s", m.Spills, m.Plan.Brief())
	}
	if m.DeviceBytes != 0 {
		c.Errorf("the dry run held %d B of device memory", m.DeviceBytes)
	}
	var dryPeak, realPeak uint64
	for _, p := range m.DryRun.Dynamic {
		dryPeak += p.PagesPeak
	}
	for _, p := range m.Real.Dynamic {
		realPeak += p.PagesPeak
	}
	if realPeak > dryPeak {
		c.Errorf("the real run peaked at %d pages under the plan, the dry run at %d", realPeak, dryPeak)
	}
	if !s.Layout().Equal(m.Plan) {
		c.Errorf("the stream's layout is %s, the plan %s", s.Layout().Brief(), m.Plan.Brief())
	}
}

func checkInvalidLayouts(c *checkState, cl *client.Client) {
	ctx := c.Context()
	before := cl.DefaultStream().Layout()
	page := uint64(1 << 20)
	small, zero, over := uint64(1<<21), uint64(0), uint64(65536)
	for _, bad := range []struct {
		what string
		l    memory.Layout
	}{
		{"no pools", memory.SlicedLayout()},
		{"a zero page", memory.SlicedLayout(memory.SlicedPool{PageSize: 0})},
		{"a slice larger than its page", memory.SlicedLayout(memory.SlicedPool{PageSize: page, MaxSlice: &small})},
		{"a page cap of 0", memory.SlicedLayout(memory.SlicedPool{PageSize: page, Pages: &zero})},
		{"a page cap of 65536", memory.SlicedLayout(memory.SlicedPool{PageSize: page, Pages: &over})},
	} {
		err := cl.InstallMemoryPools(ctx, bad.l)
		var ie *memory.InstallError
		switch {
		case err == nil:
			c.Errorf("%s: installed", bad.what)
		case !errors.As(err, &ie):
			c.Errorf("%s: %v (%T) is not an *memory.InstallError", bad.what, err, err)
		case ie.Kind != memory.InvalidLayout:
			c.Errorf("%s: %v is of kind %v, not InvalidLayout", bad.what, err, ie.Kind)
		case ie.Transient():
			c.Errorf("%s: %v says it is worth retrying", bad.what, err)
		}
	}
	if after := cl.DefaultStream().Layout(); !after.Equal(before) {
		c.Errorf("the stream's layout went from %v to %v", before, after)
	}
	if l := cl.Layout(); !l.Equal(before) {
		c.Errorf("the layout of new streams went from %v to %v", before, l)
	}
}

func checkPoolsInUse(c *checkState, cl *client.Client) {
	ctx := c.Context()
	before := cl.DefaultStream().Layout()
	want := pattern(1100, 5000)
	b, err := cl.Create(ctx, want)
	if err != nil {
		c.Fatalf("Create: %v", err)
	}
	next := memory.ExclusivePagesLayout()
	err = cl.InstallMemoryPools(ctx, next)
	var ie *memory.InstallError
	switch {
	case err == nil:
		c.Errorf("installed %v with a live buffer", next)
	case !errors.As(err, &ie):
		c.Errorf("%v (%T) is not an *memory.InstallError", err, err)
	case ie.Kind != memory.PoolsInUse:
		c.Errorf("%v is of kind %v, not PoolsInUse", err, ie.Kind)
	case !ie.Transient():
		c.Errorf("%v does not say it is worth retrying", err)
	case ie.BytesInUse == 0:
		c.Errorf("%v names no bytes in use", err)
	}
	if after := cl.DefaultStream().Layout(); !after.Equal(before) {
		c.Errorf("after the refusal the stream's layout is %v, it was %v", after, before)
	}
	if got, err := b.Read(ctx); err != nil {
		c.Errorf("reading the live buffer after the refusal: %v", err)
	} else {
		compareBytes(c, want, got, "the live buffer after a refused install")
	}
	freeBuffer(c, b)
	if err := cl.InstallMemoryPools(ctx, next); err != nil {
		c.Errorf("installing %v once the buffer was freed: %v", next, err)
	}
}

func checkInstallAppliesToNewStreams(c *checkState, cl *client.Client) {
	ctx := c.Context()
	large := upToLargestPage(cl.Properties(), 4<<20)
	page := min(uint64(256<<10), large)
	slice := page / 4
	l := memory.SlicedLayout(memory.SlicedPool{PageSize: page, MaxSlice: &slice}, memory.SlicedPool{PageSize: large})
	if err := cl.InstallMemoryPools(ctx, l); err != nil {
		c.Fatalf("installing %v: %v", l, err)
	}
	if got := cl.DefaultStream().Layout(); !got.Equal(l) {
		c.Errorf("the calling stream's layout is %v, installed %v", got, l)
	}
	s, err := cl.NewStream()
	if err != nil {
		c.Fatalf("NewStream: %v", err)
	}
	defer s.Close()
	if got := s.Layout(); !got.Equal(l) {
		c.Errorf("a stream created after the install has layout %v, installed %v", got, l)
	}
	sctx := client.WithStream(ctx, s)
	b, err := cl.Create(sctx, pattern(1200, 3000))
	if err != nil {
		c.Fatalf("Create on the new stream: %v", err)
	}
	r := s.Report()
	if len(r.Dynamic) != 2 {
		c.Errorf("the new stream's report has %d dynamic pools, the layout 2: %+v", len(r.Dynamic), r)
	} else if r.Dynamic[0].Usage.NumberAllocs != 1 {
		c.Errorf("a buffer of 3000 B did not land in the first pool (pages of %d B, slices up to %d B): %+v", page, slice, r)
	}
	freeBuffer(c, b)
}

func checkStreamLocalInstall(c *checkState, cl *client.Client) {
	before := cl.Layout()
	a, err := cl.NewStream()
	if err != nil {
		c.Fatalf("NewStream: %v", err)
	}
	defer a.Close()
	b, err := cl.NewStream()
	if err != nil {
		c.Fatalf("NewStream: %v", err)
	}
	defer b.Close()
	l := memory.DirectLayout()
	if l.Equal(before) {
		l = memory.ExclusivePagesLayout()
	}
	if err := a.InstallMemoryPools(l); err != nil {
		c.Fatalf("installing %v on stream %d: %v", l, a.ID(), err)
	}
	if got := a.Layout(); !got.Equal(l) {
		c.Errorf("stream %d has layout %v after installing %v", a.ID(), got, l)
	}
	if got := b.Layout(); !got.Equal(before) {
		c.Errorf("stream %d's layout went from %v to %v when stream %d installed its own", b.ID(), before, got, a.ID())
	}
	if got := cl.Layout(); !got.Equal(before) {
		c.Errorf("the client's layout went from %v to %v when stream %d installed its own", before, got, a.ID())
	}
	d, err := cl.NewStream()
	if err != nil {
		c.Fatalf("NewStream: %v", err)
	}
	defer d.Close()
	if got := d.Layout(); !got.Equal(before) {
		c.Errorf("a stream created afterwards has layout %v, not the client's %v", got, before)
	}
}

func checkRecordsRoundTrip(c *checkState, open OpenClient) {
	dir, err := os.MkdirTemp("", "vkrt-conformance-env-")
	if err != nil {
		c.Fatalf("a temporary directory: %v", err)
	}
	c.Cleanup(func() { _ = os.RemoveAll(dir) })
	const name = "conformance"
	cl := openClient(c, open, DeviceConfig{Options: []client.Option{client.WithEnvironment(name, environment.WithDir(dir))}})
	ctx := c.Context()
	b, err := cl.Create(ctx, pattern(1300, 10000))
	if err != nil {
		c.Fatalf("Create: %v", err)
	}
	want := cl.MemoryReport(ctx)
	const label = "conformance: one buffer of 10000 B"
	entry, err := cl.RecordMemory(ctx, label)
	if err != nil {
		c.Fatalf("RecordMemory: %v", err)
	}
	freeBuffer(c, b)
	if err := cl.Close(); err != nil {
		c.Errorf("closing the client: %v", err)
	}
	env, err := environment.Open(name, environment.WithDir(dir), environment.WithoutCreate())
	if err != nil {
		c.Fatalf("reopening the environment: %v", err)
	}
	defer env.Close()
	recs, err := client.MemoryRecords(ctx, env, environment.Query{})
	if err != nil {
		c.Fatalf("reading the records: %v", err)
	}
	if len(recs) != 1 {
		c.Fatalf("%d records read back, 1 written", len(recs))
	}
	got := recs[0]
	if got.Entry.ID != entry.ID || got.Entry.Label != label || got.Value.Label != label {
		c.Errorf("read back entry %+v with label %q, wrote entry %+v with label %q", got.Entry, got.Value.Label, entry, label)
	}
	if g, w := reportJSON(got.Value.Report), reportJSON(want); g != w {
		c.Errorf("read back report %s, wrote %s", g, w)
	}
}

func checkConcurrentStreams(c *checkState, cl *client.Client) {
	const workers, rounds = 4, 8
	layouts := []memory.Layout{memory.SubSlicesLayout(), memory.ExclusivePagesLayout(), memory.DirectLayout()}
	// The odd-sized buffers go up to 200,000 B, or the device's largest
	// page where that is less: past it every pool refuses them.
	extraMax := upToLargestPage(cl.Properties(), 200000)
	var wg sync.WaitGroup
	for w := range workers {
		s, err := cl.NewStream()
		if err != nil {
			c.Fatalf("NewStream: %v", err)
		}
		defer s.Close()
		c.Go(&wg, func() {
			ctx := client.WithStream(c.Context(), s)
			if w == workers-1 {
				ctx = dryrun.With(ctx)
			}
			dry := dryrun.Active(ctx)
			for r := range rounds {
				// Between rounds the stream holds nothing: its own install
				// races the other streams' work.
				if r%3 == 2 {
					if err := s.InstallMemoryPools(layouts[(w+r)%len(layouts)]); err != nil {
						c.Errorf("worker %d round %d: installing on its own idle stream: %v", w, r, err)
					}
				}
				n := uint32(257 + 31*w + r)
				a, b := floats(n, uint64(w*100+r)), floats(n, uint64(w*100+r+50))
				extra := pattern(uint64(w*1000+r), 1+uint64(w*7919+r*104729)%extraMax)
				var bufs []*client.Buffer
				create := func(data []byte) *client.Buffer {
					x, err := cl.Create(ctx, data)
					if err != nil {
						c.Errorf("worker %d round %d: Create(%d B): %v", w, r, len(data), err)
						return nil
					}
					bufs = append(bufs, x)
					return x
				}
				ab, bb, eb := create(bytesOf(a)), create(bytesOf(b)), create(extra)
				out, err := cl.Empty(ctx, 4*uint64(n))
				if err == nil {
					bufs = append(bufs, out)
				}
				if ab == nil || bb == nil || eb == nil || err != nil {
					c.Errorf("worker %d round %d: buffers: %v", w, r, err)
					freeAll(c, bufs)
					return
				}
				if err := cl.Run(ctx, kernel.Add(n), ab, bb, out); err != nil {
					c.Errorf("worker %d round %d: add: %v", w, r, err)
				}
				got, err := out.Read(ctx)
				switch {
				case err != nil:
					c.Errorf("worker %d round %d: Read: %v", w, r, err)
				case dry:
					compareBytes(c, make([]byte, len(got)), got, fmt.Sprintf("worker %d round %d: a dry run's read", w, r))
				default:
					want := make([]float32, n)
					for i := range want {
						want[i] = a[i] + b[i]
					}
					closeFloats(c, want, floatsOf(got), 1e-6, fmt.Sprintf("worker %d round %d: add", w, r))
				}
				if got, err := eb.Read(ctx); err != nil {
					c.Errorf("worker %d round %d: Read: %v", w, r, err)
				} else if !dry {
					compareBytes(c, extra, got, fmt.Sprintf("worker %d round %d: a buffer of %d B", w, r, len(extra)))
				}
				freeAll(c, bufs)
			}
		})
	}
	done := make(chan struct{})
	var bg sync.WaitGroup
	c.Go(&bg, func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			cl.MemoryCleanup(c.Context())
			_ = cl.MemoryUsage(c.Context())
		}
	})
	wg.Wait()
	close(done)
	bg.Wait()
}
