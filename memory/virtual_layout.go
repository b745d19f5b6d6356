package memory

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/vkrt/vkrt/internal/printable"
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
	// Profile is how the planned run's need grew: the most bytes of
	// granules it needed at once up to each mark's reservation, marks in
	// reservation order. A run that leaves the planned stream compares
	// its own growth with it to foresee its peak; none is no foresight.
	Profile []VirtualMark
	// Settled is the planned run's settled start: its reservations up to
	// and including Settled.Ordinal lived as long as it reserved anything,
	// and needed Settled.Bytes of granules. They are what every run of the
	// workload makes alike (weights, state), so a run that follows them
	// takes that memory in one step rather than growing towards it; a run
	// of another model that starts as the planned one did and leaves the
	// plan inside its settled start holds what the rest of it would have
	// needed, up to the plan. Bytes 0 is none.
	Settled VirtualMark
}

// VirtualMark says the planned run needed at most Bytes of granules at
// once up to and including its reservation Ordinal (from 0). In JSON a
// plan's profile is one flat array [ordinal, bytes, …].
type VirtualMark struct{ Ordinal, Bytes uint64 }

// VirtualSlot is where one planned reservation goes: Size bytes at Offset
// of the address range. In JSON a plan's slots are one flat array
// [size, offset, size, offset, …].
type VirtualSlot struct{ Size, Offset uint64 }

func (p VirtualPlan) equal(o VirtualPlan) bool {
	return p.PlannedBytes == o.PlannedBytes && slices.Equal(p.Slots, o.Slots) && slices.Equal(p.Profile, o.Profile) && p.Settled == o.Settled
}

// VirtualLayout is one virtual pool: every reservation placed in one large
// range of address space (TLSF), device memory bound only under the
// granules live reservations touch, taken from the driver in chunks. It
// needs a [vkruntime.SparseStorage] with a granule; on any other storage it builds
// the SubSlices pools instead.
func VirtualLayout(p VirtualPlan) Layout {
	p.Slots, p.Profile = slices.Clone(p.Slots), slices.Clone(p.Profile)
	if p.Settled.Bytes == 0 {
		p.Settled = VirtualMark{} // none, as its JSON says
	}
	return Layout{kind: LayoutVirtual, virtual: p}
}

// Virtual returns the plan of a Virtual layout.
func (l Layout) Virtual() (VirtualPlan, bool) {
	if l.kind != LayoutVirtual {
		return VirtualPlan{}, false
	}
	p := l.virtual
	p.Slots, p.Profile = slices.Clone(p.Slots), slices.Clone(p.Profile)
	return p, true
}

// marshalLayout is the layout's JSON: "Virtual" without a plan.
func (p VirtualPlan) marshalLayout() []byte {
	if p.PlannedBytes == 0 && len(p.Slots) == 0 && len(p.Profile) == 0 && p.Settled.Bytes == 0 {
		return []byte(`"Virtual"`)
	}
	b := fmt.Appendf(nil, `{"Virtual":{"planned_bytes":%d`, p.PlannedBytes)
	b = appendUintPairs(b, "slots", len(p.Slots), func(i int) (uint64, uint64) { return p.Slots[i].Size, p.Slots[i].Offset })
	b = appendUintPairs(b, "profile", len(p.Profile), func(i int) (uint64, uint64) { return p.Profile[i].Ordinal, p.Profile[i].Bytes })
	if p.Settled.Bytes != 0 {
		b = appendUintPairs(b, "settled", 1, func(int) (uint64, uint64) { return p.Settled.Ordinal, p.Settled.Bytes })
	}
	return append(b, "}}"...)
}

func (p *VirtualPlan) unmarshalBody(body []byte) error {
	if body == nil || isJSONNull(body) {
		*p = VirtualPlan{}
		return nil
	}
	o, err := decodeObject(body, "Virtual layout", "planned_bytes", "slots", "profile", "settled")
	if err != nil {
		return err
	}
	var out VirtualPlan
	if out.PlannedBytes, err = o.uint64("planned_bytes"); err != nil {
		return err
	}
	slots, err := decodeUintPairs(o.get("slots"), "slots", "slot %d", "size", "offset")
	if err != nil {
		return err
	}
	if len(slots) > 0 {
		out.Slots = make([]VirtualSlot, len(slots)/2)
		for i := range out.Slots {
			out.Slots[i] = VirtualSlot{Size: slots[2*i], Offset: slots[2*i+1]}
		}
	}
	marks, err := decodeUintPairs(o.get("profile"), "profile", "profile mark %d", "ordinal", "bytes")
	if err != nil {
		return err
	}
	for i := 0; i < len(marks); i += 2 {
		out.Profile = append(out.Profile, VirtualMark{Ordinal: marks[i], Bytes: marks[i+1]})
	}
	settled, err := decodeUintPairs(o.get("settled"), "settled", "settled mark %d", "ordinal", "bytes")
	if err != nil {
		return err
	}
	switch {
	case len(settled) > 2:
		return fmt.Errorf("memory: Virtual layout settled: want one [ordinal, bytes] pair, got %d", len(settled)/2)
	case len(settled) == 2 && settled[1] != 0:
		// Bytes 0 is no settled start, whatever its ordinal: it is
		// written as none, and must read back Equal.
		out.Settled = VirtualMark{Ordinal: settled[0], Bytes: settled[1]}
	}
	*p = out
	return nil
}

// appendUintPairs appends the member of n pairs as one flat array, or
// nothing for none.
func appendUintPairs(b []byte, member string, n int, pair func(i int) (uint64, uint64)) []byte {
	if n == 0 {
		return b
	}
	b = append(b, `,"`+member+`":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		first, second := pair(i)
		b = strconv.AppendUint(b, first, 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, second, 10)
	}
	return append(b, ']')
}

// decodeUintPairs reads a member of a Virtual layout that is one flat
// array of pairs of numbers, [first, second, …], as read: pair i is
// numbers 2i and 2i+1. Absent or null is none.
func decodeUintPairs(raw []byte, member, item, first, second string) ([]uint64, error) {
	if raw == nil || isJSONNull(raw) {
		return nil, nil
	}
	names := [2]string{first, second}
	nums, err := decodeUintTuples(raw, "Virtual layout "+member, 0, 2*MaxArenaSlots, func(k int) string {
		return fmt.Sprintf("Virtual layout "+item+" %s", k/2, names[k%2])
	})
	var tooMany *tooManyError
	if errors.As(err, &tooMany) {
		// Counted in pairs, as the limit is.
		return nil, fmt.Errorf("memory: Virtual layout %s: more than %d [%s, %s] pairs", member, MaxArenaSlots, first, second)
	}
	if err != nil {
		return nil, err
	}
	if len(nums)%2 != 0 {
		return nil, fmt.Errorf("memory: Virtual layout %s: want [%s, %s, …] pairs, got %d numbers", member, first, second, len(nums))
	}
	return nums, nil
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

// sparseGranuleOf is the storage's sparse granule where a Virtual pool
// can use it, else 0 (the SubSlices pools stand in). A granule past the
// storage's largest allocation or its memory is of no use: one allocation
// must back it (a device of 4 KiB given 64 KiB granules built a pool that
// served nothing, not even 1 B). A granule below virtualMinGranule is
// refused too: the pool keeps bits for each granule of its range, and at
// 1 B granules one of 256 MiB took 134 MB of heap, and one of 8 GiB ran
// the process out of memory under an 8 GB limit. So is a sparse address
// space that holds no granule: a pool built on one served nothing and held
// a range of 0 B, and a plan's layout was refused as invalid.
func (m *Manager) sparseGranuleOf() (vkruntime.SparseStorage, uint64) {
	s, ok := m.storage.(vkruntime.SparseStorage)
	if !ok {
		return nil, 0
	}
	granule := s.SparseGranule()
	if granule < virtualMinGranule || granule&(granule-1) != 0 || granule%m.props.Alignment != 0 || granule > m.limit() ||
		(m.props.MemorySize != 0 && granule > m.props.MemorySize) || s.MaxVirtualSize() < granule {
		return nil, 0
	}
	return s, granule
}

// virtualMinGranule is the least sparse granule a virtual pool takes: its
// largest range (virtualMaxSpace) is then 2^32 granules, which the pool's
// 32-bit granule counts and chunk offsets hold. Devices bind in 4 KiB or
// more (64 KiB on the H200); tests bind 256 B granules so that small
// reservations span many.
const virtualMinGranule = virtualMaxSpace >> 32

// checkAddressSpace refuses, as an invalid layout, a Virtual plan whose
// places end past the address space the storage's ranges may take: its
// first range could never be reserved.
func (m *Manager) checkAddressSpace(r resolvedLayout) error {
	s, granule := m.sparseGranuleOf()
	if granule == 0 {
		return nil
	}
	space := min(s.MaxVirtualSize(), virtualMaxSpace)
	for _, c := range r.pools {
		if end := (c.slotsEnd + granule - 1) &^ (granule - 1); c.shape == shapeVirtual && end >= space {
			return invalidLayout("the virtual plan's places end at %d B, and this device's sparse ranges may take %d B", c.slotsEnd, space)
		}
	}
	return nil
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
		s, granule := m.sparseGranuleOf()
		if granule == 0 {
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
		c.maxChunk = max(min(m.limit(), max(c.heap/virtualChunkDivisor, VirtualChunkUnit))&^(granule-1), granule)
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
	if c.planned > c.heap {
		// A forecast past the device is the device: the pool could not
		// hold more, and growing towards it would take the whole heap.
		c.note = fmt.Sprintf("the virtual plan expects %d B, more than the device memory; it expects %d B", c.planned, c.heap)
		c.planned = c.heap
	}
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
	for k, m := range plan.Profile {
		if k > 0 && (m.Ordinal <= plan.Profile[k-1].Ordinal || m.Bytes < plan.Profile[k-1].Bytes) {
			return resolvedLayout{}, invalidLayout("virtual profile mark %d: ordinals must rise and bytes not fall", k)
		}
	}
	c.profile = plan.Profile
	if s := plan.Settled; s.Bytes != 0 {
		if s.Ordinal >= uint64(len(plan.Slots)) {
			return resolvedLayout{}, invalidLayout("virtual settled start: reservation %d is past the plan's %s", s.Ordinal, printable.Count(len(plan.Slots), "slot"))
		}
		c.settled = s
	}
	return resolvedLayout{pools: []poolConfig{c}}, nil
}

// warnPlacesPastSpace warns, once per layout, that the stream runs
// without its plan, whose places the device's sparse address space could
// no longer hold; it is counted as a spill.
func (m *Manager) warnPlacesPastSpace(ordinal, size, places uint64) {
	m.spills++
	if m.warned[len(m.pools)] {
		return
	}
	m.warned[len(m.pools)] = true
	m.logger.Warn("memory: the device's sparse address space left cannot hold the plan's places, taken by the streams before; this stream runs without its plan",
		"reservation", ordinal, "bytes", size, "places_bytes", places)
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
