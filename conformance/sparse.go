package conformance

import (
	"errors"

	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// sparseOf is the target's sparse residency, when it has any: a storage
// that is a vkruntime.SparseStorage with a non-zero granule.
func sparseOf(t StorageTarget) (vkruntime.SparseStorage, bool) {
	s, ok := t.Storage.(vkruntime.SparseStorage)
	if !ok || s.SparseGranule() == 0 {
		return nil, false
	}
	return s, true
}

func needSparse(c *checkState, t StorageTarget) vkruntime.SparseStorage {
	s, ok := sparseOf(t)
	if !ok {
		c.NotSupportedf("the storage offers no sparse binding (not a vkruntime.SparseStorage, or a granule of 0)")
	}
	return s
}

// sparseRecorder is a pageRecorder that passes sparse residency through,
// recording virtual ranges as the allocations slices may lie in.
type sparseRecorder struct {
	*pageRecorder
	sparse vkruntime.SparseStorage
}

func (r sparseRecorder) SparseGranule() uint64  { return r.sparse.SparseGranule() }
func (r sparseRecorder) MaxVirtualSize() uint64 { return r.sparse.MaxVirtualSize() }

func (r sparseRecorder) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	h, err := r.sparse.ReserveVirtual(size)
	if err == nil {
		if h.Offset%r.align != 0 {
			r.c.Errorf("ReserveVirtual(%d) = %v: the range starts off the alignment of %d B", size, h, r.align)
		}
		r.pages[h.ID] = size
	}
	return h, err
}

func (r sparseRecorder) ReleaseVirtual(id vkruntime.StorageID) {
	delete(r.pages, id)
	r.sparse.ReleaseVirtual(id)
}

func (r sparseRecorder) Bind(virtual vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	return r.sparse.Bind(virtual, binds)
}

func checkSparseBinding(c *checkState, t StorageTarget) {
	s := needSparse(c, t)
	g := s.SparseGranule()
	if g&(g-1) != 0 {
		c.Errorf("the sparse granule %d B is not a power of two", g)
	}
	if s.MaxVirtualSize() < 8*g {
		c.Fatalf("the largest virtual range is %d B, less than 8 granules of %d B", s.MaxVirtualSize(), g)
	}
	held, hasHeld := t.held()
	var before uint64
	if hasHeld {
		before = held()
	}
	v, err := s.ReserveVirtual(8 * g)
	if err != nil {
		c.Fatalf("ReserveVirtual(%d): %v", 8*g, err)
	}
	if v.Offset != 0 || v.Size != 8*g {
		c.Errorf("ReserveVirtual(%d) = %v: want offset 0 and size %d", 8*g, v, 8*g)
	}
	if hasHeld {
		if now := held(); now != before {
			c.Errorf("a virtual range of %d B moved the holdings from %d B to %d B: it holds no memory", 8*g, before, now)
		}
	}
	page := mustAlloc(c, t, 4*g)
	// The bound granules alias the allocation's: a write through one
	// reads back through the other.
	through := vkruntime.StorageHandle{ID: v.ID, Offset: g + 5, Size: g}
	behind := vkruntime.StorageHandle{ID: page.ID, Offset: g + 5, Size: g}
	bound := s.Bind(v.ID, []vkruntime.SparseBind{{Offset: g, Size: 2 * g, Memory: page.ID, MemoryOffset: g}})
	if bound != nil {
		c.Errorf("binding 2 granules of allocation %d into virtual range %d: %v", page.ID, v.ID, bound)
	} else if t.Memory != nil && writePattern(c, t, through, 1500) {
		checkPattern(c, t, behind, 1500, "the allocation behind a bound virtual range, written through the range")
	}
	// A submission naming a granule twice is refused whole: Vulkan leaves
	// the order of one submission's binds open, so a device could end it
	// either way. Here granules 1 and 2 go to the allocation's granules 2
	// and 3 while granule 2 is unbound.
	overlapping := []vkruntime.SparseBind{{Offset: g, Size: 2 * g, Memory: page.ID, MemoryOffset: 2 * g}, {Offset: 2 * g, Size: g}}
	if err := s.Bind(v.ID, overlapping); !errors.Is(err, vkruntime.ErrOverlappingBinds) {
		c.Errorf("Bind(%+v), which names granule 2 twice: got %v, want an error matching vkruntime.ErrOverlappingBinds", overlapping, err)
	} else if bound == nil && t.Memory != nil && writePattern(c, t, through, 1600) {
		checkPattern(c, t, behind, 1600, "the allocation behind the range after a refused submission, which must bind and unbind nothing")
	}
	for _, bad := range []vkruntime.SparseBind{
		{Offset: 0, Size: g, Memory: page.ID + 1000},                   // memory never allocated
		{Offset: 0, Size: 2 * g, Memory: page.ID, MemoryOffset: 3 * g}, // past its end
	} {
		if err := s.Bind(v.ID, []vkruntime.SparseBind{bad}); err == nil {
			c.Errorf("Bind(%+v) into a range over an allocation of %d B succeeded", bad, 4*g)
		}
	}
	if err := s.Bind(v.ID, []vkruntime.SparseBind{{Offset: g, Size: 2 * g}}); err != nil {
		c.Errorf("unbinding 2 granules: %v", err)
	}
	s.ReleaseVirtual(v.ID)
	release(t, []vkruntime.StorageID{page.ID})
	if hasHeld {
		if now := held(); now != before {
			c.Errorf("after the range was released and the allocation freed the storage holds %d B, %d B before", now, before)
		}
	}
	virtual := memory.VirtualLayout(memory.VirtualPlan{})
	churn(c, t, virtual, churnOptions{alignmentOnly: t.Memory == nil})
}
