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
		c.NotSupportedf("the storage offers no sparse binding (not a runtime.SparseStorage, or a granule of 0)")
	}
	return s
}

// checkSparseUnsupported holds a sparse storage of a device without
// sparse residency (a granule of 0) to refusing virtual ranges as
// unsupported, a kind a caller tells from memory run out.
func checkSparseUnsupported(c *checkState, t StorageTarget) {
	s, ok := t.Storage.(vkruntime.SparseStorage)
	if !ok {
		c.NotSupportedf("the storage is no runtime.SparseStorage")
	}
	if g := s.SparseGranule(); g != 0 {
		c.NotSupportedf("the storage offers sparse binding (a granule of %d B)", g)
	}
	held, hasHeld := t.held()
	var before uint64
	if hasHeld {
		before = held()
	}
	for _, size := range []uint64{1, 1 << 20} {
		h, err := s.ReserveVirtual(size)
		switch {
		case err == nil:
			c.Errorf("ReserveVirtual(%d) = %v with a granule of 0: want an error matching runtime.ErrUnsupported", size, h)
			s.ReleaseVirtual(h.ID)
		case !errors.Is(err, vkruntime.ErrUnsupported):
			c.Errorf("ReserveVirtual(%d) with a granule of 0: %v (%T), which does not match runtime.ErrUnsupported", size, err, err)
		}
	}
	t.Storage.Flush()
	if hasHeld {
		if after := held(); after != before {
			c.Errorf("the storage held %d B before the refusals and %d B after", before, after)
		}
	}
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
	// Binds off the granule are arguments wrong in themselves, on every
	// device: a caller tells them from memory not held by their kind.
	for _, bad := range []vkruntime.SparseBind{
		{Offset: g / 2, Size: g, Memory: page.ID},              // offset off the granule
		{Offset: 0, Size: g / 2, Memory: page.ID},              // size off the granule
		{Offset: 0, Size: g, Memory: page.ID, MemoryOffset: 4}, // memory offset off the granule
	} {
		if err := s.Bind(v.ID, []vkruntime.SparseBind{bad}); !errors.Is(err, vkruntime.ErrInvalidArgument) {
			c.Errorf("Bind(%+v), not on whole granules of %d B: got %v, want an error matching vkruntime.ErrInvalidArgument", bad, g, err)
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

func checkSparseAddressSpace(c *checkState, t StorageTarget) {
	s := needSparse(c, t)
	g, space := s.SparseGranule(), s.MaxVirtualSize()
	if space < 16*g {
		c.Fatalf("the sparse address space is %d B, less than 16 granules of %d B", space, g)
	}
	held, hasHeld := t.held()
	var before uint64
	if hasHeld {
		before = held()
	}
	// A range leaving between 4 and 5 granules of the space.
	big := (space - 4*g) &^ (g - 1)
	left := space - big
	v, err := s.ReserveVirtual(big)
	if err != nil {
		c.Fatalf("ReserveVirtual(%d) of an address space of %d B: %v", big, space, err)
	}
	defer func() {
		if v.ID != 0 {
			s.ReleaseVirtual(v.ID)
		}
	}()
	if w, err := s.ReserveVirtual(8 * g); err == nil {
		c.Errorf("ReserveVirtual(%d) with %d B of the address space left succeeded: %v", 8*g, left, w)
		s.ReleaseVirtual(w.ID)
	} else if !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
		c.Errorf("ReserveVirtual(%d) with %d B of the address space left: %v (%T), which is not ErrOutOfDeviceMemory", 8*g, left, err, err)
	}
	// The refusal took none of the space.
	if w, err := s.ReserveVirtual(left); err != nil {
		c.Errorf("ReserveVirtual(%d), the %d B the live range leaves, after a refusal: %v", left, left, err)
	} else {
		s.ReleaseVirtual(w.ID)
	}
	if hasHeld {
		if now := held(); now != before {
			c.Errorf("virtual ranges moved the holdings from %d B to %d B: they hold no memory", before, now)
		}
	}
	// A released range's space is free again by the next Flush at the
	// latest (a device may keep the buffer until work using it ends).
	s.ReleaseVirtual(v.ID)
	s.Flush()
	v.ID = 0
	if w, err := s.ReserveVirtual(8 * g); err != nil {
		c.Errorf("ReserveVirtual(%d) once the range of %d B was released and the storage flushed: %v", 8*g, big, err)
	} else {
		s.ReleaseVirtual(w.ID)
	}
	// A range past the whole space is past what the live ranges leave too:
	// a pool that halves its range on ErrOutOfDeviceMemory relies on it.
	if w, err := s.ReserveVirtual(space + g); err == nil {
		c.Errorf("ReserveVirtual(%d) past the %d B address space succeeded: %v", space+g, space, w)
		s.ReleaseVirtual(w.ID)
	} else if !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
		c.Errorf("ReserveVirtual(%d) past the %d B address space: %v (%T), which is not ErrOutOfDeviceMemory", space+g, space, err, err)
	}
}

func checkSparseRelease(c *checkState, t StorageTarget) {
	s := needSparse(c, t)
	m := needMemory(c, t)
	g := s.SparseGranule()
	v, err := s.ReserveVirtual(4 * g)
	if err != nil {
		c.Fatalf("ReserveVirtual(%d): %v", 4*g, err)
	}
	released := false
	defer func() {
		if !released {
			s.ReleaseVirtual(v.ID)
		}
	}()
	page := mustAlloc(c, t, 4*g)
	defer release(t, []vkruntime.StorageID{page.ID})
	mirror := pattern(1650, page.Size)
	if err := m.Upload(page, mirror); err != nil {
		c.Fatalf("writing %v: %v", page, err)
	}
	through := vkruntime.StorageHandle{ID: v.ID, Offset: 5, Size: 100}
	behind := vkruntime.StorageHandle{ID: page.ID, Offset: 5, Size: 100}
	if err := s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: g, Memory: page.ID}}); err != nil {
		c.Fatalf("binding granule 0 of range %d to granule 0 of allocation %d: %v", v.ID, page.ID, err)
	}
	// Granule 0 moved to the allocation's granule 2, then a bind of
	// memory never allocated: refused, the first bind must not stand.
	refused := []vkruntime.SparseBind{{Offset: 0, Size: g, Memory: page.ID, MemoryOffset: 2 * g}, {Offset: g, Size: g, Memory: page.ID + 1000}}
	if err := s.Bind(v.ID, refused); err == nil {
		c.Errorf("Bind(%+v), whose second bind names memory never allocated, succeeded", refused)
	}
	data := pattern(1651, through.Size)
	if err := m.Upload(through, data); err != nil {
		c.Errorf("writing %v, bound to allocation %d: %v", through, page.ID, err)
	} else {
		copy(mirror[behind.Offset:], data)
	}
	expectPage := func(what string) {
		got := make([]byte, page.Size)
		if err := m.Download(page, got); err != nil {
			c.Errorf("%s: reading %v: %v", what, page, err)
			return
		}
		compareBytes(c, mirror, got, what)
	}
	expectPage("the allocation behind granule 0 after a refused submission that would have moved it, written through the range")
	// Unbound, granule 0 no longer reaches the allocation: a write
	// through it fails or is dropped.
	if err := s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: g}}); err != nil {
		c.Errorf("unbinding granule 0: %v", err)
	}
	_ = m.Upload(through, pattern(1652, through.Size))
	expectPage("the allocation once bound to granule 0, after a write through the unbound granule")
	// Released with a granule bound, the range is gone.
	if err := s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: g, Memory: page.ID}}); err != nil {
		c.Fatalf("binding granule 0 again: %v", err)
	}
	s.ReleaseVirtual(v.ID)
	released = true
	if err := m.Upload(through, pattern(1653, through.Size)); !errors.Is(err, vkruntime.ErrNotFound) {
		c.Errorf("writing %v of a released range: %v, want ErrNotFound", through, err)
	}
	if err := m.Download(through, make([]byte, through.Size)); !errors.Is(err, vkruntime.ErrNotFound) {
		c.Errorf("reading %v of a released range: %v, want ErrNotFound", through, err)
	}
	if err := s.Bind(v.ID, []vkruntime.SparseBind{{Offset: g, Size: g, Memory: page.ID, MemoryOffset: g}}); !errors.Is(err, vkruntime.ErrNotFound) {
		c.Errorf("Bind into released range %d: %v, want ErrNotFound", v.ID, err)
	}
	expectPage("the allocation once bound to a released range, after transfers through the range")
}
