package memory

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// fuzzProps keep pages small so short streams exercise many pages.
var fuzzProps = vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 4096, MemorySize: 1 << 20}

// fuzzLayouts are the layouts a stream picks from; the last is invalid.
func fuzzLayouts() []Layout {
	return []Layout{
		SlicedLayout(SlicedPool{PageSize: 512, Pages: u64(2), MaxSlice: u64(128)},
			SlicedPool{PageSize: 1024, Pages: u64(3)}, SlicedPool{PageSize: 4096}),
		SlicedLayout(SlicedPool{PageSize: 1000}),
		SubSlicesLayout(),
		ExclusivePagesLayout(),
		DirectLayout(),
		ArenaLayout(ArenaPlan{
			Pages:    []uint64{2048, 1024},
			Slots:    []ArenaSlot{{64, 0, 0}, {128, 0, 64}, {64, 0, 0}, {256, 1, 256}, {64, 0, 1024}, {1024, 1, 0}, {64, 0, 64}},
			Fallback: []SlicedPool{{PageSize: 256, Pages: u64(1)}, {PageSize: 2048}},
		}),
		VirtualLayout(VirtualPlan{}),
		VirtualLayout(VirtualPlan{PlannedBytes: 4096, Slots: []VirtualSlot{{64, 0}, {128, 64}, {64, 0}, {256, 512}, {1024, 1024}}}),
		VirtualLayout(VirtualPlan{PlannedBytes: 4096, Slots: []VirtualSlot{{64, 0}, {128, 64}, {64, 0}},
			Profile: []VirtualMark{{0, 64}, {1, 192}, {4, 1024}, {9, 4096}}}),
		VirtualLayout(VirtualPlan{PlannedBytes: 4096, Slots: []VirtualSlot{{64, 0}, {128, 64}, {64, 0}},
			Profile: []VirtualMark{{0, 64}, {1, 192}, {4, 1024}, {9, 4096}}, Settled: VirtualMark{1, 192}}),
		// A plan: it ends in an exclusive pool, which tight reservations
		// also reach when the device refuses a page.
		SlicedLayout(SlicedPool{PageSize: 512, Pages: u64(2), MaxSlice: u64(128), Grow: true}, SlicedPool{PageSize: 2048, Grow: true}),
		SlicedLayout(SlicedPool{PageSize: 512, Pages: u64(2), MaxSlice: u64(128), Grow: true},
			SlicedPool{PageSize: 4096, Pages: u64(2), Grow: true, Exclusive: true}),
		// A page past the device memory: its slots go to the fallback.
		ArenaLayout(ArenaPlan{
			Pages: []uint64{1024, fuzzProps.MemorySize + 16},
			Slots: []ArenaSlot{{64, 1, 0}, {64, 0, 0}, {128, 1, 64}, {64, 0, 64}, {1024, 0, 0}},
		}),
		SlicedLayout(SlicedPool{PageSize: 512, MaxSlice: u64(1024)}),
	}
}

// fuzzSizes are common sizes, so that arena slots and exact-size reuse hit.
var fuzzSizes = []uint64{0, 1, 16, 64, 100, 128, 256, 1000, 1024, 4096}

// fuzzHugeSizes reach the top of uint64, where rounding up to the
// alignment or adding a padding overflows.
var fuzzHugeSizes = []uint64{1 << 63, 1<<64 - 1, 1<<64 - 15, 1<<64 - 16, 1<<64 - 17, 1<<64 - 4096, 1 << 32, fuzzProps.MemorySize + 1}

// modelEntry is what the reference model knows of one handle.
type modelEntry struct {
	handle     Handle
	requested  uint64
	live       bool
	persistent bool
	at         where
}

// fuzzRun drives one stream decoded from data through a fresh manager,
// checking it against the reference model after every step, and returns a
// transcript of what happened so two runs can be compared.
func fuzzRun(t *testing.T, data []byte) []string {
	// Sparse residency at granules of 256 B, so the virtual layouts bind
	// many granules; the storage refuses a bind that would alias memory.
	storage := newSparseStorage(256)
	layouts := fuzzLayouts()
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	m, err := NewManager(storage, fuzzProps, layouts[int(next())%(len(layouts)-1)])
	require.NoError(t, err)
	m.SetLogger(slog.New(slog.DiscardHandler))
	var (
		entries    []modelEntry
		window     int
		transcript []string
	)
	note := func(format string, args ...any) { transcript = append(transcript, fmt.Sprintf(format, args...)) }
	for step := 0; len(data) > 0 && step < 400; step++ {
		op := next()
		before := m.Report()
		switch op % 8 {
		case 0, 1, 2:
			var size uint64
			switch sel := next(); sel % 8 {
			case 0, 1, 4, 5:
				size = fuzzSizes[int(next())%len(fuzzSizes)]
			case 2, 6:
				size = uint64(next()) * 8
			case 3:
				size = uint64(next())<<8 | uint64(next())
			default:
				size = fuzzHugeSizes[int(next())%len(fuzzHugeSizes)]
			}
			mapping := Mapping(op / 8 % 2)
			expect := expectedSlicedPlacement(m, size, window > 0)
			refusedBefore := storage.refused
			reserve, tight := m.Reserve, op/16%2 == 1
			if tight {
				reserve = m.ReserveTight
			}
			h, err := reserve(size, mapping)
			if err != nil {
				note("reserve %d (tight %v): %v", size, tight, errKind(err))
				if errors.Is(err, vkruntime.ErrDeviceLost) {
					// The device refused the bind armed below: no reservation
					// is made, though the memory taken for it may be kept.
					require.Equal(t, storage.refuseCall, storage.refused, "reserve %d: device lost with no refusal armed", size)
					require.Greater(t, storage.refused, refusedBefore)
					require.Equal(t, before.Usage().NumberAllocs, m.Usage().NumberAllocs)
					break
				}
				require.Equal(t, before, m.Report(), "a failed reserve changed the pools")
				_, spaceTaken := storage.ranges[1<<30]
				isKnown := errors.Is(err, vkruntime.ErrBufferTooBig) || errors.Is(err, vkruntime.ErrPoolCapacityExceeded) ||
					(spaceTaken && errors.Is(err, vkruntime.ErrOutOfDeviceMemory))
				require.True(t, isKnown, "reserve %d: %v", size, err)
				require.Nil(t, expect, "reserve %d failed (%v) where first fit had room", size, err)
				break
			}
			at := locate(t, m, h)
			if expect != nil {
				require.Equal(t, *expect, at, "reserve %d B: not the first fit", size)
			}
			entries = append(entries, modelEntry{handle: h, requested: size, live: true, persistent: window > 0, at: at})
			note("reserve %d %v -> %+v", size, mapping, at)
		case 3, 4:
			if len(entries) == 0 {
				break
			}
			e := &entries[int(next())%len(entries)]
			err := m.Free(e.handle)
			if e.live {
				require.NoError(t, err)
				e.live = false
			} else {
				require.ErrorIs(t, err, vkruntime.ErrNotFound)
				require.Equal(t, before, m.Report(), "a stale free changed the pools")
			}
			note("free %d.%d: %v", e.handle.slot, e.handle.gen, errKind(err))
		case 5:
			if len(entries) == 0 {
				break
			}
			e := &entries[int(next())%len(entries)]
			sh, err := m.Resolve(e.handle)
			if e.live && errors.Is(err, vkruntime.ErrDeviceLost) {
				// A lazily mapped reservation binds when resolved, and the
				// device refused that bind; resolving again binds it.
				require.Equal(t, storage.refuseCall, storage.refused)
				sh, err = m.Resolve(e.handle)
			}
			if _, spaceTaken := storage.ranges[1<<30]; e.live && spaceTaken && errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
				// A dry run's ranges are reserved when it is first resolved,
				// and other streams left no room for them.
				note("resolve %d.%d: out of device memory", e.handle.slot, e.handle.gen)
				break
			}
			if e.live {
				require.NoError(t, err)
				require.Equal(t, e.at.offset, sh.Offset)
				if size, virtual := storage.ranges[sh.ID]; virtual {
					require.LessOrEqual(t, sh.End(), size)
					require.NoError(t, storage.backed(sh), "every granule under a resolved reservation is bound")
				} else {
					require.Contains(t, storage.live, sh.ID)
					require.LessOrEqual(t, sh.End(), storage.live[sh.ID])
				}
			} else {
				require.ErrorIs(t, err, vkruntime.ErrNotFound)
			}
			note("resolve %d.%d: [%d, %d) %v", e.handle.slot, e.handle.gen, sh.Offset, sh.End(), errKind(err))
		case 6:
			l := layouts[int(next())%len(layouts)]
			var liveDynamic, liveBytes uint64
			for _, e := range entries {
				if e.live && !e.persistent {
					liveDynamic++
					liveBytes += e.requested
				}
			}
			err := m.Install(l)
			switch {
			case l.Validate(fuzzProps) != nil:
				require.ErrorIs(t, err, &InstallError{Kind: InvalidLayout})
				require.Equal(t, before, m.Report(), "an invalid layout changed the pools")
			case liveDynamic > 0:
				require.Equal(t, &InstallError{Kind: PoolsInUse, BytesInUse: liveBytes, AllocsInUse: liveDynamic}, err)
				require.Equal(t, before, m.Report(), "a refused install changed the pools")
			default:
				require.NoError(t, err)
				require.True(t, l.Equal(m.Layout()))
				require.Equal(t, uint64(0), m.Spills())
			}
			note("install %s: %v", l, err)
		default:
			switch sub := next() % 6; sub {
			case 0:
				m.BeginPersistent()
				window++
			case 1:
				m.EndPersistent()
				window = max(window-1, 0)
			case 4:
				// The device refuses the next sparse submission whole.
				storage.refuseCall = storage.refused + 1
				note("refuse bind %d", storage.refuseCall)
			case 5:
				// Other streams take the sparse address space but what is
				// left, or give theirs back.
				if _, taken := storage.ranges[1<<30]; taken {
					delete(storage.ranges, 1<<30)
				} else {
					takeAddressSpace(storage, uint64(next())<<12)
				}
				note("address space %d", storage.ranges[1<<30])
			default:
				m.Cleanup(sub == 3)
			}
			note("window %d", window)
		}
		checkAgainstModel(t, m, entries)
	}
	note("final %+v spills %d", m.Usage(), m.Spills())
	return transcript
}

// errKind is an error as the transcript keeps it: its class, not its text,
// which names the manager.
func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, vkruntime.ErrNotFound):
		return "not found"
	}
	return err.Error()
}

// expectedSlicedPlacement is where a naive first fit over the sliced pools
// puts a reservation: the first accepting pool with room (lowest page,
// lowest offset), spilling past full capped pools. It answers nil for
// anything but a dynamic reservation in a Sliced layout.
func expectedSlicedPlacement(m *Manager, size uint64, persistent bool) *where {
	if persistent || m.layout.Kind() != LayoutSliced {
		return nil
	}
	aligned, ok := alignUp(max(size, 1), m.props.Alignment)
	if !ok {
		return nil
	}
	for i, pl := range m.pools {
		p, sliced := pl.(*slicedPool)
		if !sliced || !p.accepts(aligned) {
			continue
		}
		// The live slices of each held page, from the pool's slab.
		spans := map[int][][2]uint64{}
		for b := range p.blocks {
			blk := &p.blocks[b]
			if blk.size != 0 && !blk.isFree() && p.pages[blk.page].held {
				spans[int(blk.page)] = append(spans[int(blk.page)], [2]uint64{blk.offset, blk.offset + blk.size})
			}
		}
		for pi := range p.pages {
			if !p.pages[pi].held {
				continue
			}
			s := spans[pi]
			slices.SortFunc(s, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
			var at uint64
			for _, sp := range append(s, [2]uint64{p.pageSize, p.pageSize}) {
				if sp[0]-at >= aligned {
					return &where{pool: i, page: pi, offset: at, size: aligned}
				}
				at = sp[1]
			}
		}
		if p.capPages == 0 || p.held < p.capPages || p.grow {
			pi := len(p.pages)
			for j := range p.pages {
				if !p.pages[j].held {
					pi = j
					break
				}
			}
			return &where{pool: i, page: pi, offset: 0, size: aligned}
		}
	}
	return nil
}

// checkAgainstModel checks the manager's invariants and its agreement with
// the model: live slices of one page never overlap, offsets and sizes are
// aligned, and Usage equals both the model's sums and the report's.
func checkAgainstModel(t *testing.T, m *Manager, entries []modelEntry) {
	t.Helper()
	// Plain comparisons: this runs after every step of every fuzz input.
	if err := m.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if s, ok := m.storage.(*sparseStorage); ok {
		for _, p := range m.pools {
			if vp, ok := p.(*virtualPool); ok {
				if err := deviceAgrees(vp, s); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	type pageKey struct{ pool, page int }
	spans := map[pageKey][][2]uint64{}
	var want Usage
	align := m.props.Alignment
	for _, e := range entries {
		if !e.live {
			continue
		}
		r, err := m.lookup(e.handle, "check")
		if err != nil {
			t.Fatalf("live %v: %v", e.handle, err)
		}
		page, off, size := m.poolOf(r).locate(r.ref)
		at := where{pool: reportIndex(m, int(r.pool)), page: page, offset: off, size: size}
		switch {
		case at != e.at:
			t.Fatalf("live %v moved from %+v to %+v", e.handle, e.at, at)
		case off%align != 0 || size%align != 0:
			t.Fatalf("live %v at %+v is not aligned to %d", e.handle, at, align)
		case size < max(e.requested, 1):
			t.Fatalf("live %v of %d B got %d B", e.handle, e.requested, size)
		}
		k := pageKey{at.pool, at.page}
		spans[k] = append(spans[k], [2]uint64{off, off + size})
		want.NumberAllocs++
		want.BytesInUse += e.requested
		want.BytesPadding += size - e.requested
	}
	for k, s := range spans {
		slices.SortFunc(s, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
		for i := 1; i < len(s); i++ {
			if s[i-1][1] > s[i][0] {
				t.Fatalf("live slices overlap in pool %d page %d: %v and %v", k.pool, k.page, s[i-1], s[i])
			}
		}
	}
	got := m.Usage()
	want.BytesReserved = got.BytesReserved
	if got != want {
		t.Fatalf("usage %+v, the model says %+v", got, want)
	}
	rep := m.Report()
	if r := rep.Usage(); r != got {
		t.Fatalf("usage %+v, the report sums to %+v", got, r)
	}
	pools := append(slices.Clone(rep.Dynamic), rep.Persistent)
	usages := m.PoolUsages(nil)
	if len(usages) != len(pools) {
		t.Fatalf("PoolUsages has %d pools, the report %d", len(usages), len(pools))
	}
	for i, u := range usages {
		if u != pools[i].Usage {
			t.Fatalf("PoolUsages[%d] is %+v, the report's pool %+v", i, u, pools[i].Usage)
		}
	}
}

func FuzzManager(f *testing.F) {
	f.Add([]byte{0, 0, 0, 5, 1, 0, 2, 3, 3, 0, 0, 1, 7, 7, 3, 6, 4})
	f.Add([]byte{5, 0, 0, 3, 0, 1, 6, 0, 0, 1, 4, 0, 0, 0, 3, 1, 0, 0, 9, 2, 7, 3, 6, 5})
	// Reservations at the top of uint64, between ordinary ones.
	f.Add([]byte{0, 0, 7, 1, 0, 7, 2, 0, 0, 3, 0, 7, 3, 1, 7, 0, 0, 7, 4, 3, 0})
	f.Add([]byte{5, 0, 7, 5, 0, 0, 4, 0, 7, 6, 6, 2, 0, 7, 7, 0, 0, 1})
	// A virtual pool past its first range (a fourth of the heap), resolved
	// there, then with the address space taken.
	f.Add([]byte{6, 0, 3, 0xF0, 0, 0, 3, 0xF0, 0, 0, 3, 0xF0, 0, 0, 3, 0xF0, 0, 0, 3, 0xF0, 0, 0, 3, 0xF0, 0,
		5, 5, 7, 5, 2, 0, 3, 0xF0, 0, 3, 5, 0, 3, 0xF0, 0, 7, 3, 5, 4})
	// A dry run resolved with no address space left: out of device memory.
	f.Add([]byte{6, 8, 0, 9, 7, 5, 0, 5, 0})
	// A dry run placed in three ranges, resolved where the address space
	// holds the first two only, then again once it is back.
	f.Add([]byte{6, 8, 3, 0xF0, 0, 8, 3, 0xF0, 0, 8, 3, 0xF0, 0, 8, 3, 0xF0, 0, 8, 3, 0xF0, 0, 8, 3, 0xF0, 0,
		8, 3, 0xF0, 0, 8, 3, 0xF0, 0, 8, 3, 0xF0, 0, 7, 5, 192, 5, 0, 7, 5, 5, 0, 5, 8})
	// A dry run bound ahead in its first range, resolved where the address
	// space holds a smaller one, then a reservation in a range of its own.
	f.Add([]byte{6, 8, 0, 9, 7, 5, 2, 5, 0, 7, 5, 0, 3, 0x40, 0, 5, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		first := fuzzRun(t, data)
		second := fuzzRun(t, data)
		require.Equal(t, first, second, "the same stream landed differently")
	})
}
