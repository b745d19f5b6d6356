// Package vk is vkrt's Vulkan backend: it loads the system's Vulkan loader
// (libvulkan.so.1) at run time, lists the physical devices ([Devices]), and
// opens one as a [Device], a device.Device that offers
//
//   - a storage over device memory (one VkDeviceMemory with one storage
//     VkBuffer bound over all of it per page, no page past the driver's
//     maxMemoryAllocationSize), safe for concurrent use, that keeps a
//     running total against the heap, an optional memory limit and the
//     heap's budget, with out-of-memory errors that carry the numbers; it
//     is a vkruntime.SparseStorage, whose virtual ranges are sparse buffers
//     bound granule by granule with vkQueueBindSparse where the device has
//     sparse residency (elsewhere its granule is 0);
//   - transfers between host memory and any byte range of a page (mapped when
//     the memory is host-visible, through a staging buffer when not);
//   - the kernels of the kernel package, compiled from their embedded SPIR-V
//     on first use and run in batches whose wait a context can end.
//
// Importing the package registers it as the default backend of
// device.Open (and so of client.Open). [Device.Close] waits for the calls
// already running; calls after it fail with [ErrClosed].
//
// The backend needs cgo: built with CGO_ENABLED=0, Open and Devices fail
// with [ErrNoCgo]. Nothing here needs the Vulkan development headers or
// libvulkan.so: only the loader package (Debian: libvulkan1) and a driver
// (Mesa's lavapipe in mesa-vulkan-drivers runs everything on the CPU).
//
// vulkan-go loads the entry points and makes the calls that take handles
// and numbers; every call that hands the driver structures (submissions,
// binds, descriptor writes, pipelines, buffers, memory) is built by the
// package's own C (vkrt_calls.c) on the C stack, where no Go finalizer can
// free it mid-call (calls.go says why). Its structures mirror Khronos'
// (vkrt_vk.h), checked field by field against vulkan_core.h by a test.
package vk
