// Package cpu is a pure-Go device.Device: its storage is host memory,
// counted against a heap size and a memory limit like a GPU's, and it runs
// every kernel of the kernel package on the CPU with the float64 arithmetic
// of internal/cpuref's references. It is the portable device: dry runs, measured plans
// and the client's tests run on it without cgo or a Vulkan driver, and its
// results are what a GPU's are checked against.
//
// It checks every dispatch as a GPU backend does (kernel.Validate against
// its limits, then the bindings against its storage) and honours a
// context's end between and within kernels.
package cpu

import (
	"context"
	"fmt"
	"math"
	goruntime "runtime"
	"sync"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/internal/callgate"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Option configures New, in the module's one option style: a function from
// the configuration to the configuration, checked as a whole by New.
type Option func(config) config

type config struct {
	name        string
	alignment   uint64
	maxPageSize uint64
	memorySize  uint64
	memoryLimit uint64
	granule     uint64
}

// The defaults are a common desktop GPU's: binding offsets aligned to 256
// bytes (the largest minStorageBufferOffsetAlignment in wide use), one
// binding up to 4 GiB, and a 16 GiB heap.
const (
	DefaultAlignment  = 256
	DefaultMemorySize = 16 << 30
	maxBindingRange   = 1<<32 - 1
)

// WithName names the device in messages; the default is "cpu".
func WithName(name string) Option { return func(c config) config { c.name = name; return c } }

// WithAlignment sets the alignment of binding offsets and slices, a power of
// two of at least 4 bytes and below 4 GiB, the most one page may be.
func WithAlignment(bytes uint64) Option {
	return func(c config) config { c.alignment = bytes; return c }
}

// WithMaxPageSize caps what one binding (and so one page of the pools) may
// cover; the default is the largest multiple of the alignment below 4 GiB
// and within the heap.
func WithMaxPageSize(bytes uint64) Option {
	return func(c config) config { c.maxPageSize = bytes; return c }
}

// WithMemorySize sets the size of the device's heap.
func WithMemorySize(bytes uint64) Option {
	return func(c config) config { c.memorySize = bytes; return c }
}

// WithMemoryLimit caps the bytes the storage holds at once below the heap;
// 0 means no cap beyond the heap.
func WithMemoryLimit(bytes uint64) Option {
	return func(c config) config { c.memoryLimit = bytes; return c }
}

// WithSparseGranule gives the device sparse residency with granules of
// the given size, a power of two and a multiple of the alignment: its
// storage is then a runtime.SparseStorage, and the Virtual layout binds
// memory granule by granule on it as on a GPU with sparse binding. 0, the
// default, is none (the Virtual layout falls back to SubSlices), as on
// lavapipe.
func WithSparseGranule(bytes uint64) Option {
	return func(c config) config { c.granule = bytes; return c }
}

// Device is the pure-Go device. It is safe for concurrent use.
type Device struct {
	name    string
	props   vkruntime.DeviceProperties
	limits  kernel.Limits
	storage *Storage

	// calls admits the calls that use the storage; Close closes it and
	// waits for the running ones before it releases their pages.
	calls callgate.Gate
	// released is closed once Close has released the storage, so that a
	// second Close returns no earlier than the first.
	released chan struct{}
}

var _ device.Device = (*Device)(nil)

// New makes a device; an unusable configuration is an error matching
// runtime.ErrInvalidArgument.
func New(opts ...Option) (*Device, error) {
	c := config{name: "cpu", alignment: DefaultAlignment, memorySize: DefaultMemorySize}
	for _, o := range opts {
		c = o(c)
	}
	if c.alignment < 4 || c.alignment&(c.alignment-1) != 0 {
		return nil, fmt.Errorf("cpu: alignment %d is not a power of two of at least 4 B: %w", c.alignment, vkruntime.ErrInvalidArgument)
	}
	if c.memorySize < c.alignment {
		return nil, fmt.Errorf("cpu: a heap of %d B holds no %d B slice: %w", c.memorySize, c.alignment, vkruntime.ErrInvalidArgument)
	}
	if c.maxPageSize == 0 {
		c.maxPageSize = min(maxBindingRange, c.memorySize) / c.alignment * c.alignment
		if c.maxPageSize == 0 {
			// Such a device ran, but every memory manager refused it.
			return nil, fmt.Errorf("cpu: alignment %d leaves no page below 4 GiB that is a multiple of it: %w", c.alignment, vkruntime.ErrInvalidArgument)
		}
	}
	if c.maxPageSize%c.alignment != 0 || c.maxPageSize > maxBindingRange {
		return nil, fmt.Errorf("cpu: max page size %d is not a multiple of the %d B alignment below 4 GiB: %w", c.maxPageSize, c.alignment, vkruntime.ErrInvalidArgument)
	}
	if c.granule != 0 && (c.granule&(c.granule-1) != 0 || c.granule%c.alignment != 0) {
		return nil, fmt.Errorf("cpu: sparse granule %d is not a power of two that is a multiple of the %d B alignment: %w", c.granule, c.alignment, vkruntime.ErrInvalidArgument)
	}
	d := &Device{
		name:  c.name,
		props: vkruntime.DeviceProperties{Alignment: c.alignment, MaxPageSize: c.maxPageSize, MemorySize: c.memorySize},
		limits: kernel.Limits{
			Alignment:                c.alignment,
			MaxStorageBufferRange:    c.maxPageSize,
			MaxPushConstantsSize:     128,
			MaxComputeWorkGroupCount: [3]uint32{65535, 65535, 65535},
		},
		released: make(chan struct{}),
	}
	d.storage = &Storage{dev: d, pages: map[vkruntime.StorageID]*page{}, heap: c.memorySize, limit: c.memoryLimit, granule: c.granule}
	return d, nil
}

// Open is New as a device.Opener, for device.Register: the device of index
// 0 with cfg's memory limit (there is no validation layer to turn on). Any
// other index is refused with an error matching runtime.ErrInvalidArgument.
func Open(ctx context.Context, cfg device.Config) (device.Device, error) {
	if cfg.Index != 0 {
		return nil, fmt.Errorf("cpu: no device %d: there is one (0): %w", cfg.Index, vkruntime.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := New(WithMemoryLimit(cfg.MemoryLimit))
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Name is the name WithName gave, "cpu" by default.
func (d *Device) Name() string { return d.name }

// Properties are the alignment, page size and heap the options set.
func (d *Device) Properties() vkruntime.DeviceProperties { return d.props }

// Limits are what dispatches are checked against: the alignment, one
// binding up to the max page size, 128 B of push constants and 65535 work
// groups per grid dimension, as every Vulkan device allows.
func (d *Device) Limits() kernel.Limits { return d.limits }

// Storage is the device's host-memory storage (a *Storage).
func (d *Device) Storage() device.Storage { return d.storage }

// Close waits for the calls running on the device to end (a dispatch runs
// to its end or its context's), then releases the storage's memory; calls
// made once Close began fail with an error matching runtime.ErrClosed. A
// second Close returns once the first has released the storage.
func (d *Device) Close() error {
	if !d.calls.Close() {
		<-d.released
		return nil
	}
	d.storage.releaseAll()
	close(d.released)
	return nil
}

// begin admits a call that uses the storage: it fails on an ended context
// or a closed device, and otherwise Close waits for the matching end before
// it releases the pages the call may be reading or writing. Without it a
// call racing with Close wrote to released memory after Close returned, or
// failed with ErrNotFound for pages Close had just dropped.
func (d *Device) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !d.calls.Enter() {
		return d.closedError()
	}
	return nil
}

func (d *Device) end() { d.calls.Leave() }

// closedError is what every call after Close fails with: it matches
// runtime.ErrClosed.
func (d *Device) closedError() error {
	return fmt.Errorf("cpu: device %s: %w", d.name, vkruntime.ErrClosed)
}

// Upload copies src to the start of dst.
func (d *Device) Upload(ctx context.Context, dst vkruntime.StorageHandle, src []byte) error {
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.end()
	if uint64(len(src)) > dst.Size {
		return fmt.Errorf("cpu: upload of %d B into %v of %d B: %w", len(src), dst, dst.Size, vkruntime.ErrOutOfRange)
	}
	v, err := d.storage.view(dst, uint64(len(src)))
	if err != nil {
		return err
	}
	copy(v.mem, src)
	v.writeBack()
	return nil
}

// Download copies the start of src into dst.
func (d *Device) Download(ctx context.Context, src vkruntime.StorageHandle, dst []byte) error {
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.end()
	if uint64(len(dst)) > src.Size {
		return fmt.Errorf("cpu: download of %d B from %v of %d B: %w", len(dst), src, src.Size, vkruntime.ErrOutOfRange)
	}
	v, err := d.storage.view(src, uint64(len(dst)))
	if err != nil {
		return err
	}
	copy(dst, v.mem)
	return nil
}

// Dispatch checks every op, then runs them in order on the calling
// goroutine; an op refused by the check is an error matching
// device.ErrNothingRan as well as its own kind (kernel.ErrInvalidDispatch,
// runtime.ErrNotFound, runtime.ErrOutOfRange). The ops run on the pages
// the check found: one released since (Dealloc, ReleaseVirtual) is still
// read and written, as a GPU's device keeps the memory of a checked batch.
// When ctx ends it stops between work items and returns ctx.Err(); the ops
// not finished leave their outputs partly written.
func (d *Device) Dispatch(ctx context.Context, ops []kernel.Op) error {
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.end()
	// What is checked is what runs: the caller's slices may change under
	// a batch, and an op run as changed since its check could read or
	// write past what was checked.
	own := kernel.OwnOps(ops)
	// The pages the checks found are the ones the ops run on: a page
	// released once the batch was checked is still written, as a GPU's
	// device keeps the memory a checked batch binds; looked up again to
	// run, a page released meanwhile failed a batch that had passed its
	// checks, after the ops before it ran.
	// They lie in one array, op i's from firstPage[i] on.
	var pages []*page
	firstPage := make([]int, own.Len())
	for i := range own.Len() {
		op := own.Op(i)
		firstPage[i] = len(pages)
		err := kernel.Validate(op.Kernel, op.Grid, op.Bindings, op.Push, d.limits)
		if err == nil {
			pages, err = d.storage.resolve(pages, op.Bindings)
		}
		if err != nil {
			// Refused before any op ran: the batch changed nothing, and the
			// error says so, as vk's refusals of its bindings do.
			if len(ops) > 1 {
				err = fmt.Errorf("op %d of %d: %w", i, len(ops), err)
			}
			return device.NothingRan(err)
		}
	}
	if afterCheck != nil {
		afterCheck()
	}
	for i := range own.Len() {
		op := own.Op(i)
		if kernel.NoOp(op.Kernel, op.Grid, op.Push) {
			continue // it writes nothing
		}
		// Viewed only now: an earlier op of the batch may have written a
		// virtual range this one reads. Only the bytes the kernel touches
		// are viewed: a virtual range's view is a copy, written back whole,
		// which for a large handle cost its size in host memory and wrote
		// bytes the kernel never did back over later changes to them.
		touched := kernel.BindingSizes(op.Kernel, op.Grid, op.Push)
		views := make([]view, len(op.Bindings))
		mem := make([][]byte, len(op.Bindings))
		for j, h := range op.Bindings {
			v := d.storage.viewOf(pages[firstPage[i]+j], h, min(h.Size, touched[j]))
			views[j], mem[j] = v, v.mem
		}
		err := run(ctx, op, mem)
		for j, b := range op.Kernel.Bindings {
			if b.Access == "write" {
				views[j].writeBack()
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// afterCheck, set by tests, is called once a batch's ops are checked,
// before any runs.
var afterCheck func()

// Storage is host memory handed out as pages, counted against the heap
// and the memory limit. It is safe for concurrent use.
type Storage struct {
	dev *Device

	mu          sync.Mutex
	pages       map[vkruntime.StorageID]*page
	deferred    []*page
	allocated   uint64
	heap, limit uint64
	granule     uint64 // 0: no sparse residency
	// virtualBytes is the address space the live virtual ranges take of
	// maxVirtualSpace, which they share as a device's ranges do.
	virtualBytes uint64
}

type page struct {
	mem []byte // the usable size asked for
	// held is the bytes counted: the size rounded up to the alignment, or
	// for a virtual range to whole granules of the address space.
	held uint64
	// virtual, for a range of ReserveVirtual, holds its bound granules by
	// index: the page and offset of the memory behind each.
	virtual map[uint64]granuleMemory
	size    uint64 // a virtual range's size
	// backing is how many granules of live virtual ranges the page's
	// memory backs: a page deallocated while some are is kept, counted,
	// until the last is unbound or its range released.
	backing uint64
}

type granuleMemory struct {
	page   *page
	offset uint64
}

var _ device.Storage = (*Storage)(nil)

// Alloc makes one page of size bytes, zeroed. The storage keeps a running
// total: a page that would take it past the heap or the memory limit is a
// *runtime.OutOfMemoryError (after handing deferred pages back), and the
// storage stays as it was.
func (s *Storage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	if err := s.dev.begin(context.Background()); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	defer s.dev.end()
	if size == 0 {
		return vkruntime.StorageHandle{}, fmt.Errorf("cpu: a page needs at least one byte: %w", vkruntime.ErrZeroSize)
	}
	align := s.dev.props.Alignment
	held := (size + align - 1) / align * align
	if held < size {
		held = size // rounding wrapped: the heap check below refuses it
	}
	s.mu.Lock()
	if !s.fits(held) {
		s.mu.Unlock()
		s.Flush()
		s.mu.Lock()
	}
	if !s.fits(held) {
		err := &vkruntime.OutOfMemoryError{
			Size: size, HeapSize: s.heap, Usage: s.allocated, Limit: s.limit,
			Detail: fmt.Sprintf("device %s: %d B held of %s", s.dev.name, s.allocated, s.bound()),
		}
		s.mu.Unlock()
		return vkruntime.StorageHandle{}, err
	}
	s.allocated += held
	// Unique in the process: a handle of another device, a vk one too,
	// names nothing here.
	id := vkruntime.NewStorageID()
	s.mu.Unlock()
	// Allocated outside the lock: a large page takes a while to zero.
	mem, ok := hostBytes(size)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		s.allocated -= held
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{
			Size: size, HeapSize: s.heap, Usage: s.allocated, Limit: s.limit,
			Detail: fmt.Sprintf("device %s: a page of %d B is past what host memory can address", s.dev.name, size),
		}
	}
	s.pages[id] = &page{mem: mem, held: held}
	return vkruntime.StorageHandle{ID: id, Size: size}, nil
}

// hostBytes makes n zeroed bytes, false where Go cannot make a slice so
// long: a heap set past host memory (WithMemorySize(1<<62)) let Alloc reach
// make with such a size, which panicked with the size counted as held.
func hostBytes(n uint64) (b []byte, ok bool) {
	if n > math.MaxInt {
		return nil, false
	}
	defer func() {
		if r := recover(); r != nil {
			if _, isRuntime := r.(goruntime.Error); !isRuntime {
				panic(r)
			}
			b, ok = nil, false
		}
	}()
	return make([]byte, n), true
}

func (s *Storage) fits(held uint64) bool {
	total := s.allocated + held
	return total >= held && total <= s.heap && (s.limit == 0 || total <= s.limit)
}

func (s *Storage) bound() string {
	if s.limit != 0 && s.limit < s.heap {
		return fmt.Sprintf("the %d B memory limit", s.limit)
	}
	return fmt.Sprintf("the %d B heap", s.heap)
}

// Dealloc releases a page; its memory counts until the next Flush.
// Unknown or already released ids are ignored.
func (s *Storage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pages[id]; ok {
		s.forget(id, p)
		if p.virtual == nil { // a range holds no memory to hand back
			s.deferred = append(s.deferred, p)
		}
	}
}

// forget drops a page or a virtual range from the live ones; a range's
// address space goes back however it is released, and the pages bound in
// it back it no more. s.mu is held.
func (s *Storage) forget(id vkruntime.StorageID, p *page) {
	delete(s.pages, id)
	if p.virtual != nil {
		s.virtualBytes -= p.held
		for _, m := range p.virtual {
			m.page.backing--
		}
	}
}

// Flush hands deallocated pages back, but for those whose memory still
// backs granules of a live virtual range: those stay, counted, until a
// Flush after the last is unbound or its range released.
func (s *Storage) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.deferred[:0]
	for _, p := range s.deferred {
		if p.backing > 0 {
			kept = append(kept, p)
			continue
		}
		s.allocated -= p.held
	}
	clear(s.deferred[len(kept):])
	s.deferred = kept
}

// Allocated is the number of bytes held, deallocated pages not yet flushed
// (or still bound in a virtual range) included.
func (s *Storage) Allocated() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allocated
}

// Allocations is the number of pages held, deallocated pages not yet
// flushed included.
func (s *Storage) Allocations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.pages {
		if p.virtual == nil {
			n++
		}
	}
	return n + len(s.deferred)
}

// Limit is the memory limit, 0 for none beyond the heap.
func (s *Storage) Limit() uint64 { return s.limit }

// MaxAllocationSize is the largest page a binding may cover whole.
func (s *Storage) MaxAllocationSize() uint64 { return s.dev.props.MaxPageSize }

func (s *Storage) releaseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pages, s.deferred, s.allocated = map[vkruntime.StorageID]*page{}, nil, 0
}

// view is the bytes of a handle: a slice of its page's memory, or for a
// virtual range a copy gathered from the granules bound under it (unbound
// ones read as zeros), which writeBack scatters back (writes to unbound
// granules are dropped, as on a GPU).
type view struct {
	mem     []byte
	virtual *page
	offset  uint64
	granule uint64
	s       *Storage
}

func (v view) writeBack() {
	if v.virtual == nil {
		return
	}
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	v.s.copyVirtual(v.virtual, v.offset, v.mem, true)
}

// copyVirtual moves bytes between buf and the range of p from offset on:
// into p's granules when toRange, out of them otherwise. Caller holds s.mu.
func (s *Storage) copyVirtual(p *page, offset uint64, buf []byte, toRange bool) {
	g := s.granule
	for done := uint64(0); done < uint64(len(buf)); {
		at := offset + done
		n := min(g-at%g, uint64(len(buf))-done)
		if m, ok := p.virtual[at/g]; ok {
			mem := m.page.mem[m.offset+at%g : m.offset+at%g+n]
			if toRange {
				copy(mem, buf[done:done+n])
			} else {
				copy(buf[done:done+n], mem)
			}
		}
		done += n
	}
}

// view resolves h, which must lie in a live page or virtual range, to its
// first n <= h.Size bytes. A transfer views only the bytes it moves: a
// virtual range's view is a copy, and a download of 4 B through a handle of
// a whole 1 TiB range allocated all of it, and an upload wrote the bytes
// past its own back from that copy over whatever had changed them since.
func (s *Storage) view(h vkruntime.StorageHandle, n uint64) (view, error) {
	s.mu.Lock()
	p, err := s.lookup(h)
	s.mu.Unlock()
	if err != nil {
		return view{}, err
	}
	return s.viewOf(p, h, n), nil
}

// viewOf is the view of the first n <= h.Size bytes of h, which lies in p
// (nil for an empty h), looked up before.
func (s *Storage) viewOf(p *page, h vkruntime.StorageHandle, n uint64) view {
	if p == nil || n == 0 {
		return view{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.virtual == nil {
		return view{mem: p.mem[h.Offset : h.Offset+n : h.Offset+n]}
	}
	v := view{mem: make([]byte, n), virtual: p, offset: h.Offset, granule: s.granule, s: s}
	s.copyVirtual(p, h.Offset, v.mem, false)
	return v
}

// lookup finds h's page and checks h lies inside it; an empty handle has
// none. Caller holds s.mu.
func (s *Storage) lookup(h vkruntime.StorageHandle) (*page, error) {
	if h.Size == 0 {
		return nil, nil
	}
	p, ok := s.pages[h.ID]
	if !ok {
		return nil, fmt.Errorf("cpu: %v: %w (the device's storage holds %d pages)", h, vkruntime.ErrNotFound, len(s.pages))
	}
	size := uint64(len(p.mem))
	if p.virtual != nil {
		size = p.size
	}
	if h.Offset > size || h.Size > size-h.Offset {
		return nil, fmt.Errorf("cpu: %v lies outside its page of %d B: %w", h, size, vkruntime.ErrOutOfRange)
	}
	return p, nil
}

// resolve looks every handle up without touching memory, appending to
// pages the page each lies in, nil for an empty one.
func (s *Storage) resolve(pages []*page, hs []vkruntime.StorageHandle) ([]*page, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hs {
		p, err := s.lookup(h)
		if err != nil {
			return pages, err
		}
		pages = append(pages, p)
	}
	return pages, nil
}
