package memory

import (
	"fmt"

	json "github.com/goccy/go-json"
)

// PoolKind is the shape of a pool a [PoolReport] describes, carrying the
// pool's effective configuration (after alignment rounding and page
// shrinking). It is one of [SlicedKind], [ExclusiveKind], [DirectKind],
// [PersistentKind] or [ArenaKind]; in JSON it is externally tagged:
// {"Sliced":{...}}, {"Exclusive":{...}}, "Direct", "Persistent",
// {"Arena":{...}}.
type PoolKind interface {
	json.Marshaler
	// variant is the JSON tag of the kind.
	variant() string
}

// SlicedKind: allocations are slices carved from shared pages.
type SlicedKind struct {
	PageSize     uint64  `json:"page_size"`
	MaxSliceSize uint64  `json:"max_slice_size"`
	MaxPoolSize  *uint64 `json:"max_pool_size"` // bytes; nil grows unbounded
}

// ExclusiveKind: every allocation is a device page of its own.
type ExclusiveKind struct {
	MaxAllocSize uint64 `json:"max_alloc_size"`
	// MaxPoolSize is a capped pool's cap (a plan's, SlicedPool.Exclusive)
	// at its largest pages: its pages times MaxAllocSize. nil for an
	// uncapped pool, and left out of the JSON then.
	MaxPoolSize *uint64 `json:"max_pool_size,omitempty"`
}

// DirectKind: one device allocation per reservation, reused by exact size.
type DirectKind struct{}

// PersistentKind: exact-fit slices reused only by identical size.
type PersistentKind struct{}

// ArenaKind: slots planned offline over a fixed set of pages.
type ArenaKind struct {
	PageBytes uint64 `json:"page_bytes"` // the sum of the arena's page sizes
	Slots     uint64 `json:"slots"`      // how many reservations the plan places
}

func (SlicedKind) variant() string     { return "Sliced" }
func (ExclusiveKind) variant() string  { return "Exclusive" }
func (DirectKind) variant() string     { return "Direct" }
func (PersistentKind) variant() string { return "Persistent" }
func (ArenaKind) variant() string      { return "Arena" }

// slicedBody has no methods, so marshalling it does not recurse.
type slicedBody SlicedKind

func (k SlicedKind) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]slicedBody{"Sliced": slicedBody(k)})
}

func (k ExclusiveKind) MarshalJSON() ([]byte, error) {
	if k.MaxPoolSize != nil {
		return fmt.Appendf(nil, `{"Exclusive":{"max_alloc_size":%d,"max_pool_size":%d}}`, k.MaxAllocSize, *k.MaxPoolSize), nil
	}
	return fmt.Appendf(nil, `{"Exclusive":{"max_alloc_size":%d}}`, k.MaxAllocSize), nil
}

func (DirectKind) MarshalJSON() ([]byte, error)     { return []byte(`"Direct"`), nil }
func (PersistentKind) MarshalJSON() ([]byte, error) { return []byte(`"Persistent"`), nil }

func (k ArenaKind) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"Arena":{"page_bytes":%d,"slots":%d}}`, k.PageBytes, k.Slots), nil
}

// UnmarshalPoolKind decodes the externally tagged JSON form of a pool kind.
func UnmarshalPoolKind(data []byte) (PoolKind, error) {
	const what = "pool kind"
	name, body, err := decodeVariant(data, what)
	if err != nil {
		return nil, err
	}
	switch name {
	case "Direct", "Persistent":
		if body != nil && !isJSONNull(body) {
			return nil, fmt.Errorf("memory: %s: %s carries no data, got %s", what, name, abbreviate(body))
		}
		if name == "Direct" {
			return DirectKind{}, nil
		}
		return PersistentKind{}, nil
	case "Sliced":
		o, err := decodeObject(body, "Sliced pool kind", "page_size", "max_slice_size", "max_pool_size")
		if err != nil {
			return nil, err
		}
		var k SlicedKind
		if k.PageSize, err = o.uint64("page_size"); err != nil {
			return nil, err
		}
		if k.MaxSliceSize, err = o.uint64("max_slice_size"); err != nil {
			return nil, err
		}
		if k.MaxPoolSize, err = o.optionalUint64("max_pool_size"); err != nil {
			return nil, err
		}
		return k, nil
	case "Exclusive":
		o, err := decodeObject(body, "Exclusive pool kind", "max_alloc_size", "max_pool_size")
		if err != nil {
			return nil, err
		}
		var k ExclusiveKind
		if k.MaxAllocSize, err = o.uint64("max_alloc_size"); err != nil {
			return nil, err
		}
		k.MaxPoolSize, err = o.optionalUint64("max_pool_size")
		return k, err
	case "Arena":
		o, err := decodeObject(body, "Arena pool kind", "page_bytes", "slots")
		if err != nil {
			return nil, err
		}
		var k ArenaKind
		if k.PageBytes, err = o.uint64("page_bytes"); err != nil {
			return nil, err
		}
		k.Slots, err = o.uint64("slots")
		return k, err
	case "Virtual":
		return unmarshalVirtualKind(body)
	}
	return nil, unknownVariant(what, name, "Sliced", "Exclusive", "Direct", "Persistent", "Arena", "Virtual")
}

// PoolReport is one pool's measured state: its shape, its usage and the
// high-water marks a plan is derived from.
type PoolReport struct {
	Kind  PoolKind `json:"kind"`
	Usage Usage    `json:"usage"`
	// Pages counts the device allocations the pool holds now: pages for
	// sliced, exclusive and arena pools; for direct and persistent pools,
	// allocations held, in use or cached free.
	Pages uint64 `json:"pages"`
	// PagesPeak is the most pages held at once since the pools were built.
	PagesPeak uint64 `json:"pages_peak"`
	// PagesUnmapped counts current pages with no device memory behind them.
	PagesUnmapped uint64 `json:"pages_unmapped"`
	// LargestAlloc is the largest reservation served, in requested bytes.
	LargestAlloc uint64 `json:"largest_alloc"`
}

func (r *PoolReport) UnmarshalJSON(data []byte) error {
	o, err := decodeObject(data, "pool report", "kind", "usage", "pages", "pages_peak", "pages_unmapped", "largest_alloc")
	if err != nil {
		return err
	}
	var out PoolReport
	raw, err := o.raw("kind")
	if err != nil {
		return err
	}
	if out.Kind, err = UnmarshalPoolKind(raw); err != nil {
		return err
	}
	if raw, err = o.raw("usage"); err != nil {
		return err
	}
	if err = out.Usage.UnmarshalJSON(raw); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		dst  *uint64
	}{{"pages", &out.Pages}, {"pages_peak", &out.PagesPeak}, {"pages_unmapped", &out.PagesUnmapped}, {"largest_alloc", &out.LargestAlloc}} {
		if *f.dst, err = o.uint64(f.name); err != nil {
			return err
		}
	}
	*r = out
	return nil
}

func (u *Usage) UnmarshalJSON(data []byte) error {
	o, err := decodeObject(data, "usage", "number_allocs", "bytes_in_use", "bytes_padding", "bytes_reserved")
	if err != nil {
		return err
	}
	var out Usage
	for _, f := range []struct {
		name string
		dst  *uint64
	}{{"number_allocs", &out.NumberAllocs}, {"bytes_in_use", &out.BytesInUse}, {"bytes_padding", &out.BytesPadding}, {"bytes_reserved", &out.BytesReserved}} {
		if *f.dst, err = o.uint64(f.name); err != nil {
			return err
		}
	}
	*u = out
	return nil
}

// Report is a per-pool snapshot of one Manager.
type Report struct {
	// Dynamic has one entry per dynamic pool in routing order (the order of
	// the layout; an arena first, then its fallback pools).
	Dynamic []PoolReport `json:"dynamic"`
	// Persistent is the pool of persistent windows.
	Persistent PoolReport `json:"persistent"`
}

// Usage sums the usage of every pool in the report, saturating as
// [Usage.Combine] does.
func (r Report) Usage() Usage {
	u := r.Persistent.Usage
	for _, p := range r.Dynamic {
		u = u.Combine(p.Usage)
	}
	return u
}

// reportJSON has no methods, so marshalling it does not recurse.
type reportJSON Report

// MarshalJSON writes the report as UnmarshalJSON reads it. A dynamic pool
// with no kind is an error: its JSON would not read back.
func (r Report) MarshalJSON() ([]byte, error) {
	if r.Dynamic == nil {
		r.Dynamic = []PoolReport{}
	}
	if r.Persistent.Kind == nil {
		// The zero Report (a client's for a stream it has not) has a
		// persistent pool of no kind: written "kind":null, it was JSON
		// that UnmarshalJSON refuses. The persistent pool has one kind.
		r.Persistent.Kind = PersistentKind{}
	}
	for i, p := range r.Dynamic {
		if p.Kind == nil {
			// Written "kind":null, it is JSON that UnmarshalJSON refuses:
			// a record stored so could not be read back. A dynamic pool's
			// kind cannot be told from its figures.
			return nil, fmt.Errorf("memory: report.dynamic[%d] has no pool kind: want one of Sliced, Exclusive, Direct, Arena, Virtual", i)
		}
	}
	return json.Marshal(reportJSON(r))
}

func (r *Report) UnmarshalJSON(data []byte) error {
	o, err := decodeObject(data, "report", "dynamic", "persistent")
	if err != nil {
		return err
	}
	raw, err := o.raw("dynamic")
	if err != nil {
		return err
	}
	// The most pools a layout builds: an arena, its fallback list and the
	// exclusive pool a growing list ends in.
	elems, err := decodeArray(raw, "report.dynamic", MaxLayoutPools+2)
	if err != nil {
		return err
	}
	out := Report{Dynamic: make([]PoolReport, len(elems))}
	for i, e := range elems {
		if err := out.Dynamic[i].UnmarshalJSON(e); err != nil {
			return nested(fmt.Sprintf("report.dynamic[%d]", i), err)
		}
	}
	if raw, err = o.raw("persistent"); err != nil {
		return err
	}
	if err := out.Persistent.UnmarshalJSON(raw); err != nil {
		return nested("report.persistent", err)
	}
	*r = out
	return nil
}

// RecordKind is the environment record kind of a [Record].
const RecordKind = "memory"

// Record is a Report as an environment stores it: one stream's pools at a
// moment the caller named.
type Record struct {
	Label  string `json:"label"`
	Report Report `json:"report"`
}

func (r *Record) UnmarshalJSON(data []byte) error {
	o, err := decodeObject(data, "memory record", "label", "report")
	if err != nil {
		return err
	}
	raw, err := o.raw("label")
	if err != nil {
		return err
	}
	var out Record
	if out.Label, err = decodeString(raw, "memory record.label"); err != nil {
		return err
	}
	if raw, err = o.raw("report"); err != nil {
		return err
	}
	if err := out.Report.UnmarshalJSON(raw); err != nil {
		return err
	}
	*r = out
	return nil
}
