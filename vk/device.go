//go:build cgo

package vk

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/internal/callgate"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Device is an opened Vulkan device: its storage, transfers and kernels. All
// methods are safe for concurrent use; Close should come last, and when it
// does not, it waits for the calls already running while later ones fail
// with ErrClosed.
type Device struct {
	info     DeviceInfo
	inst     *instance
	physical vulkan.PhysicalDevice
	handle   vulkan.Device
	queue    vulkan.Queue
	family   uint32
	queueMu  sync.Mutex
	calls    deviceCalls // the entry points of calls that take structures

	memoryType uint32
	heapIndex  int
	// sparseGranule is the binding granularity of a sparse buffer, 0 where
	// the device (or its storage's memory type) has no sparse residency;
	// sparseSpace what all its virtual ranges may take of the sparse
	// address space (runtime.RangesSpace).
	sparseGranule, sparseSpace uint64
	hostVisible                bool // the storage's memory is host-visible and coherent: transfers map it

	storage *Storage

	ctxMu    sync.Mutex
	freeCtxs []*submitContext
	allCtxs  []*submitContext

	stagingMu sync.Mutex
	staging   *hostBuffer

	empty *hostBuffer // bound where a binding is empty: descriptors may not be

	pipeMu    sync.Mutex
	pipelines map[string]*pipeline
	pace      dispatchPace // how much work a submission holds (Dispatch)

	// abandoned holds, per submission whose caller stopped waiting (its
	// context ended), a channel closed once the GPU finished it and its
	// resources went back; later work waits for them (settle), Close too.
	abandonedMu sync.Mutex
	abandoned   []chan struct{}
	// abandonedN is len(abandoned), read without the lock so that a
	// transfer with nothing abandoned before it takes no lock to know.
	abandonedN atomic.Int32
	inFlight   sync.WaitGroup

	lost          atomic.Bool
	validationMu  sync.Mutex
	validationErr error

	// gate admits the calls that use the device's Vulkan objects (begin
	// and end); Close closes it and waits for them before it destroys
	// anything.
	gate callgate.Gate
	// closed is closed once the first Close has destroyed the device, so
	// that a later Close returns no earlier.
	closed chan struct{}
}

func init() {
	device.Register("vulkan", func(ctx context.Context, cfg device.Config) (device.Device, error) {
		d, err := Open(cfg.Index, WithMemoryLimit(cfg.MemoryLimit), WithValidation(cfg.Validation))
		if err != nil {
			return nil, err
		}
		return d, nil
	})
}

var _ device.Device = (*Device)(nil)

// Open opens the physical device at index (in the order of Devices). An
// index past the devices the loader found, or an option out of its range
// (a memory fraction outside (0, 1] or one that leaves no byte), fails with
// an error matching runtime.ErrInvalidArgument; a machine with no device
// at all with one matching device.ErrUnavailable.
func Open(index int, opts ...Option) (*Device, error) {
	o := newConfig(opts)
	if o.fractionSet && !(o.memoryFraction > 0 && o.memoryFraction <= 1) {
		return nil, fmt.Errorf("vk: memory fraction %v is outside (0, 1]: %w", o.memoryFraction, vkruntime.ErrInvalidArgument)
	}
	inst, err := acquireInstance(o.validation)
	if err != nil {
		return nil, err
	}
	physical, err := inst.physicalDevices()
	if err != nil {
		releaseInstance(inst)
		return nil, err
	}
	if len(physical) == 0 {
		releaseInstance(inst)
		return nil, fmt.Errorf("%w: the loader found no Vulkan device (Debian: mesa-vulkan-drivers runs one on the CPU)", ErrNoVulkan)
	}
	if index < 0 || index >= len(physical) {
		releaseInstance(inst)
		devices := fmt.Sprintf("devices 0..%d", len(physical)-1)
		if len(physical) == 1 {
			devices = "device 0 only"
		}
		return nil, fmt.Errorf("vk: no Vulkan device %d: the loader found %s (vkrt devices lists them): %w", index, devices, vkruntime.ErrInvalidArgument)
	}
	d := &Device{inst: inst, physical: physical[index], pipelines: map[string]*pipeline{}, closed: make(chan struct{})}
	var err2 error
	withoutGC(func() {
		d.info = describe(inst, d.physical, index)
		err2 = d.create(o.staged)
	})
	if err := err2; err != nil {
		d.destroy()
		return nil, err
	}
	limit, err := storageLimit(o, d.info.Heaps[d.heapIndex].Size)
	if err != nil {
		d.destroy()
		return nil, fmt.Errorf("vk: device %d (%s): %w", index, d.info.Name, err)
	}
	d.storage = &Storage{dev: d, pages: map[vkruntime.StorageID]*page{}, limit: limit}
	if err := d.checkValidation(); err != nil {
		d.destroy()
		return nil, err
	}
	return d, nil
}

// storageLimit is the smaller of the memory limit and the heap fraction
// asked for, 0 for none; a fraction that leaves no byte is refused rather
// than read as "no limit".
func storageLimit(o config, heap uint64) (uint64, error) {
	limit := o.memoryLimit
	if o.fractionSet {
		byFraction := uint64(o.memoryFraction * float64(heap))
		if byFraction == 0 {
			return 0, fmt.Errorf("memory fraction %v of the %d B heap leaves no byte to allocate: %w", o.memoryFraction, heap, vkruntime.ErrInvalidArgument)
		}
		if limit == 0 || byFraction < limit {
			limit = byFraction
		}
	}
	return limit, nil
}

func (d *Device) create(staged bool) error {
	families := queueFamilyFlags(d.inst.handle, d.physical)
	// The first compute family, or where the device has sparse residency
	// the first that binds sparse memory too: one queue orders dispatches
	// and binds.
	family, sparseFamily := -1, -1
	for i := range families {
		flags := vulkan.QueueFlagBits(families[i])
		if flags&vulkan.QueueComputeBit == 0 {
			continue
		}
		if family < 0 {
			family = i
		}
		if sparseFamily < 0 && flags&vulkan.QueueSparseBindingBit != 0 {
			sparseFamily = i
		}
	}
	if family < 0 {
		return fmt.Errorf("vk: device %d (%s) has no compute queue among its %d queue families", d.info.Index, d.info.Name, len(families))
	}
	sparse := d.info.SparseResidency && sparseFamily >= 0
	if sparse {
		family = sparseFamily
	}
	d.family = uint32(family)

	info := &vulkan.DeviceCreateInfo{
		SType:                vulkan.StructureTypeDeviceCreateInfo,
		QueueCreateInfoCount: 1,
		PQueueCreateInfos: []vulkan.DeviceQueueCreateInfo{{
			SType:            vulkan.StructureTypeDeviceQueueCreateInfo,
			QueueFamilyIndex: d.family,
			QueueCount:       1,
			PQueuePriorities: []float32{1},
		}},
	}
	var features vulkan.PhysicalDeviceFeatures
	if d.info.RobustBufferAccess {
		// Out-of-bounds shader accesses read zeros and drop writes instead
		// of touching a neighbour's memory.
		features.RobustBufferAccess = vulkan.True
	}
	if sparse {
		features.SparseBinding, features.SparseResidencyBuffer = vulkan.True, vulkan.True
	}
	info.PEnabledFeatures = []vulkan.PhysicalDeviceFeatures{features}
	if d.info.MemoryBudget {
		info.EnabledExtensionCount = 1
		info.PpEnabledExtensionNames = []string{cstr("VK_EXT_memory_budget")}
	}
	var handle vulkan.Device
	r := vulkan.CreateDevice(d.physical, info, nil, &handle)
	info.Free() // vulkan-go's copy of info, which it would not free
	if r != vulkan.Success {
		return fmt.Errorf("vk: vkCreateDevice on device %d (%s): %w", d.info.Index, d.info.Name, vkError(r))
	}
	d.handle = handle
	calls, err := newDeviceCalls(d.inst.handle, handle)
	if err != nil {
		return fmt.Errorf("vk: device %d (%s): %w", d.info.Index, d.info.Name, err)
	}
	d.calls = calls
	var queue vulkan.Queue
	vulkan.GetDeviceQueue(d.handle, d.family, 0, &queue)
	d.queue = queue

	bits, err := d.storageMemoryTypeBits()
	if err != nil {
		return err
	}
	mt, ok := chooseMemoryType(d.info.MemoryTypes, d.info.Heaps, bits)
	if !ok {
		return fmt.Errorf("vk: device %d (%s) offers no memory type for storage buffers (type bits %#x)", d.info.Index, d.info.Name, bits)
	}
	d.memoryType = uint32(mt.Index)
	d.heapIndex = mt.Heap
	d.hostVisible = mt.HostVisible && mt.HostCoherent && !staged
	if sparse {
		d.probeSparse()
	}
	empty, err := d.newHostBuffer(16)
	if err != nil {
		return err
	}
	d.empty = empty
	return nil
}

// storageMemoryTypeBits asks the driver which memory types can back a
// storage buffer, with a small probe buffer.
func (d *Device) storageMemoryTypeBits() (uint32, error) {
	buf, err := d.createBuffer(4096)
	if err != nil {
		return 0, err
	}
	defer vulkan.DestroyBuffer(d.handle, buf, nil)
	return d.calls.bufferRequirements(buf).memoryTypeBits, nil
}

const storageUsage = vulkan.BufferUsageFlags(vulkan.BufferUsageStorageBufferBit | vulkan.BufferUsageTransferSrcBit | vulkan.BufferUsageTransferDstBit)

func (d *Device) createBuffer(size uint64) (vulkan.Buffer, error) {
	return d.createBufferWith(size, 0)
}

func (d *Device) createBufferWith(size uint64, flags vulkan.BufferCreateFlagBits) (vulkan.Buffer, error) {
	buf, r := d.calls.createBuffer(size, uint32(storageUsage), uint32(flags))
	if r != vulkan.Success {
		return nil, fmt.Errorf("vk: vkCreateBuffer of %d B: %w", size, vkError(r))
	}
	return buf, nil
}

// chooseMemoryType picks the device-local type on the largest heap, and of
// those one that is not host-visible where there is a choice (the
// host-visible window of a discrete GPU may be small); without device-local
// types, the first allowed one.
func chooseMemoryType(types []MemoryType, heaps []HeapInfo, bits uint32) (MemoryType, bool) {
	best, found := MemoryType{}, false
	better := func(a, b MemoryType) bool {
		if a.DeviceLocal != b.DeviceLocal {
			return a.DeviceLocal
		}
		if heaps[a.Heap].Size != heaps[b.Heap].Size {
			return heaps[a.Heap].Size > heaps[b.Heap].Size
		}
		return !a.HostVisible && b.HostVisible
	}
	for _, t := range types {
		if bits&(1<<uint(t.Index)) == 0 {
			continue
		}
		if !found || better(t, best) {
			best, found = t, true
		}
	}
	return best, found
}

// Info describes the device.
func (d *Device) Info() DeviceInfo { return d.info }

// Name is the device's name as the driver reports it.
func (d *Device) Name() string { return d.info.Name }

// Limits are the facts a dispatch is checked against; Info().Limits has
// every limit the driver reports.
func (d *Device) Limits() kernel.Limits {
	l := d.info.Limits
	return kernel.Limits{
		Alignment:                d.Properties().Alignment,
		MaxStorageBufferRange:    l.MaxStorageBufferRange,
		MaxPushConstantsSize:     l.MaxPushConstantsSize,
		MaxComputeWorkGroupCount: l.MaxComputeWorkGroupCount,
		MaxLoopIterations:        loopIterations(d.info),
	}
}

// lavapipeLoopIterations is where llvmpipe's shaders leave their loops
// (LP_MAX_TGSI_LOOP_ITERATIONS, over every loop of an invocation): a
// ReduceSum of 2^24 elements by its one work group summed 131,070 of them.
const lavapipeLoopIterations = 65535

// loopIterations is the device's limit on a shader's loop iterations, 0
// where it has none (every driver but lavapipe, as far as is known).
func loopIterations(info DeviceInfo) uint64 {
	if info.DriverName == "llvmpipe" || strings.Contains(info.Name, "llvmpipe") {
		return lavapipeLoopIterations
	}
	return 0
}

// Storage is the device's storage (a *Storage); there is one per device,
// shared by all its users.
func (d *Device) Storage() device.Storage { return d.storage }

// Properties are the facts the memory pools size themselves by: alignment
// max(4, minStorageBufferOffsetAlignment), pages no larger than one storage
// buffer binding may cover, the heap, or the device's largest allocation,
// and the size of the heap the storage draws from.
func (d *Device) Properties() vkruntime.DeviceProperties {
	align := max(4, d.info.Limits.MinStorageBufferOffsetAlignment)
	maxPage := d.info.Limits.MaxStorageBufferRange / align * align
	heap := d.info.Heaps[d.heapIndex].Size
	if heap > 0 && maxPage > heap {
		maxPage = heap / align * align
	}
	if m := d.info.Limits.MaxMemoryAllocationSize; m > 0 && maxPage > m {
		maxPage = m / align * align
	}
	return vkruntime.DeviceProperties{Alignment: align, MaxPageSize: maxPage, MemorySize: heap}
}

// HostVisible reports whether the storage's memory is mapped into the host
// (transfers are plain copies) rather than reached through staging.
func (d *Device) HostVisible() bool { return d.hostVisible }

// Budget is the heap the storage draws from, as VK_EXT_memory_budget sees it
// now: what this process may use and what it uses. ok is false where the
// device lacks the extension, and once it is closed.
func (d *Device) Budget() (budget, usage uint64, ok bool) {
	if d.begin() != nil {
		return 0, 0, false // the instance may be gone with the device
	}
	defer d.end()
	return d.budget()
}

// budget is Budget within a call that began.
func (d *Device) budget() (budget, usage uint64, ok bool) {
	if !d.info.MemoryBudget {
		return 0, 0, false
	}
	b, ok := queryBudget(d.inst, d.physical)
	if !ok || d.heapIndex >= len(b.Budget) {
		return 0, 0, false
	}
	return b.Budget[d.heapIndex], b.Usage[d.heapIndex], true
}

// Err reports what makes the device unusable or untrustworthy: a lost
// device, or validation errors seen so far.
func (d *Device) Err() error {
	if d.lost.Load() {
		return fmt.Errorf("vk: device %d (%s): %w", d.info.Index, d.info.Name, vkruntime.ErrDeviceLost)
	}
	d.validationMu.Lock()
	defer d.validationMu.Unlock()
	return d.validationErr
}

// checkValidation collects the validation layer's errors since the last
// check; they stay on the device (Err, Close) and are returned once here.
func (d *Device) checkValidation() error {
	if d.inst.messages == nil {
		return nil
	}
	err := d.inst.validationErrors()
	if err == nil {
		return nil
	}
	d.validationMu.Lock()
	if d.validationErr == nil {
		d.validationErr = err
	} else {
		d.validationErr = errors.Join(d.validationErr, err)
	}
	d.validationMu.Unlock()
	return err
}

// usable fails fast on a closed or lost device.
func (d *Device) usable() error {
	if d.gate.Closed() {
		return d.closedError()
	}
	if d.lost.Load() {
		return fmt.Errorf("vk: device %d (%s): %w", d.info.Index, d.info.Name, vkruntime.ErrDeviceLost)
	}
	return nil
}

func (d *Device) closedError() error {
	return fmt.Errorf("vk: device %d (%s): %w", d.info.Index, d.info.Name, ErrClosed)
}

// begin admits a call that uses the device's Vulkan objects: it fails on a
// closed or lost device, and otherwise Close waits for the matching end
// before it destroys anything. Calls made between begin and end must not
// begin again (a Close in between would refuse them half way).
func (d *Device) begin() error {
	if err := d.usable(); err != nil {
		return err
	}
	if !d.gate.Enter() {
		return d.closedError()
	}
	return nil
}

func (d *Device) end() { d.gate.Leave() }

// noteResult records a lost device and turns a failed result into an error.
func (d *Device) noteResult(call string, r vulkan.Result) error {
	if r == vulkan.Success {
		return nil
	}
	err := fmt.Errorf("vk: %s on device %d (%s): %w", call, d.info.Index, d.info.Name, vkError(r))
	if isDeviceLost(err) {
		d.lost.Store(true)
	}
	return err
}

// Close waits for the calls running on the device and for the device to go
// idle, and releases every Vulkan object it made, the storage's pages
// included; calls made afterwards fail with ErrClosed. With validation on,
// it returns the validation errors seen over the device's life (leaked
// objects among them). A second Close returns nil once the first has
// released everything, so that no caller of Close goes on while the
// device is still in use.
func (d *Device) Close() error {
	if !d.gate.Close() { // calls already running end first; new ones fail with ErrClosed
		<-d.closed
		return nil
	}
	defer close(d.closed)
	if d.handle != nil {
		vulkan.DeviceWaitIdle(d.handle)
	}
	d.inFlight.Wait() // abandoned submissions hand their resources back
	d.destroy()
	return d.Err()
}

func (d *Device) destroy() {
	if d.handle != nil {
		if d.storage != nil {
			d.storage.releaseAll()
		}
		for _, p := range d.pipelines {
			p.destroy(d.handle)
		}
		d.pipelines = nil
		for _, c := range d.allCtxs {
			c.destroy(d.handle)
		}
		d.allCtxs, d.freeCtxs = nil, nil
		if d.staging != nil {
			d.staging.destroy(d.handle)
			d.staging = nil
		}
		if d.empty != nil {
			d.empty.destroy(d.handle)
			d.empty = nil
		}
		vulkan.DestroyDevice(d.handle, nil)
		d.handle = nil
		d.calls.free()
	}
	if d.inst != nil {
		_ = d.checkValidation() // leak reports arrive at vkDestroyDevice
		releaseInstance(d.inst)
	}
}

// submitContext is what one submission needs for itself: a command pool and
// buffer, a fence, and a descriptor pool. Contexts are reused, one
// submission at a time each.
type submitContext struct {
	pool     vulkan.CommandPool
	cmd      vulkan.CommandBuffer
	fence    vulkan.Fence
	descPool vulkan.DescriptorPool
	descSets uint32 // sets the descriptor pool holds
}

const maxBindings = 8

func (d *Device) acquireContext() (*submitContext, error) {
	d.ctxMu.Lock()
	if n := len(d.freeCtxs); n > 0 {
		c := d.freeCtxs[n-1]
		d.freeCtxs = d.freeCtxs[:n-1]
		d.ctxMu.Unlock()
		return c, nil
	}
	d.ctxMu.Unlock()

	c := &submitContext{}
	pool, r := d.calls.createCommandPool(d.family)
	if err := d.noteResult("vkCreateCommandPool", r); err != nil {
		return nil, err
	}
	c.pool = pool
	cmd, r := d.calls.allocateCommandBuffer(pool)
	if err := d.noteResult("vkAllocateCommandBuffers", r); err != nil {
		c.destroy(d.handle)
		return nil, err
	}
	c.cmd = cmd
	fence, r := d.calls.createFence()
	if err := d.noteResult("vkCreateFence", r); err != nil {
		c.destroy(d.handle)
		return nil, err
	}
	c.fence = fence
	d.ctxMu.Lock()
	d.allCtxs = append(d.allCtxs, c)
	d.ctxMu.Unlock()
	return c, nil
}

func (d *Device) releaseContext(c *submitContext) {
	d.ctxMu.Lock()
	d.freeCtxs = append(d.freeCtxs, c)
	d.ctxMu.Unlock()
}

func (c *submitContext) destroy(dev vulkan.Device) {
	if c.descPool != nil {
		vulkan.DestroyDescriptorPool(dev, c.descPool, nil)
	}
	if c.fence != nil {
		vulkan.DestroyFence(dev, c.fence, nil)
	}
	if c.pool != nil {
		vulkan.DestroyCommandPool(dev, c.pool, nil) // frees its command buffer
	}
}

// ensureDescriptors makes the context's descriptor pool hold at least sets
// descriptor sets of up to maxBindings storage buffers, and resets it.
func (d *Device) ensureDescriptors(c *submitContext, sets uint32) error {
	if sets == 0 {
		return nil
	}
	if c.descPool != nil && c.descSets >= sets {
		return d.noteResult("vkResetDescriptorPool", vulkan.ResetDescriptorPool(d.handle, c.descPool, 0))
	}
	if c.descPool != nil {
		vulkan.DestroyDescriptorPool(d.handle, c.descPool, nil)
		c.descPool = nil
	}
	capacity := max(sets, 64)
	pool, r := d.calls.createDescriptorPool(capacity, capacity*maxBindings)
	if err := d.noteResult("vkCreateDescriptorPool", r); err != nil {
		return err
	}
	c.descPool, c.descSets = pool, capacity
	return nil
}

// fenceWaitSlice is how long one fence wait lasts before the context is
// looked at again: short against a human's patience, long against the cost
// of a wait call.
const fenceWaitSlice = 20 * time.Millisecond

// submit records commands with record into a fresh command buffer, submits
// it and waits for the GPU to finish it. descriptorSets is how many
// descriptor sets record will allocate. release, which may be nil, hands
// back what the commands use (pinned pages); submit calls it exactly once,
// when the GPU no longer uses them. When ctx ends before the GPU finishes,
// submit returns ctx.Err() and a goroutine waits for the GPU instead, then
// releases: nothing the commands use is freed or reused before they end.
func (d *Device) submit(ctx context.Context, descriptorSets uint32, record func(c *submitContext) error, release func()) error {
	if release == nil {
		release = func() {}
	}
	if err := d.settle(ctx); err != nil {
		release()
		return err
	}
	c, err := d.acquireContext()
	if err != nil {
		release()
		return err
	}
	done := func() { d.releaseContext(c); release() }
	fail := func(err error) error { done(); return err }
	// Until the queue has taken the commands, none of them ran: a failure
	// before then says so (a failed vkQueueSubmit leaves what it names
	// unaffected).
	unsent := func(err error) error { done(); return &unsubmittedError{err} }
	if err := d.noteResult("vkResetCommandPool", vulkan.ResetCommandPool(d.handle, c.pool, 0)); err != nil {
		return unsent(err)
	}
	if err := d.ensureDescriptors(c, descriptorSets); err != nil {
		return unsent(err)
	}
	r, recordErr := d.recordAndSubmit(c, record)
	if recordErr != nil {
		return unsent(recordErr)
	}
	if err := d.noteResult("vkQueueSubmit", r); err != nil {
		return unsent(err)
	}
	fences := []vulkan.Fence{c.fence}
	for {
		timeout := uint64(math.MaxUint64)
		if ctx.Done() != nil {
			timeout = uint64(fenceWaitSlice)
		}
		r = vulkan.WaitForFences(d.handle, 1, fences, vulkan.True, timeout)
		if r != vulkan.Timeout {
			break
		}
		if ctx.Err() != nil {
			d.abandon(c, done)
			return ctx.Err()
		}
	}
	if err := d.noteResult("vkWaitForFences", r); err != nil {
		return fail(err)
	}
	err = d.noteResult("vkResetFences", vulkan.ResetFences(d.handle, 1, fences))
	done()
	if err != nil {
		return err
	}
	return d.checkValidation()
}

// abandon waits for a submission whose caller stopped waiting, in the
// background, and then runs done.
func (d *Device) abandon(c *submitContext, done func()) {
	finished := make(chan struct{})
	d.abandonedMu.Lock()
	d.abandoned = append(d.abandoned, finished)
	d.abandonedN.Store(int32(len(d.abandoned)))
	d.abandonedMu.Unlock()
	d.inFlight.Add(1)
	go func() {
		defer d.inFlight.Done()
		fences := []vulkan.Fence{c.fence}
		r := vulkan.WaitForFences(d.handle, 1, fences, vulkan.True, math.MaxUint64)
		if d.noteResult("vkWaitForFences", r) == nil {
			_ = d.noteResult("vkResetFences", vulkan.ResetFences(d.handle, 1, fences))
		}
		done()
		close(finished)
	}()
}

// settle waits until every abandoned submission has finished, so work
// submitted or transfers made from now on come after it.
func (d *Device) settle(ctx context.Context) error {
	if d.abandonedN.Load() == 0 {
		return nil
	}
	d.abandonedMu.Lock()
	pending := slices.Clone(d.abandoned)
	d.abandonedMu.Unlock()
	for _, ch := range pending {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if len(pending) > 0 {
		d.abandonedMu.Lock()
		d.abandoned = slices.DeleteFunc(d.abandoned, func(ch chan struct{}) bool {
			select {
			case <-ch:
				return true
			default:
				return false
			}
		})
		d.abandonedN.Store(int32(len(d.abandoned)))
		d.abandonedMu.Unlock()
	}
	return nil
}

// recordAndSubmit records c's command buffer with record and submits it.
// A recording error comes back as err; a driver result as r.
func (d *Device) recordAndSubmit(c *submitContext, record func(c *submitContext) error) (r vulkan.Result, err error) {
	r = d.calls.begin(c.cmd)
	if err := d.noteResult("vkBeginCommandBuffer", r); err != nil {
		return r, err
	}
	if err := record(c); err != nil {
		vulkan.EndCommandBuffer(c.cmd)
		return r, err
	}
	if err := d.noteResult("vkEndCommandBuffer", vulkan.EndCommandBuffer(c.cmd)); err != nil {
		return r, err
	}
	d.queueMu.Lock()
	r = d.calls.submit(d.queue, c.cmd, c.fence)
	d.queueMu.Unlock()
	return r, nil
}

// unsubmittedError is an error of submit before the queue took the
// commands: none of them ran. Its message is the error's own.
type unsubmittedError struct{ err error }

func (e *unsubmittedError) Error() string { return e.err.Error() }
func (e *unsubmittedError) Unwrap() error { return e.err }
