package memory

import (
	"fmt"
	"slices"
)

// VirtualPlan is what a plan tells a Virtual layout: how much device memory
// the run is expected to need at once. The pool takes it from the driver in
// a few allocations as the run needs it, never all up front, and grows past
// it (warning once) when the run needs more.
type VirtualPlan struct {
	// PlannedBytes is the device memory the planned run needed at its
	// peak; 0 is no plan.
	PlannedBytes uint64 `json:"planned_bytes"`
}

// VirtualLayout is one virtual pool: every reservation placed in one large
// range of address space (TLSF), device memory bound only under the
// granules live reservations touch, taken from the driver in chunks. It
// needs a [SparseStorage] with a granule; on any other storage it builds
// the SubSlices pools instead.
func VirtualLayout(p VirtualPlan) Layout { return Layout{kind: LayoutVirtual, virtual: p} }

// Virtual returns the plan of a Virtual layout.
func (l Layout) Virtual() (VirtualPlan, bool) {
	if l.kind != LayoutVirtual {
		return VirtualPlan{}, false
	}
	return l.virtual, true
}

// marshalLayout is the layout's JSON: "Virtual" without a plan.
func (p VirtualPlan) marshalLayout() []byte {
	if p == (VirtualPlan{}) {
		return []byte(`"Virtual"`)
	}
	return fmt.Appendf(nil, `{"Virtual":{"planned_bytes":%d}}`, p.PlannedBytes)
}

func (p *VirtualPlan) unmarshalBody(body []byte) error {
	if body == nil || isJSONNull(body) {
		*p = VirtualPlan{}
		return nil
	}
	o, err := decodeObject(body, "Virtual layout", "planned_bytes")
	if err != nil {
		return err
	}
	v, err := o.uint64("planned_bytes")
	if err != nil {
		return err
	}
	*p = VirtualPlan{PlannedBytes: v}
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
		s, ok := m.storage.(SparseStorage)
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
		if c.heap <= space/virtualSpacePerHeap {
			space = c.heap * virtualSpacePerHeap
		}
		c.space = space &^ (granule - 1)
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
	if m.warned[len(m.pools)] {
		return
	}
	m.warned[len(m.pools)] = true
	m.logger.Warn("memory: the run needs more device memory than its plan expected; the pool grows",
		"planned_bytes", planned, "needed_bytes", need)
}
