//go:build cgo

package vk

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkrt/vkrt/device"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Storage is a runtime.Storage over a device's memory: each allocation (a
// page) is one VkDeviceMemory with one storage VkBuffer bound over all of it.
// It is safe for concurrent use. Dealloc defers the release until Flush, and
// Flush releases a page only once no transfer or dispatch uses it.
type Storage struct {
	dev *Device

	mu          sync.Mutex
	pages       map[vkruntime.StorageID]*page
	deferred    []*page
	allocated   uint64 // bytes of device memory held, deferred pages included
	allocations int
	limit       uint64 // 0: none
	// virtualBytes is the sparse address space the virtual ranges take,
	// of the device's sparseSpace: until Flush destroys a released range's
	// buffer, the driver still counts it, and so does this.
	virtualBytes uint64
}

var (
	_ device.Storage = (*Storage)(nil)
)

type page struct {
	id       vkruntime.StorageID
	size     uint64 // bytes asked for; the usable range of the buffer
	held     uint64 // bytes of device memory behind it (the driver may round up)
	memory   vulkan.DeviceMemory
	buffer   vulkan.Buffer
	mapped   unsafe.Pointer // non-nil where the memory is host-visible
	pins     int            // transfers and dispatches using the page now
	released bool           // Dealloc was called
	virtual  bool           // a sparse buffer with no memory of its own (ReserveVirtual)
}

// Allocated is the number of bytes of device memory the storage holds,
// deallocated pages not yet flushed included.
func (s *Storage) Allocated() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allocated
}

// Allocations is the number of device allocations the storage holds.
func (s *Storage) Allocations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allocations
}

// Deferred is what deallocated pages the storage still holds come to: their
// bytes as asked of Alloc, and how many. They are those released since the
// last Flush and those a Flush kept because a transfer or dispatch still
// used them (a dispatch whose context ended runs on); a later Flush frees
// them once unused. Virtual ranges hold no memory and are not counted. A
// caller that keeps its own count of the bytes it holds (a memory limit
// kept above the storage) should take as freed by a Flush only its
// released bytes less Deferred's after it, not every byte it released.
func (s *Storage) Deferred() (bytes uint64, pages int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.deferred {
		if !p.virtual {
			bytes += p.size
			pages++
		}
	}
	return bytes, pages
}

// Limit is the storage's memory limit in bytes, 0 for none.
func (s *Storage) Limit() uint64 { return s.limit }

// MaxAllocationSize is the largest page the pools should ask for: what one
// storage-buffer binding may cover (maxStorageBufferRange), rounded down to
// the alignment. A page past it could be allocated but never bound whole to
// a kernel, so the pools refuse such a buffer when it is asked for
// (runtime.ErrBufferTooBig) rather than at its first launch.
func (s *Storage) MaxAllocationSize() uint64 {
	return s.dev.Properties().MaxPageSize
}

// Alloc makes one device allocation of size bytes. The storage keeps a
// running total of what it holds: an allocation that would take it past the
// heap, the storage's limit or the heap's budget (VK_EXT_memory_budget,
// where the device has it), or one the driver refuses, is a
// *runtime.OutOfMemoryError, and the storage stays as it was.
func (s *Storage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	d := s.dev
	if err := d.begin(); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	defer d.end()
	if size == 0 {
		return vkruntime.StorageHandle{}, fmt.Errorf("vk: a page needs at least one byte: %w", vkruntime.ErrZeroSize)
	}
	heap := d.info.Heaps[d.heapIndex].Size
	if size > heap {
		return vkruntime.StorageHandle{}, s.outOfMemory(size, "larger than the heap")
	}
	maxAlloc := d.info.Limits.MaxMemoryAllocationSize
	if maxAlloc != 0 && size > maxAlloc {
		return vkruntime.StorageHandle{}, s.outOfMemory(size, fmt.Sprintf("larger than the device's largest allocation (maxMemoryAllocationSize %d B)", maxAlloc))
	}
	buffer, err := d.createBuffer(size)
	if err != nil {
		if isOutOfMemory(err) {
			return vkruntime.StorageHandle{}, s.outOfMemory(size, err.Error())
		}
		return vkruntime.StorageHandle{}, err
	}
	req := d.calls.bufferRequirements(buffer)
	held := req.size
	if req.memoryTypeBits&(1<<d.memoryType) == 0 {
		vulkan.DestroyBuffer(d.handle, buffer, nil)
		return vkruntime.StorageHandle{}, fmt.Errorf("vk: storage allocation of %d B: the buffer cannot live in memory type %d (allowed types %#x)", size, d.memoryType, req.memoryTypeBits)
	}
	if maxAlloc != 0 && held > maxAlloc {
		vulkan.DestroyBuffer(d.handle, buffer, nil)
		return vkruntime.StorageHandle{}, s.outOfMemory(size, fmt.Sprintf("its %d B of memory are more than the device's largest allocation (maxMemoryAllocationSize %d B)", held, maxAlloc))
	}
	if err := s.reserve(size, held); err != nil {
		vulkan.DestroyBuffer(d.handle, buffer, nil)
		return vkruntime.StorageHandle{}, err
	}
	memory, r := d.calls.allocateMemory(held, d.memoryType)
	if r == vulkan.ErrorOutOfDeviceMemory || r == vulkan.ErrorOutOfHostMemory || r == vulkan.ErrorTooManyObjects {
		// Deferred pages may be what stands in the way: release them, retry once.
		s.flush()
		memory, r = d.calls.allocateMemory(held, d.memoryType)
	}
	if r != vulkan.Success {
		s.unreserve(held)
		vulkan.DestroyBuffer(d.handle, buffer, nil)
		err := d.noteResult("vkAllocateMemory", r)
		if r == vulkan.ErrorOutOfDeviceMemory || r == vulkan.ErrorOutOfHostMemory || r == vulkan.ErrorTooManyObjects {
			return vkruntime.StorageHandle{}, s.outOfMemory(size, err.Error())
		}
		return vkruntime.StorageHandle{}, err
	}
	p := &page{size: size, held: held, memory: memory, buffer: buffer}
	if r := vulkan.BindBufferMemory(d.handle, buffer, memory, 0); r != vulkan.Success {
		s.destroyPage(p)
		s.unreserve(held)
		return vkruntime.StorageHandle{}, d.noteResult("vkBindBufferMemory", r)
	}
	if d.hostVisible {
		var mapped unsafe.Pointer
		if r := vulkan.MapMemory(d.handle, memory, 0, vulkan.DeviceSize(vulkan.WholeSize), 0, &mapped); r != vulkan.Success {
			s.destroyPage(p)
			s.unreserve(held)
			return vkruntime.StorageHandle{}, d.noteResult("vkMapMemory", r)
		}
		p.mapped = mapped
	}
	// An id no storage of the process, of any backend, had before: a
	// handle of another device, or of a closed one, names nothing here
	// (runtime.ErrNotFound) rather than a page of this one.
	p.id = vkruntime.NewStorageID()
	s.mu.Lock()
	s.pages[p.id] = p
	s.mu.Unlock()
	return vkruntime.StorageHandle{ID: p.id, Offset: 0, Size: size}, nil
}

// reserve counts held bytes against the heap, the limit, the budget and the
// allocation count before the driver is asked, so concurrent allocations
// cannot overshoot. Drivers that back "device memory" with host memory
// (lavapipe) would otherwise hand out far more than the heap they report.
// A refusal flushes deferred pages and asks again.
func (s *Storage) reserve(size, held uint64) error {
	var why string
	for attempt := range 2 {
		if attempt > 0 {
			s.flush()
		}
		budget, usage, _ := s.dev.budget() // outside the lock: a driver call
		s.mu.Lock()
		why = s.room(budget, usage).refuse(held)
		if why == "" {
			s.allocated += held
			s.allocations++
			s.mu.Unlock()
			return nil
		}
		s.mu.Unlock()
	}
	return s.outOfMemory(size, why)
}

// room is what an allocation is admitted against now; caller holds s.mu.
func (s *Storage) room(budget, usage uint64) room {
	return room{
		allocated: s.allocated, heap: s.dev.info.Heaps[s.dev.heapIndex].Size, limit: s.limit,
		budget: budget, usage: usage,
		allocations: uint64(s.allocations), maxAllocations: uint64(s.dev.info.Limits.MaxMemoryAllocationCount),
	}
}

func (s *Storage) unreserve(held uint64) {
	s.mu.Lock()
	s.allocated -= held
	s.allocations--
	s.mu.Unlock()
}

// outOfMemory builds the error of an allocation the device could not serve,
// with what the heap, the budget and the storage said.
func (s *Storage) outOfMemory(size uint64, detail string) error {
	d := s.dev
	e := &vkruntime.OutOfMemoryError{
		Size:     size,
		HeapSize: d.info.Heaps[d.heapIndex].Size,
		Usage:    s.Allocated(),
		Limit:    s.limit,
		Detail:   fmt.Sprintf("device %d (%s): %s", d.info.Index, d.info.Name, detail),
	}
	if budget, _, ok := d.budget(); ok {
		e.Budget = budget
	}
	return e
}

func isOutOfMemory(err error) bool {
	var re *ResultError
	if !errors.As(err, &re) {
		return false
	}
	r := vulkan.Result(re.Result)
	return r == vulkan.ErrorOutOfDeviceMemory || r == vulkan.ErrorOutOfHostMemory
}

// Dealloc releases a page; the memory (a virtual range's address space)
// goes back to the driver at the next Flush once nothing uses it. Unknown
// or already released ids are ignored.
func (s *Storage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pages[id]
	if !ok {
		return
	}
	delete(s.pages, id)
	p.released = true
	s.deferred = append(s.deferred, p)
}

// Flush hands deferred deallocations to the driver, except pages a transfer
// or dispatch still uses: those wait for a later Flush. On a closed device
// it does nothing: Close released every page.
func (s *Storage) Flush() {
	if s.dev.begin() != nil {
		return
	}
	defer s.dev.end()
	s.flush()
}

// flush is Flush within a call that began.
func (s *Storage) flush() {
	s.mu.Lock()
	var free []*page
	kept := s.deferred[:0]
	for _, p := range s.deferred {
		if p.pins > 0 {
			kept = append(kept, p)
		} else {
			free = append(free, p)
		}
	}
	clear(s.deferred[len(kept):])
	s.deferred = kept
	s.mu.Unlock()
	if len(free) == 0 {
		return
	}
	for _, p := range free {
		s.destroyPage(p)
	}
	s.mu.Lock()
	for _, p := range free {
		if p.virtual {
			s.virtualBytes -= p.size
		} else {
			s.allocated -= p.held
			s.allocations--
		}
	}
	s.mu.Unlock()
}

func (s *Storage) destroyPage(p *page) {
	h := s.dev.handle
	if p.mapped != nil {
		vulkan.UnmapMemory(h, p.memory)
		p.mapped = nil
	}
	vulkan.DestroyBuffer(h, p.buffer, nil)
	if p.memory != nil {
		vulkan.FreeMemory(h, p.memory, nil)
	}
}

// releaseAll frees every page, live or deferred; the device is closing.
func (s *Storage) releaseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pages {
		s.destroyPage(p)
	}
	for _, p := range s.deferred {
		s.destroyPage(p)
	}
	s.pages, s.deferred = map[vkruntime.StorageID]*page{}, nil
	s.allocated, s.allocations = 0, 0
}

// pinned is a handle resolved to its page, held against Flush until unpin.
type pinned struct {
	page   *page
	offset uint64
	size   uint64
}

// pin resolves handles to their pages, checks they lie inside them, and
// keeps the pages from being freed until unpin. Nothing is pinned on error.
func (s *Storage) pin(handles ...vkruntime.StorageHandle) ([]pinned, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]pinned, len(handles))
	for i, h := range handles {
		p, err := s.pageOf(h)
		if err != nil {
			return nil, err
		}
		out[i] = pinned{page: p, offset: h.Offset, size: h.Size}
	}
	for _, x := range out {
		x.page.pins++
	}
	return out, nil
}

// check is pin's check without the pin: the bindings of an op that runs
// no work group are bound nowhere, and must name live memory all the same.
func (s *Storage) check(handles ...vkruntime.StorageHandle) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range handles {
		if _, err := s.pageOf(h); err != nil {
			return err
		}
	}
	return nil
}

// pageOf is the live page h lies in; the caller holds s.mu.
func (s *Storage) pageOf(h vkruntime.StorageHandle) (*page, error) {
	p, ok := s.pages[h.ID]
	if !ok {
		return nil, fmt.Errorf("vk: %v: %w (the device's storage holds %d pages)", h, vkruntime.ErrNotFound, len(s.pages))
	}
	if h.Offset > p.size || h.Size > p.size-h.Offset {
		return nil, fmt.Errorf("vk: %v lies outside its page of %d B: %w", h, p.size, vkruntime.ErrOutOfRange)
	}
	return p, nil
}

// pinOne is pin of a single handle, without a slice: the path of every
// small transfer.
func (s *Storage) pinOne(h vkruntime.StorageHandle) (pinned, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.pageOf(h)
	if err != nil {
		return pinned{}, err
	}
	p.pins++
	return pinned{page: p, offset: h.Offset, size: h.Size}, nil
}

func (s *Storage) unpinOne(p pinned) {
	s.mu.Lock()
	p.page.pins--
	s.mu.Unlock()
}

func (s *Storage) unpin(ps []pinned) {
	s.mu.Lock()
	for _, x := range ps {
		x.page.pins--
	}
	s.mu.Unlock()
}
