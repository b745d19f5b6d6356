// Package faultstorage is a device storage that fails on purpose, the way
// pebble's errorfs fails file operations: it wraps a real storage, counts
// every call by kind, and makes the n-th call of a kind fail. It keeps its
// own account of what it holds, so a test can see memory a failure leaked,
// and of misuse (releasing what it does not hold, binding memory it does
// not hold), which a failure path must never cause. It also tracks what is
// bound where in virtual ranges, and counts memory released while still
// bound (legal in Vulkan as long as the range is not used there again).
//
// Alloc, ReserveVirtual and Bind fail by returning the armed error.
// Dealloc and Flush return nothing, so they fail the way a driver can
// without telling anyone: a failed Dealloc is not handed to the device
// (the memory stays held) and a failed Flush hands nothing over; every
// Dealloc that did not get through is retried at the next Flush that does.
// A manager that flushes on cleanup therefore returns everything in the
// end, and one that forgets an allocation shows up in Held.
package faultstorage

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Op is a kind of storage call.
type Op uint8

const (
	Alloc Op = iota
	Dealloc
	Flush
	ReserveVirtual
	Bind
	numOps
)

// Ops are every kind of call, in order.
var Ops = []Op{Alloc, Dealloc, Flush, ReserveVirtual, Bind}

func (o Op) String() string {
	switch o {
	case Alloc:
		return "Alloc"
	case Dealloc:
		return "Dealloc"
	case Flush:
		return "Flush"
	case ReserveVirtual:
		return "ReserveVirtual"
	case Bind:
		return "Bind"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Storage wraps a storage with injected failures. It implements
// vkruntime.SparseStorage whether or not the wrapped storage does (with a
// granule of 0, meaning no sparse residency, when it does not) and
// vkruntime.AllocationLimiter (0, no limit, when the wrapped one has none).
// It is safe for concurrent use.
type Storage struct {
	inner vkruntime.Storage

	mu     sync.Mutex
	calls  [numOps]int
	armed  map[Op]map[int]error // op -> 1-based call number -> error
	failed []string             // the failures injected, in order
	held   map[vkruntime.StorageID]uint64
	ranges map[vkruntime.StorageID]uint64
	stuck  []vkruntime.StorageID // deallocations the device has not taken yet
	// bound maps each bound granule (range, offset) to the allocation
	// behind it, so a release of memory still bound is seen.
	bound      map[[2]uint64]vkruntime.StorageID
	freedBound int
	misuses    []string
}

// Wrap returns inner with no failure armed.
func Wrap(inner vkruntime.Storage) *Storage {
	return &Storage{inner: inner, armed: map[Op]map[int]error{},
		held: map[vkruntime.StorageID]uint64{}, ranges: map[vkruntime.StorageID]uint64{},
		bound: map[[2]uint64]vkruntime.StorageID{}}
}

// FailNth makes the n-th call (1-based, counting calls of op only, from the
// storage's creation) fail with err. Dealloc and Flush ignore err: they
// fail silently (see the package doc). A nil err for Alloc or
// ReserveVirtual is an *OutOfMemoryError, for Bind ErrDeviceLost.
func (s *Storage) FailNth(op Op, n int, err error) *Storage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed[op] == nil {
		s.armed[op] = map[int]error{}
	}
	s.armed[op][n] = err
	return s
}

// call counts one call of op and returns whether it fails and with what.
func (s *Storage) call(op Op, size uint64) (bool, error) {
	s.calls[op]++
	err, ok := s.armed[op][s.calls[op]]
	if !ok {
		return false, nil
	}
	if err == nil {
		switch op {
		case Alloc, ReserveVirtual:
			err = &vkruntime.OutOfMemoryError{Size: size, Detail: fmt.Sprintf("injected: %s call %d fails", op, s.calls[op])}
		case Bind:
			err = fmt.Errorf("injected: %s call %d fails: %w", op, s.calls[op], vkruntime.ErrDeviceLost)
		}
	}
	s.failed = append(s.failed, fmt.Sprintf("%s #%d", op, s.calls[op]))
	return true, err
}

// Calls is how many calls of op the storage has seen.
func (s *Storage) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Injected lists the failures injected so far, as "Op #n".
func (s *Storage) Injected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.failed)
}

// Held is what the storage holds for its user: allocations (and their
// bytes) never released, including those whose release is stuck, and
// virtual ranges never released.
func (s *Storage) Held() (allocs int, bytes uint64, ranges int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, size := range s.held {
		bytes += size
	}
	return len(s.held), bytes, len(s.ranges)
}

// Stuck counts releases the user made that the device has not taken yet.
func (s *Storage) Stuck() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stuck)
}

// Misuses lists calls the storage had to refuse or ignore: a release of an
// id it does not hold (twice, or never made), a bind of memory it does not
// hold. A correct user never makes one, failure or not.
func (s *Storage) Misuses() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.misuses)
}

func (s *Storage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fail, err := s.call(Alloc, size); fail {
		return vkruntime.StorageHandle{}, err
	}
	h, err := s.inner.Alloc(size)
	if err != nil {
		return h, err
	}
	if _, dup := s.held[h.ID]; dup {
		s.misuses = append(s.misuses, fmt.Sprintf("the device gave id %d twice", h.ID))
	}
	s.held[h.ID] = size
	return h, nil
}

func (s *Storage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.held[id]; !ok || slices.Contains(s.stuck, id) {
		s.misuses = append(s.misuses, fmt.Sprintf("Dealloc of %d, which is not held", id))
		return
	}
	for at, mem := range s.bound {
		if mem == id {
			// Vulkan allows it ("memory can be freed whilst still bound to
			// resources, but those resources must not be used afterwards"):
			// counted, not refused.
			s.freedBound++
			delete(s.bound, at)
		}
	}
	if fail, _ := s.call(Dealloc, 0); fail {
		s.stuck = append(s.stuck, id)
		return
	}
	s.inner.Dealloc(id)
	delete(s.held, id)
}

func (s *Storage) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fail, _ := s.call(Flush, 0); fail {
		return
	}
	for _, id := range s.stuck {
		s.inner.Dealloc(id)
		delete(s.held, id)
	}
	s.stuck = s.stuck[:0]
	s.inner.Flush()
}

// MaxAllocationSize is the wrapped storage's limit, 0 when it has none.
func (s *Storage) MaxAllocationSize() uint64 {
	if lim, ok := s.inner.(vkruntime.AllocationLimiter); ok {
		return lim.MaxAllocationSize()
	}
	return 0
}

func (s *Storage) sparse() (vkruntime.SparseStorage, bool) {
	sp, ok := s.inner.(vkruntime.SparseStorage)
	return sp, ok
}

// SparseGranule is the wrapped storage's, 0 when it has no sparse residency.
func (s *Storage) SparseGranule() uint64 {
	if sp, ok := s.sparse(); ok {
		return sp.SparseGranule()
	}
	return 0
}

func (s *Storage) MaxVirtualSize() uint64 {
	if sp, ok := s.sparse(); ok {
		return sp.MaxVirtualSize()
	}
	return 0
}

// VirtualSpaceLeft is the wrapped storage's, where it tells it; else the
// whole space.
func (s *Storage) VirtualSpaceLeft() uint64 {
	if sp, ok := s.sparse(); ok {
		if r, ok := sp.(vkruntime.VirtualSpaceReporter); ok {
			return r.VirtualSpaceLeft()
		}
	}
	return s.MaxVirtualSize()
}

func (s *Storage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, ok := s.sparse()
	if !ok {
		s.misuses = append(s.misuses, "ReserveVirtual on a storage without sparse residency")
		return vkruntime.StorageHandle{}, fmt.Errorf("faultstorage: the wrapped storage has no sparse residency")
	}
	if fail, err := s.call(ReserveVirtual, size); fail {
		return vkruntime.StorageHandle{}, err
	}
	h, err := sp.ReserveVirtual(size)
	if err == nil {
		s.ranges[h.ID] = size
	}
	return h, err
}

func (s *Storage) ReleaseVirtual(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ranges[id]; !ok {
		s.misuses = append(s.misuses, fmt.Sprintf("ReleaseVirtual of %d, which is not held", id))
		return
	}
	for at := range s.bound {
		if at[0] == uint64(id) {
			delete(s.bound, at)
		}
	}
	sp, _ := s.sparse()
	sp.ReleaseVirtual(id)
	delete(s.ranges, id)
}

func (s *Storage) Bind(virtual vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, ok := s.sparse()
	if _, held := s.ranges[virtual]; !ok || !held {
		s.misuses = append(s.misuses, fmt.Sprintf("Bind into range %d, which is not held", virtual))
		return fmt.Errorf("faultstorage: bind into range %d, which is not held", virtual)
	}
	for _, b := range binds {
		if b.Memory == 0 {
			continue
		}
		if size, held := s.held[b.Memory]; !held || slices.Contains(s.stuck, b.Memory) || b.MemoryOffset > size || b.Size > size-b.MemoryOffset {
			s.misuses = append(s.misuses, fmt.Sprintf("Bind of %d B at %d of allocation %d, which is not held or too small", b.Size, b.MemoryOffset, b.Memory))
		}
	}
	if fail, err := s.call(Bind, 0); fail {
		return err // the whole submission fails: nothing is bound or unbound
	}
	if err := sp.Bind(virtual, binds); err != nil {
		return err
	}
	granule := max(sp.SparseGranule(), 1)
	for _, b := range binds {
		for o := uint64(0); o < b.Size; o += granule {
			at := [2]uint64{uint64(virtual), b.Offset + o}
			if b.Memory == 0 {
				delete(s.bound, at)
			} else {
				s.bound[at] = b.Memory
			}
		}
	}
	return nil
}

// FreedWhileBound counts granules whose memory was released while still
// bound to a virtual range (after an unbind the device refused).
func (s *Storage) FreedWhileBound() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freedBound
}

// Unbacked counts the granules under h, a range of a virtual range, that
// have no memory bound: a reservation there would lose what is written to
// it. A handle of an ordinary allocation is always backed.
func (s *Storage) Unbacked(h vkruntime.StorageHandle) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ranges[h.ID]; !ok || h.Size == 0 {
		return 0
	}
	sp, _ := s.sparse()
	granule := max(sp.SparseGranule(), 1)
	n := 0
	for g := h.Offset &^ (granule - 1); g < h.End(); g += granule {
		if _, ok := s.bound[[2]uint64{uint64(h.ID), g}]; !ok {
			n++
		}
	}
	return n
}

// HeldIDs lists the allocations held, sorted, for a leak report.
func (s *Storage) HeldIDs() []vkruntime.StorageID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.held))
}

var (
	_ vkruntime.SparseStorage     = (*Storage)(nil)
	_ vkruntime.AllocationLimiter = (*Storage)(nil)
)
