package memory

import (
	"fmt"
	"slices"
	"strconv"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// VirtualPlan is what a plan tells a Virtual layout: how much device memory
// the run is expected to need at once, and where in the address range the
// planned stream's reservations go. The pool takes the memory from the
// driver in a few allocations as the run needs it, never all up front, and
// grows past it (warning once) when the run needs more. The k-th
// reservation goes to Slots[k] while the run follows the planned stream
// (every reservation so far of its slot's size, its range free); from the
// first that does not, the pool places by TLSF above the slots, for good.
// While it follows, a submission that binds memory also binds what the
// pool holds spare under the slots that come next, so the run's next
// reservations find their memory bound.
type VirtualPlan struct {
	// PlannedBytes is the device memory the planned run needed at its
	// peak; 0 is no plan.
	PlannedBytes uint64
	// Slots are the planned places, in reservation order.
	Slots []VirtualSlot
}

// VirtualSlot is where one planned reservation goes: Size bytes at Offset
// of the address range. In JSON a plan's slots are one flat array
// [size, offset, size, offset, …].
type VirtualSlot struct{ Size, Offset uint64 }

func (p VirtualPlan) equal(o VirtualPlan) bool {
	return p.PlannedBytes == o.PlannedBytes && slices.Equal(p.Slots, o.Slots)
}

// VirtualLayout is one virtual pool: every reservation placed in one large
// range of address space (TLSF), device memory bound only under the
// granules live reservations touch, taken from the driver in chunks. It
// needs a [vkruntime.SparseStorage] with a granule; on any other storage it builds
// the SubSlices pools instead.
func VirtualLayout(p VirtualPlan) Layout {
	p.Slots = slices.Clone(p.Slots)
	return Layout{kind: LayoutVirtual, virtual: p}
}

// Virtual returns the plan of a Virtual layout.
func (l Layout) Virtual() (VirtualPlan, bool) {
	if l.kind != LayoutVirtual {
		return VirtualPlan{}, false
	}
	p := l.virtual
	p.Slots = slices.Clone(p.Slots)
	return p, true
}

// marshalLayout is the layout's JSON: "Virtual" without a plan.
func (p VirtualPlan) marshalLayout() []byte {
	if p.PlannedBytes == 0 && len(p.Slots) == 0 {
		return []byte(`"Virtual"`)
	}
	b := fmt.Appendf(nil, `{"Virtual":{"planned_bytes":%d`, p.PlannedBytes)
	if len(p.Slots) > 0 {
		b = append(b, `,"slots":[`...)
		for i, s := range p.Slots {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, s.Size, 10)
			b = append(b, ',')
			b = strconv.AppendUint(b, s.Offset, 10)
		}
		b = append(b, ']')
	}
	return append(b, "}}"...)
}

func (p *VirtualPlan) unmarshalBody(body []byte) error {
	if body == nil || isJSONNull(body) {
		*p = VirtualPlan{}
		return nil
	}
	o, err := decodeObject(body, "Virtual layout", "planned_bytes", "slots")
	if err != nil {
		return err
	}
	var out VirtualPlan
	if out.PlannedBytes, err = o.uint64("planned_bytes"); err != nil {
		return err
	}
	if raw, ok := o.members["slots"]; ok && !isJSONNull(raw) {
		elems, err := decodeArray(raw, "Virtual layout slots", 2*MaxArenaSlots)
		if err != nil {
			return err
		}
		if len(elems)%2 != 0 {
			return fmt.Errorf("memory: Virtual layout slots: want [size, offset, …] pairs, got %d numbers", len(elems))
		}
		out.Slots = make([]VirtualSlot, len(elems)/2)
		for i := range out.Slots {
			if out.Slots[i].Size, err = decodeUint64(elems[2*i], fmt.Sprintf("Virtual layout slot %d size", i)); err != nil {
				return err
			}
			if out.Slots[i].Offset, err = decodeUint64(elems[2*i+1], fmt.Sprintf("Virtual layout slot %d offset", i)); err != nil {
				return err
			}
		}
	}
	*p = out
	return nil
}

// VirtualKind: one virtual range, device memory bound granule by granule
// under live reservations. NeededPeakBytes is the most bytes of granules
// live reservations touched at once (bound or, in a dry run, not): what a
// plan asks the pool to expect.
type VirtualKind struct {
	GranuleSize     uint64 `json:"granule_size"`
	PlannedBytes    uint64 `json:"planned_bytes"`
	NeededPeakBytes uint64 `json:"needed_peak_bytes"`
}

func (VirtualKind) variant() string { return "Virtual" }

func (k VirtualKind) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"Virtual":{"granule_size":%d,"planned_bytes":%d,"needed_peak_bytes":%d}}`,
		k.GranuleSize, k.PlannedBytes, k.NeededPeakBytes), nil
}

func unmarshalVirtualKind(body []byte) (PoolKind, error) {
	o, err := decodeObject(body, "Virtual pool kind", "granule_size", "planned_bytes", "needed_peak_bytes")
	if err != nil {
		return nil, err
	}
	var k VirtualKind
	for _, f := range []struct {
		name string
		dst  *uint64
	}{{"granule_size", &k.GranuleSize}, {"planned_bytes", &k.PlannedBytes}, {"needed_peak_bytes", &k.NeededPeakBytes}} {
		if *f.dst, err = o.uint64(f.name); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// fitStorage builds a Virtual layout's pool on a storage with sparse
// residency, and the SubSlices pools in its place on any other.
func (m *Manager) fitStorage(r resolvedLayout) resolvedLayout {
	var out []poolConfig
	for i, c := range r.pools {
		if c.shape != shapeVirtual {
			if out != nil {
				out = append(out, c)
			}
			continue
		}
		s, ok := m.storage.(vkruntime.SparseStorage)
		granule := uint64(0)
		if ok {
			granule = s.SparseGranule()
		}
		if granule == 0 || granule&(granule-1) != 0 || granule%m.props.Alignment != 0 {
			if out == nil {
				out = slices.Clone(r.pools[:i])
			}
			out = append(out, subSlicesPools(m.props, m.limit())...)
			continue
		}
		c.granule = granule
		space := min(s.MaxVirtualSize(), virtualMaxSpace)
		c.slotsEnd = (c.slotsEnd + granule - 1) &^ (granule - 1)
		if c.heap <= (space-c.slotsEnd)/virtualSpacePerHeap {
			space = c.slotsEnd + c.heap*virtualSpacePerHeap
		}
		c.space = space &^ (granule - 1)
		c.addrSpace = min(s.MaxVirtualSize(), virtualMaxSpace)
		c.maxAlloc = min(c.maxAlloc, c.space)
		c.maxChunk = max(m.limit()&^(granule-1), granule)
		if out != nil {
			out = append(out, c)
		} else {
			r.pools[i] = c
		}
	}
	if out != nil {
		r.pools = out
	}
	return r
}

// warnOutgrown warns, once per layout, that a run needs more device memory
// than its plan expected, and counts each growth past the plan as a spill.
func (m *Manager) warnOutgrown(planned, need uint64) {
	m.spills++
	if m.warned[len(m.pools)+1] {
		return
	}
	m.warned[len(m.pools)+1] = true
	m.logger.Warn("memory: the run needs more device memory than its plan expected; the pool grows",
		"planned_bytes", planned, "needed_bytes", need)
}

// resolveVirtual checks a Virtual plan's slots against the device: sizes
// rounded up to the alignment, offsets on it, all inside half the largest
// address range, so the rest is left to place what misses the plan.
func resolveVirtual(plan VirtualPlan, p vkruntime.DeviceProperties, backendLimit uint64) (resolvedLayout, *InstallError) {
	c := poolConfig{shape: shapeVirtual, planned: plan.PlannedBytes, maxAlloc: exclusiveCeiling(p, backendLimit), heap: heapLimit(p)}
	if len(plan.Slots) > MaxArenaSlots {
		return resolvedLayout{}, invalidLayout("the virtual plan has %d slots, more than %d", len(plan.Slots), MaxArenaSlots)
	}
	if len(plan.Slots) > 0 {
		c.slots = make([]VirtualSlot, len(plan.Slots))
	}
	for k, s := range plan.Slots {
		size, ok := alignUp(s.Size, p.Alignment)
		switch {
		case s.Size == 0:
			return resolvedLayout{}, invalidLayout("virtual slot %d has size 0", k)
		case s.Offset%p.Alignment != 0:
			return resolvedLayout{}, invalidLayout("virtual slot %d: offset %d is not a multiple of the alignment of %d B", k, s.Offset, p.Alignment)
		case !ok || s.Offset > virtualMaxSpace/2 || size > virtualMaxSpace/2-s.Offset:
			return resolvedLayout{}, invalidLayout("virtual slot %d: %d B at offset %d passes %d B of address space", k, s.Size, s.Offset, uint64(virtualMaxSpace/2))
		}
		c.slots[k] = VirtualSlot{Size: size, Offset: s.Offset}
		c.slotsEnd = max(c.slotsEnd, s.Offset+size)
	}
	if len(c.slots) > 0 {
		c.slotIdx = newSlotIndex(c.slots)
	}
	return resolvedLayout{pools: []poolConfig{c}}, nil
}

// warnLeftPlan warns, once per layout, that the run stopped following its
// plan's stream; it is counted as a spill.
func (m *Manager) warnLeftPlan(ordinal, size uint64) {
	m.spills++
	if m.warned[len(m.pools)] {
		return
	}
	m.warned[len(m.pools)] = true
	m.logger.Warn("memory: the run left its plan's stream; later reservations are placed as they come",
		"reservation", ordinal, "bytes", size)
}
