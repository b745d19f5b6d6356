package memory

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vkrt/vkrt/internal/saturate"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// faultStorage is a sparseStorage that refuses chosen calls: the n-th
// Alloc, ReserveVirtual or Bind from now, as a device out of memory does.
// A refused call changes nothing on the device.
type faultStorage struct {
	*sparseStorage
	allocs, reserves, binds int // calls made, refused ones included
	failAlloc, failReserve  map[int]bool
	failBind                map[int]bool
	refusedCalls            int  // armed refusals and the double's own (heap, address space, binds)
	hold                    bool // refuse nothing while set
	// limit, when non-zero, is the largest allocation the storage makes
	// (limitedFaultStorage says so); a larger one is a pool's mistake.
	limit    uint64
	tooLarge []uint64
}

func newFaultStorage(granule uint64) *faultStorage {
	return &faultStorage{sparseStorage: newSparseStorage(granule),
		failAlloc: map[int]bool{}, failReserve: map[int]bool{}, failBind: map[int]bool{}}
}

func (s *faultStorage) refuse(set map[int]bool, n int) bool {
	if s.hold || !set[n] {
		return false
	}
	delete(set, n)
	s.refusedCalls++
	return true
}

func (s *faultStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	s.allocs++
	if s.limit != 0 && size > s.limit {
		s.tooLarge = append(s.tooLarge, size)
	}
	if s.refuse(s.failAlloc, s.allocs) {
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Detail: "refused by the test"}
	}
	h, err := s.sparseStorage.Alloc(size)
	if err != nil {
		s.refusedCalls++
	}
	return h, err
}

func (s *faultStorage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	s.reserves++
	if s.refuse(s.failReserve, s.reserves) {
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Detail: "address space refused by the test"}
	}
	h, err := s.sparseStorage.ReserveVirtual(size)
	if err != nil {
		s.refusedCalls++
	}
	return h, err
}

func (s *faultStorage) Bind(id vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	s.binds++
	if s.refuse(s.failBind, s.binds) {
		return &vkruntime.OutOfMemoryError{Detail: "sparse bind refused by the test"}
	}
	err := s.sparseStorage.Bind(id, binds)
	if err != nil {
		s.refusedCalls++
	}
	return err
}

// plainFaultStorage offers a faultStorage's allocations only, no sparse
// residency: a Virtual layout builds the SubSlices pools over it.
type plainFaultStorage struct{ s *faultStorage }

func (p plainFaultStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	return p.s.Alloc(size)
}
func (p plainFaultStorage) Dealloc(id vkruntime.StorageID) { p.s.Dealloc(id) }
func (p plainFaultStorage) Flush()                         { p.s.Flush() }

// limitedFaultStorage is a faultStorage that says it cannot allocate past
// its limit, sparse or not.
type limitedFaultStorage struct{ *faultStorage }

func (s limitedFaultStorage) MaxAllocationSize() uint64 { return s.limit }

type limitedPlainFaultStorage struct{ plainFaultStorage }

func (s limitedPlainFaultStorage) MaxAllocationSize() uint64 { return s.s.limit }

// reportingFaultStorage is a faultStorage that says what its live ranges
// leave of the address space.
type reportingFaultStorage struct{ *faultStorage }

func (s reportingFaultStorage) VirtualSpaceLeft() uint64 {
	return reportingSparse{s.sparseStorage}.VirtualSpaceLeft()
}

// modelLayouts are every layout kind the random streams install, with
// sizes scaled by scale: the presets, sliced ladders capped, uncapped and
// growing, direct, an arena plan, and virtual pools with and without a plan.
func modelLayouts(scale uint64) []Layout {
	k := func(v uint64) uint64 { return v * scale }
	uk := func(v uint64) *uint64 { return u64(v * scale) }
	slots := func(ss ...VirtualSlot) []VirtualSlot {
		for i := range ss {
			ss[i].Size, ss[i].Offset = k(ss[i].Size), k(ss[i].Offset)
		}
		return ss
	}
	profile := []VirtualMark{{0, k(64)}, {1, k(192)}, {4, k(1024)}, {9, k(4096)}}
	return []Layout{
		SlicedLayout(SlicedPool{PageSize: k(512), Pages: u64(2), MaxSlice: uk(128)},
			SlicedPool{PageSize: k(1024), Pages: u64(3)}, SlicedPool{PageSize: k(4096)}),
		SlicedLayout(SlicedPool{PageSize: k(1000)}),
		SlicedLayout(SlicedPool{PageSize: k(256), Pages: u64(1)}, SlicedPool{PageSize: k(1024), Pages: u64(1), MaxSlice: uk(1024)}),
		SlicedLayout(SlicedPool{PageSize: k(2048), Pages: u64(2)}),
		SlicedLayout(SlicedPool{PageSize: k(512), Pages: u64(2), MaxSlice: uk(256), Grow: true},
			SlicedPool{PageSize: k(4096), Pages: u64(1), Grow: true}, SlicedPool{PageSize: k(65536), Grow: true}),
		SlicedLayout(SlicedPool{PageSize: k(1024), Pages: u64(1)}, SlicedPool{PageSize: k(1024), Pages: u64(2), Grow: true}),
		// A basic plan's: an exclusive pool capped as a forecast, and one
		// capped as a limit.
		SlicedLayout(SlicedPool{PageSize: k(512), Pages: u64(2), MaxSlice: uk(128), Grow: true},
			SlicedPool{PageSize: k(4096), Pages: u64(2), Grow: true, Exclusive: true}),
		SlicedLayout(SlicedPool{PageSize: k(512), MaxSlice: uk(128)}, SlicedPool{PageSize: k(4096), Pages: u64(2), Exclusive: true}),
		SubSlicesLayout(),
		ExclusivePagesLayout(),
		DirectLayout(),
		ArenaLayout(ArenaPlan{
			Pages: []uint64{k(2048), k(1024)},
			Slots: []ArenaSlot{{k(64), 0, 0}, {k(128), 0, k(64)}, {k(64), 0, 0}, {k(256), 1, k(256)}, {k(64), 0, k(1024)},
				{k(1024), 1, 0}, {k(64), 0, k(64)}},
			Fallback: []SlicedPool{{PageSize: k(256), Pages: u64(1)}, {PageSize: k(2048)}},
		}),
		VirtualLayout(VirtualPlan{}),
		VirtualLayout(VirtualPlan{PlannedBytes: k(4096), Slots: slots(VirtualSlot{64, 0}, VirtualSlot{128, 64}, VirtualSlot{64, 0},
			VirtualSlot{256, 512}, VirtualSlot{1024, 1024})}),
		VirtualLayout(VirtualPlan{PlannedBytes: k(4096), Slots: slots(VirtualSlot{64, 0}, VirtualSlot{128, 64}, VirtualSlot{64, 0}),
			Profile: profile}),
		VirtualLayout(VirtualPlan{PlannedBytes: k(4096), Slots: slots(VirtualSlot{64, 0}, VirtualSlot{128, 64}, VirtualSlot{64, 0}),
			Profile: profile, Settled: VirtualMark{1, k(192)}}),
	}
}

// modelHandle is what the model knows of one reservation.
type modelHandle struct {
	h          Handle
	requested  uint64
	lazy       bool
	resolved   bool
	live       bool
	persistent bool
}

// modelStream is one manager of a run and what the model knows of it.
type modelStream struct {
	m      *Manager
	hs     []modelHandle
	window int
	prev   Report
	// The most pages seen held and the largest request served, by report
	// index (the persistent pool last), since the last Install.
	peaks, largest []uint64
}

// modelRun drives a fresh manager with a random stream from seed and checks
// it against a model after every call. It returns a transcript.
func modelRun(t *testing.T, seed uint64, steps int, sparse, large bool) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	props, granule, scale := fuzzProps, uint64(256), uint64(1)
	if large {
		// Pages and requests of tens of megabytes, where the exclusive
		// pools weigh the memory a reuse would leave unused.
		props = vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 64 << 20, MemorySize: 1 << 30}
		granule, scale = 64<<10, 1<<10
	}
	if !large && seed%6 == 5 {
		// The smallest alignment, pages not a power of two, and a device
		// that does not say how much memory it has.
		props = vkruntime.DeviceProperties{Alignment: 4, MaxPageSize: 12 << 10}
		granule = 64 << 10 // virtual pools place the largest requests too
	}
	fs := newFaultStorage(granule)
	var storage vkruntime.Storage = fs
	if !sparse {
		storage = plainFaultStorage{fs}
	}
	if sparse && seed%7 == 4 {
		// A storage that says how much address space is left, most of it
		// taken by other streams: pools take ranges of what they need.
		storage = reportingFaultStorage{fs}
		takeAddressSpace(fs.sparseStorage, fs.MaxVirtualSize()/3)
	}
	if seed%5 == 2 {
		// A backend that allocates at most a few pages at once.
		fs.limit = max(uint64(4096+rng.IntN(8)*1024)*scale, granule) // a granule at least, as on every device
		if sparse {
			storage = limitedFaultStorage{fs}
		} else {
			storage = limitedPlainFaultStorage{plainFaultStorage{fs}}
		}
	}
	layouts := modelLayouts(scale)
	var streams []*modelStream
	for len(streams) < 2 {
		l := layouts[rng.IntN(len(layouts))]
		m, err := NewManager(storage, props, l)
		if errors.Is(err, &InstallError{Kind: InvalidLayout}) && fs.limit != 0 {
			continue // pages past the backend's limit
		}
		if err != nil {
			t.Fatalf("seed %d: NewManager(%s): %v", seed, l, err)
		}
		m.SetLogger(slog.New(slog.DiscardHandler))
		st := &modelStream{m: m, prev: m.Report()}
		st.peaks, st.largest = marksOf(st.prev)
		streams = append(streams, st)
	}
	var transcript []string
	fail := func(format string, args ...any) {
		t.Helper()
		tail := append(transcript[:1:1], transcript[max(1, len(transcript)-12):]...)
		t.Fatalf("seed %d (sparse %v, large %v), step %d: %s\nlast steps:\n%s", seed, sparse, large, len(transcript), fmt.Sprintf(format, args...), strings.Join(tail, "\n"))
	}
	note := func(format string, args ...any) { transcript = append(transcript, fmt.Sprintf(format, args...)) }
	note("new %s, %s", streams[0].m.Layout(), streams[1].m.Layout())
	size := func() uint64 {
		switch rng.IntN(10) {
		case 0, 1, 2, 3:
			return fuzzSizes[rng.IntN(len(fuzzSizes))] * scale
		case 4, 5, 6:
			return uint64(rng.IntN(2048)) * scale
		case 7:
			return uint64(rng.IntN(1<<16)) * scale
		case 8:
			return uint64(rng.IntN(1<<20)) * scale
		}
		return fuzzHugeSizes[rng.IntN(len(fuzzHugeSizes))]
	}
	for step := 0; step < steps; step++ {
		si := rng.IntN(len(streams))
		st := streams[si]
		m := st.m
		// pick is a handle of this stream, or now and then one of the
		// other stream's, which this manager does not know.
		pick := func() (modelHandle, *modelHandle) {
			if o := streams[1-si]; len(o.hs) > 0 && rng.IntN(8) == 0 {
				e := o.hs[rng.IntN(len(o.hs))]
				e.live = false
				return e, nil
			}
			if len(st.hs) == 0 {
				return modelHandle{}, nil
			}
			e := &st.hs[rng.IntN(len(st.hs))]
			return *e, e
		}
		before, beforeUsage, spills := m.Report(), m.Usage(), m.Spills()
		deviceBefore := fs.liveBytes()
		reserved := false
		installed := false
		switch op := rng.IntN(100); {
		case op < 40:
			n := size()
			mapping := Eager
			if rng.IntN(2) == 0 {
				mapping = Lazy
			}
			refused := fs.refusedCalls
			h, err := m.Reserve(n, mapping)
			note("reserve %d %v: %v", n, mapping, modelErr(err))
			if err != nil {
				if h != (Handle{}) {
					fail("a refused reserve returned %v", h)
				}
				known := errors.Is(err, vkruntime.ErrBufferTooBig) || errors.Is(err, vkruntime.ErrPoolCapacityExceeded) ||
					errors.Is(err, vkruntime.ErrOutOfDeviceMemory)
				if !known {
					fail("reserve %d: unexpected error %v", n, err)
				}
				// Past 2^64 B held (lazily, or on a device that does not
				// say its size) the pools refuse what their counters
				// cannot hold.
				if errors.Is(err, vkruntime.ErrOutOfDeviceMemory) && fs.refusedCalls == refused && n < 1<<32 && beforeUsage.BytesReserved < 1<<62 {
					fail("reserve %d: out of device memory with nothing refused: %v", n, err)
				}
				if d := fs.liveBytes(); d > deviceBefore {
					fail("a refused reserve left the device holding %d B more", d-deviceBefore)
				}
				// A page unmapped to make room stays unmapped only when the
				// device refused it back too.
				after := m.Report()
				if fs.refusedCalls-refused > 1 && equalMarks(before, after) {
					break
				}
				if !equalReports(before, after) {
					fail("a refused reserve (%d refusals) changed the report:\nbefore %s\nafter  %s", fs.refusedCalls-refused, reportLine(before), reportLine(after))
				}
				break
			}
			for _, o := range st.hs {
				if o.live && o.h == h {
					fail("reserve returned the live handle %v again", h)
				}
			}
			reserved = true
			st.hs = append(st.hs, modelHandle{h: h, requested: n, lazy: mapping == Lazy, live: true, persistent: st.window > 0})
			r, _ := m.lookup(h, "model")
			pi := reportIndex(m, int(r.pool))
			if pi < 0 {
				pi = len(st.largest) - 1
			}
			st.largest[pi] = max(st.largest[pi], n)
		case op < 65:
			e, in := pick()
			err := m.Free(e.h)
			note("free %d.%d (live %v): %v", e.h.slot, e.h.gen, e.live, errKind(err))
			if e.live {
				if err != nil {
					fail("free of a live handle: %v", err)
				}
				in.live = false
				break
			}
			if !errors.Is(err, vkruntime.ErrNotFound) {
				fail("stale free: %v, want ErrNotFound", err)
			}
			if after := m.Report(); !equalReports(before, after) {
				fail("a stale free changed the report")
			}
		case op < 80:
			e, in := pick()
			refused := fs.refusedCalls
			sh, err := m.Resolve(e.h)
			note("resolve %d.%d (live %v): %v %v", e.h.slot, e.h.gen, e.live, sh, modelErr(err))
			switch {
			case !e.live:
				if !errors.Is(err, vkruntime.ErrNotFound) {
					fail("resolve of a stale handle: %v, want ErrNotFound", err)
				}
			case err != nil:
				if fs.refusedCalls == refused {
					fail("resolve of a live handle failed with nothing refused: %v", err)
				}
				if after, u := m.Report(), m.Usage(); u != beforeUsage || !equalMarks(before, after) ||
					(fs.refusedCalls-refused == 1 && !equalReports(before, after)) {
					fail("a refused resolve (%d refusals) changed the report:\nbefore %s\nafter  %s", fs.refusedCalls-refused, reportLine(before), reportLine(after))
				}
				if d := fs.liveBytes(); d > deviceBefore {
					fail("a refused resolve left the device holding %d B more", d-deviceBefore)
				}
			default:
				in.resolved = true
			}
		case op < 84:
			// The device refuses a call soon.
			k := 1 + rng.IntN(4)
			switch rng.IntN(3) {
			case 0:
				fs.failAlloc[fs.allocs+k] = true
			case 1:
				fs.failReserve[fs.reserves+k] = true
			default:
				fs.failBind[fs.binds+k] = true
			}
			note("arm refusal")
		case op < 86:
			// Other streams take the address space but what is left, or
			// give it back; the heap fills up, or empties.
			if rng.IntN(2) == 0 {
				if _, taken := fs.ranges[1<<30]; taken {
					delete(fs.ranges, 1<<30)
				} else {
					takeAddressSpace(fs.sparseStorage, uint64(rng.IntN(1<<20))*scale)
				}
			} else if fs.heapSize != 0 {
				fs.heapSize = 0
			} else {
				fs.heapSize = uint64(rng.IntN(4<<20)) * scale
			}
			note("space")
		case op < 91:
			explicit := rng.IntN(2) == 0
			m.Cleanup(explicit)
			note("cleanup %v", explicit)
		case op < 95:
			l := layouts[rng.IntN(len(layouts))]
			var liveDynamic bool
			for _, e := range st.hs {
				liveDynamic = liveDynamic || (e.live && !e.persistent)
			}
			err := m.Install(l)
			note("install %s: %v", l, errKind(err))
			switch {
			case errors.Is(err, &InstallError{Kind: InvalidLayout}) && fs.limit != 0:
				if after := m.Report(); !equalReports(before, after) {
					fail("a refused install changed the report")
				}
			case liveDynamic:
				if !errors.Is(err, &InstallError{Kind: PoolsInUse}) {
					fail("install with live reservations: %v", err)
				}
				if after := m.Report(); !equalReports(before, after) {
					fail("a refused install changed the report")
				}
			case err != nil:
				fail("install of %s with nothing live: %v", l, err)
			default:
				installed = true
			}
		default:
			if rng.IntN(2) == 0 {
				m.BeginPersistent()
				st.window++
			} else {
				m.EndPersistent()
				st.window = max(st.window-1, 0)
			}
			note("window %d", st.window)
		}
		checkModel(t, streams, fs, fail)
		switch now := m.Spills(); {
		case installed && now != 0:
			fail("%d spills right after an install", now)
		case !installed && !reserved && now != spills:
			fail("spills went from %d to %d with no reservation", spills, now)
		case reserved && now > spills+1 && m.Layout().Kind() != LayoutVirtual:
			// A virtual plan counts its growth past the plan and the run
			// leaving it each as a spill, so one reservation may count two.
			fail("one reservation counted %d spills", now-spills)
		}
		now := m.Report()
		if installed {
			st.peaks = append(make([]uint64, len(now.Dynamic)), st.peaks[len(st.peaks)-1])
			st.largest = append(make([]uint64, len(now.Dynamic)), st.largest[len(st.largest)-1])
		} else {
			checkMarksGrow(st.prev, now, fail)
		}
		for i, p := range append(slices.Clone(now.Dynamic), now.Persistent) {
			st.peaks[i] = max(st.peaks[i], p.Pages)
			if p.PagesPeak != st.peaks[i] || p.LargestAlloc != st.largest[i] {
				fail("pool %d reports a peak of %d pages and a largest of %d B; the most seen held is %d, the largest served %d B",
					i, p.PagesPeak, p.LargestAlloc, st.peaks[i], st.largest[i])
			}
		}
		st.prev = now
	}
	// Everything frees back to nothing.
	fs.hold = true
	for _, st := range streams {
		for i := range st.hs {
			if st.hs[i].live {
				if err := st.m.Free(st.hs[i].h); err != nil {
					fail("final free: %v", err)
				}
				st.hs[i].live = false
			}
		}
		st.m.Cleanup(true)
		if u := st.m.Usage(); u != (Usage{}) {
			fail("after freeing everything and an explicit cleanup the usage is %+v", u)
		}
		rep := st.m.Report()
		for _, p := range append(rep.Dynamic, rep.Persistent) {
			if p.Pages != 0 || p.PagesUnmapped != 0 {
				fail("after an explicit cleanup %T holds %d pages (%d unmapped)", p.Kind, p.Pages, p.PagesUnmapped)
			}
		}
	}
	if len(fs.live) != 0 {
		fail("after an explicit cleanup the device holds %d allocations", len(fs.live))
	}
	if len(fs.bound) != 0 {
		fail("after an explicit cleanup %d granules are bound", len(fs.bound))
	}
	delete(fs.ranges, 1<<30)
	if len(fs.ranges) != 0 {
		fail("after an explicit cleanup the pools hold %d ranges of address space", len(fs.ranges))
	}
	note("final %s %s", reportLine(streams[0].m.Report()), reportLine(streams[1].m.Report()))
	return transcript
}

// equalReports compares two reports whole.
func equalReports(a, b Report) bool {
	if len(a.Dynamic) != len(b.Dynamic) || a.Persistent != b.Persistent {
		return false
	}
	for i := range a.Dynamic {
		if a.Dynamic[i].Usage != b.Dynamic[i].Usage || a.Dynamic[i].Pages != b.Dynamic[i].Pages ||
			a.Dynamic[i].PagesPeak != b.Dynamic[i].PagesPeak || a.Dynamic[i].PagesUnmapped != b.Dynamic[i].PagesUnmapped ||
			a.Dynamic[i].LargestAlloc != b.Dynamic[i].LargestAlloc {
			return false
		}
	}
	return true
}

// equalMarks compares two reports but for the pages mapped.
func equalMarks(a, b Report) bool {
	if len(a.Dynamic) != len(b.Dynamic) {
		return false
	}
	pa, pb := append(slices.Clone(a.Dynamic), a.Persistent), append(slices.Clone(b.Dynamic), b.Persistent)
	for i := range pa {
		x, y := pa[i], pb[i]
		if x.Usage != y.Usage || x.Pages != y.Pages || x.PagesPeak != y.PagesPeak || x.LargestAlloc != y.LargestAlloc {
			return false
		}
	}
	return true
}

// checkMarksGrow: with no Install between them, high-water marks never
// fall, and no pool holds more pages than its peak.
func checkMarksGrow(prev, now Report, fail func(string, ...any)) {
	pa, pb := append(slices.Clone(prev.Dynamic), prev.Persistent), append(slices.Clone(now.Dynamic), now.Persistent)
	if len(pa) != len(pb) {
		fail("the report's pools changed from %d to %d without an install", len(pa), len(pb))
		return
	}
	for i := range pa {
		x, y := pa[i], pb[i]
		switch {
		case y.PagesPeak < x.PagesPeak || y.LargestAlloc < x.LargestAlloc:
			fail("pool %d's marks fell: peak %d -> %d, largest %d -> %d", i, x.PagesPeak, y.PagesPeak, x.LargestAlloc, y.LargestAlloc)
		case y.Pages > y.PagesPeak:
			fail("pool %d holds %d pages, its peak says %d", i, y.Pages, y.PagesPeak)
		case y.PagesUnmapped > y.Pages:
			fail("pool %d has %d pages unmapped of %d", i, y.PagesUnmapped, y.Pages)
		case y.Usage.NumberAllocs == 0 && (y.Usage.BytesInUse != 0 || y.Usage.BytesPadding != 0):
			fail("pool %d has no reservation but %+v", i, y.Usage)
		case y.Usage.BytesReserved < y.Usage.BytesInUse+y.Usage.BytesPadding && y.Usage.BytesInUse+y.Usage.BytesPadding >= y.Usage.BytesInUse:
			fail("pool %d reserves %d B, less than its live %d B and padding %d B", i, y.Usage.BytesReserved, y.Usage.BytesInUse, y.Usage.BytesPadding)
		}
	}
}

// checkModel checks the manager against the model: usage is the live
// reservations' sums, each pool's largest_alloc covers its live ones, and
// the live reservations, resolved, lie in live device memory and never
// overlap.
func checkModel(t *testing.T, streams []*modelStream, fs *faultStorage, fail func(string, ...any)) {
	t.Helper()
	type span struct {
		lo, hi uint64
		h      Handle
	}
	spans := map[vkruntime.StorageID][]span{}
	fs.hold = true
	defer func() { fs.hold = false }()
	if len(fs.tooLarge) > 0 {
		fail("the pools asked for allocations of %v B past the backend's largest of %d B", fs.tooLarge, fs.limit)
	}
	var reserved uint64
	for _, st := range streams {
		m, hs := st.m, st.hs
		if err := m.checkInvariants(); err != nil {
			fail("invariants: %v", err)
		}
		for _, p := range m.pools {
			if vp, ok := p.(*virtualPool); ok {
				if err := deviceAgrees(vp, fs.sparseStorage); err != nil {
					fail("%v", err)
				}
			}
		}
		var n, inUse uint64
		rep := m.Report()
		for i := range hs {
			e := &hs[i]
			if !e.live {
				continue
			}
			n++
			inUse += e.requested
			r, err := m.lookup(e.h, "check")
			if err != nil {
				fail("live %v: %v", e.h, err)
				return
			}
			if pi := reportIndex(m, int(r.pool)); pi >= 0 && rep.Dynamic[pi].LargestAlloc < e.requested {
				fail("pool %d's largest_alloc %d is below its live %d B", pi, rep.Dynamic[pi].LargestAlloc, e.requested)
			}
			if e.lazy && !e.resolved {
				continue
			}
			// Resolving what is already resolved (or eager) asks the device
			// for nothing new but what a refusal left unmapped.
			sh, err := m.Resolve(e.h)
			if err != nil {
				fail("resolve of live %v: %v", e.h, err)
				return
			}
			e.resolved = true
			aligned, _ := alignUp(max(e.requested, 1), m.props.Alignment)
			if sh.Size < aligned || sh.Offset%m.props.Alignment != 0 {
				fail("live %v of %d B resolves to %v", e.h, e.requested, sh)
			}
			if size, ok := fs.ranges[sh.ID]; ok {
				if sh.End() > size {
					fail("live %v resolves to %v past its range of %d B", e.h, sh, size)
				}
				if err := fs.backed(sh); err != nil {
					fail("live %v at %v: %v", e.h, sh, err)
				}
			} else if size, ok := fs.live[sh.ID]; !ok || sh.End() > size {
				fail("live %v resolves to %v, not in a live device allocation (%d B, %v)", e.h, sh, size, ok)
			}
			spans[sh.ID] = append(spans[sh.ID], span{sh.Offset, sh.End(), e.h})
		}
		u := m.Usage()
		if u.NumberAllocs != n || u.BytesInUse != inUse {
			fail("usage %+v, the model has %d live of %d B", u, n, inUse)
		}
		if ru := rep.Usage(); ru != u {
			fail("usage %+v, the report sums to %+v", u, ru)
		}
		reserved = saturate.Add(reserved, u.BytesReserved) // each manager may hold 2^63 B lazily
	}
	for id, s := range spans {
		slices.SortFunc(s, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
		for i := 1; i < len(s); i++ {
			if s[i-1].hi > s[i].lo {
				fail("%v [%d, %d) and %v [%d, %d) overlap in storage %d", s[i-1].h, s[i-1].lo, s[i-1].hi, s[i].h, s[i].lo, s[i].hi, id)
			}
		}
	}
	// Every range of address space is a live virtual pool's (or the other
	// streams' stand-in): a pool rebuilt or cleaned up gave its back.
	owned := map[vkruntime.StorageID]bool{1 << 30: true}
	for _, st := range streams {
		for _, p := range st.m.pools {
			if vp, ok := p.(*virtualPool); ok && vp.ranged {
				owned[vp.vrange.ID] = true
				for _, sg := range vp.segs {
					owned[sg.h.ID] = true
				}
			}
		}
	}
	for id, size := range fs.ranges {
		if !owned[id] {
			fail("range %d of %d B belongs to no pool", id, size)
		}
	}
	var deviceBytes uint64
	for _, size := range fs.live {
		deviceBytes = saturate.Add(deviceBytes, size)
	}
	if deviceBytes > reserved {
		fail("the device holds %d B, the pools report %d B reserved", deviceBytes, reserved)
	}
}

// modelSeeds is how many random streams a model test runs, fallback
// unless VKRT_MODEL_SEEDS says (and VKRT_MODEL_SEED the first): a few
// by default, to keep the suite fast, thousands when hunting.
func modelSeeds(t *testing.T, fallback uint64) (first, count uint64) {
	count = fallback
	if v := os.Getenv("VKRT_MODEL_SEEDS"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("VKRT_MODEL_SEEDS=%q: %v", v, err)
		}
		count = n
	}
	if v := os.Getenv("VKRT_MODEL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("VKRT_MODEL_SEED=%q: %v", v, err)
		}
		first = n
	}
	return first, count
}

// Random streams of reservations, frees, resolves, cleanups, installs and
// persistent windows over every layout, on a device that refuses chosen
// allocations, address space and binds: the manager agrees with the model
// after every call, and the same seed gives the same transcript.
func TestManagerAgainstModel(t *testing.T) {
	first, count := modelSeeds(t, 40)
	steps := 150
	if v := os.Getenv("VKRT_MODEL_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("VKRT_MODEL_STEPS=%q: %v", v, err)
		}
		steps = n
	}
	for seed := first; seed < first+count; seed++ {
		sparse := seed%4 != 3
		large := seed%3 == 1
		a := modelRun(t, seed, steps, sparse, large)
		if seed%8 == 0 {
			b := modelRun(t, seed, steps, sparse, large)
			if i := diffAt(a, b); i >= 0 {
				t.Fatalf("seed %d: the same stream ran differently at step %d:\n%s\n%s", seed, i, a[i], b[i])
			}
		}
	}
}

func diffAt(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// modelErr is an error as a transcript keeps it: its class.
func modelErr(err error) string {
	for _, e := range []error{vkruntime.ErrNotFound, vkruntime.ErrBufferTooBig, vkruntime.ErrPoolCapacityExceeded,
		vkruntime.ErrOutOfDeviceMemory, vkruntime.ErrDeviceLost} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return errKind(err)
}

func reportLine(r Report) string {
	var b []byte
	for _, p := range append(slices.Clone(r.Dynamic), r.Persistent) {
		b = fmt.Appendf(b, "[%T %+v pages %d peak %d unmapped %d largest %d] ", p.Kind, p.Usage, p.Pages, p.PagesPeak, p.PagesUnmapped, p.LargestAlloc)
	}
	return string(b)
}

// marksOf is every pool's pages_peak and largest_alloc, the persistent
// pool last.
func marksOf(r Report) (peaks, largest []uint64) {
	for _, p := range append(slices.Clone(r.Dynamic), r.Persistent) {
		peaks = append(peaks, p.PagesPeak)
		largest = append(largest, p.LargestAlloc)
	}
	return peaks, largest
}

// modelEvent is one call of a stream replayed against several managers.
type modelEvent struct {
	op   byte // 'a' reserve, 'f' free (of the k-th reservation), 'c' cleanup, 'C' explicit cleanup, 'p'/'e' window
	size uint64
	k    int
	lazy bool
}

// modelStreamEvents is a random stream of reservations, frees, cleanups
// and persistent windows, every free of a live reservation.
func modelStreamEvents(rng *rand.Rand, n int, scale uint64) []modelEvent {
	var (
		evs  []modelEvent
		live []int
		made int
	)
	for range n {
		switch op := rng.IntN(100); {
		case op < 50:
			var size uint64
			switch rng.IntN(4) {
			case 0:
				size = fuzzSizes[rng.IntN(len(fuzzSizes))] * scale
			case 1, 2:
				size = uint64(rng.IntN(2048)) * scale
			default:
				size = uint64(rng.IntN(1<<17)) * scale
			}
			evs = append(evs, modelEvent{op: 'a', size: size, k: made, lazy: rng.IntN(2) == 0})
			live = append(live, made)
			made++
		case op < 90:
			if len(live) == 0 {
				continue
			}
			i := rng.IntN(len(live))
			evs = append(evs, modelEvent{op: 'f', k: live[i]})
			live = slices.Delete(live, i, i+1)
		case op < 94:
			evs = append(evs, modelEvent{op: 'c'})
		case op < 96:
			evs = append(evs, modelEvent{op: 'C'})
		case op < 98:
			evs = append(evs, modelEvent{op: 'p'})
		default:
			evs = append(evs, modelEvent{op: 'e'})
		}
	}
	return evs
}

// replayModelEvents runs a stream against a fresh manager of layout l,
// every reservation mapped by mapping (nil: as the stream says), and
// returns after every call where each live reservation lies and the
// report, pages_unmapped left out; a refused reservation is noted.
func replayModelEvents(t *testing.T, evs []modelEvent, props vkruntime.DeviceProperties, granule uint64, l Layout, mapping func(modelEvent) Mapping) (steps []string, m *Manager) {
	t.Helper()
	fs := newFaultStorage(granule)
	m, err := NewManager(fs, props, l)
	if err != nil {
		t.Fatalf("NewManager(%s): %v", l, err)
	}
	m.SetLogger(slog.New(slog.DiscardHandler))
	handles := map[int]Handle{}
	for i, ev := range evs {
		switch ev.op {
		case 'a':
			mp := Eager
			if mapping != nil {
				mp = mapping(ev)
			} else if ev.lazy {
				mp = Lazy
			}
			h, err := m.Reserve(ev.size, mp)
			if err != nil {
				steps = append(steps, fmt.Sprintf("reserve %d: %v", ev.size, modelErr(err)))
				continue
			}
			handles[ev.k] = h
		case 'f':
			h, ok := handles[ev.k]
			if !ok {
				break // refused
			}
			if err := m.Free(h); err != nil {
				t.Fatalf("event %d: free: %v", i, err)
			}
			delete(handles, ev.k)
		case 'c', 'C':
			m.Cleanup(ev.op == 'C')
		case 'p':
			m.BeginPersistent()
		case 'e':
			m.EndPersistent()
		}
		var b []byte
		for _, k := range slices.Sorted(maps.Keys(handles)) {
			b = fmt.Appendf(b, "%d@%+v ", k, locate(t, m, handles[k]))
		}
		rep := m.Report()
		for i := range rep.Dynamic {
			rep.Dynamic[i].PagesUnmapped = 0
		}
		rep.Persistent.PagesUnmapped = 0
		steps = append(steps, string(b)+reportLine(rep))
	}
	return steps, m
}

// A lazy reservation carves, coalesces and counts exactly like an eager
// one: the same stream mapped eagerly and lazily (a dry run) lands in the
// same places with the same report but for pages_unmapped, in every
// layout. (A stream that mixes the two may bind a virtual pool's granules
// to other chunks, preferring those with memory.)
func TestLazyAndEagerStreamsLandAlike(t *testing.T) {
	first, count := modelSeeds(t, 12)
	for seed := first; seed < first+count; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1a2e))
		props, granule, scale := fuzzProps, uint64(256), uint64(1)
		switch seed % 3 {
		case 1:
			props = vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 64 << 20, MemorySize: 1 << 30}
			granule, scale = 64<<10, 1<<10
		case 2:
			props = vkruntime.DeviceProperties{Alignment: 4, MaxPageSize: 12 << 10}
		}
		layouts := modelLayouts(scale)
		l := layouts[rng.IntN(len(layouts))]
		evs := modelStreamEvents(rng, 200, scale)
		eager, _ := replayModelEvents(t, evs, props, granule, l, func(modelEvent) Mapping { return Eager })
		for _, run := range []struct {
			name    string
			mapping func(modelEvent) Mapping
		}{{"lazy", func(modelEvent) Mapping { return Lazy }}} {
			name, mapping := run.name, run.mapping
			other, _ := replayModelEvents(t, evs, props, granule, l, mapping)
			if i := diffAt(eager, other); i >= 0 {
				t.Fatalf("seed %d, %s: %s ran differently eager and %s at event %d (%c):\neager %s\n%s %s",
					seed, l, name, name, i, evs[i].op, eager[i], name, other[i])
			}
		}
	}
}

// Placement is deterministic, so a stream replayed against its sliced
// layout capped at the pages_peak it measured lands in the same places
// with no spill and no refusal, whatever cleanups it makes.
func TestAStreamFitsItsMeasuredPeak(t *testing.T) {
	first, count := modelSeeds(t, 12)
	for seed := first; seed < first+count; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0xca9))
		var sliced [][]SlicedPool
		for _, l := range modelLayouts(1) {
			if pools, ok := l.Sliced(); ok {
				sliced = append(sliced, pools)
			}
		}
		pools := slices.Clone(sliced[rng.IntN(len(sliced))])
		for i := range pools {
			// Capped routing (an uncapped pool also takes sizes near its
			// page), with room for any stream.
			pools[i].Pages, pools[i].Grow = u64(65535), false
		}
		evs := modelStreamEvents(rng, 200, 1)
		measured, m := replayModelEvents(t, evs, fuzzProps, 256, SlicedLayout(pools...), nil)
		rep := m.Report()
		for i := range pools {
			pools[i].Pages = u64(max(rep.Dynamic[i].PagesPeak, 1))
		}
		capped, m := replayModelEvents(t, evs, fuzzProps, 256, SlicedLayout(pools...), nil)
		strip := func(steps []string) []string {
			out := make([]string, len(steps))
			for i, s := range steps {
				out[i], _, _ = strings.Cut(s, "[")
			}
			return out
		}
		if i := diffAt(strip(measured), strip(capped)); i >= 0 {
			t.Fatalf("seed %d, %s: capped at its peak the stream ran differently at event %d (%c):\nmeasured %s\ncapped   %s",
				seed, SlicedLayout(pools...), i, evs[i].op, measured[i], capped[i])
		}
		if m.Spills() != 0 {
			t.Fatalf("seed %d: %d spills capped at the measured peak", seed, m.Spills())
		}
	}
}
