package memory

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// refusingStorage is a fakeStorage that refuses the next refuse Allocs.
type refusingStorage struct {
	*fakeStorage
	refuse int
}

func newRefusingStorage() *refusingStorage { return &refusingStorage{fakeStorage: newFakeStorage()} }

func (s *refusingStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	if s.refuse > 0 {
		s.refuse--
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Detail: "test storage refuses"}
	}
	return s.fakeStorage.Alloc(size)
}

// liveSizes is what the device holds, as a sorted list of sizes: a page
// given its memory again has a new id.
func (s *refusingStorage) liveSizes() []uint64 {
	return slices.Sorted(maps.Values(s.live))
}

func newRefusingManager(t *testing.T, l Layout) (*Manager, *refusingStorage) {
	t.Helper()
	s := newRefusingStorage()
	m, err := NewManager(s, testProps, l)
	require.NoError(t, err)
	return m, s
}

// refusedChangesNothing reserves size bytes eagerly on a storage that
// refuses that one Alloc and checks that the reservation fails as out of
// device memory with the report, the spills and what the device holds as
// they were.
func refusedChangesNothing(t *testing.T, m *Manager, s *refusingStorage, size uint64) {
	t.Helper()
	before, spills, held := m.Report(), m.Spills(), s.liveSizes()
	s.refuse = 1
	_, err := m.Reserve(size, Eager)
	require.Zero(t, s.refuse, "the device was asked")
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, before, m.Report(), "a refused reservation changed the report")
	require.Equal(t, spills, m.Spills(), "a refused reservation counted a spill")
	require.Equal(t, held, s.liveSizes(), "a refused reservation changed what the device holds")
	require.NoError(t, m.checkInvariants())
}

// The direct pool trimmed its cache to the watermark before asking the
// device for the new allocation, so a refused reservation had already
// handed cached allocations back. The cache still gives its memory back
// before the device is asked (what it holds at once is unchanged), and
// takes it again when the device refuses.
func TestRefusedDirectReserveKeepsItsCache(t *testing.T) {
	m, s := newRefusingManager(t, DirectLayout())
	var hs []Handle
	for range 3 {
		hs = append(hs, mustReserve(t, m, 1024, Eager))
	}
	for _, h := range hs {
		require.NoError(t, m.Free(h))
	}
	// 3 KiB cached, nothing live: a 2 KiB allocation would take the
	// pool past its watermark of 4 KiB, so the oldest 1 KiB makes room.
	deallocs := s.deallocs
	refusedChangesNothing(t, m, s, 2048)
	require.Equal(t, deallocs+1, s.deallocs, "room was made before the device was asked")

	// Granted, it trims the cache as it always did.
	deallocs = s.deallocs
	mustReserve(t, m, 2048, Eager)
	require.Equal(t, deallocs+1, s.deallocs)
	require.Equal(t, 0, s.pending)
	require.Equal(t, []uint64{1024, 1024, 2048}, s.liveSizes())
	r := m.Report().Dynamic[0]
	require.Equal(t, uint64(4096), r.Usage.BytesReserved)
	require.Equal(t, uint64(3), r.PagesPeak, "the peak counts the cache after its trim")
}

// An exclusive pool handed back its free pages too small for a request
// before asking the device for the page that request needs.
func TestRefusedExclusiveReserveKeepsItsFreePages(t *testing.T) {
	m, s := newRefusingManager(t, ExclusivePagesLayout())
	require.NoError(t, m.Free(mustReserve(t, m, 20000, Eager))) // the 64 KiB bucket
	refusedChangesNothing(t, m, s, 40000)

	deallocs := s.deallocs
	mustReserve(t, m, 40000, Eager)
	require.Equal(t, deallocs+1, s.deallocs, "the page too small goes")
	require.Equal(t, 0, s.pending)
	require.Equal(t, []uint64{40000}, s.liveSizes())
	require.Equal(t, uint64(40000), m.Usage().BytesReserved)
}

// When the device refuses the memory back as well, the pages that made
// room stay in the pool unmapped, like lazy ones: the same places and
// figures, no memory held for them, and memory again when reused.
func TestRefusedReserveOnAFullDeviceLeavesThePagesUnmapped(t *testing.T) {
	for _, c := range []struct {
		name        string
		layout      Layout
		cached, big uint64
	}{
		{"direct", DirectLayout(), 4096, 1024},
		{"exclusive", ExclusivePagesLayout(), 20000, 40000},
	} {
		m, s := newRefusingManager(t, c.layout)
		require.NoError(t, m.Free(mustReserve(t, m, c.cached, Eager)))
		before := m.Report()
		s.refuse = 2
		_, err := m.Reserve(c.big, Eager)
		require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, c.name)
		require.Empty(t, s.live, c.name)
		after := m.Report()
		for i := range after.Dynamic {
			before.Dynamic[i].PagesUnmapped = after.Dynamic[i].PagesUnmapped
		}
		require.Equal(t, before, after, c.name)
		require.NoError(t, m.checkInvariants(), c.name)
		h := mustReserve(t, m, c.cached, Eager)
		sh, err := m.Resolve(h)
		require.NoError(t, err, c.name)
		require.Contains(t, s.live, sh.ID, c.name)
		require.Zero(t, m.Report().Usage().BytesReserved-c.cached, c.name)
	}
}

// A forecast pool counted a spill and warned for a page past its plan
// that the device then refused.
func TestRefusedPageOfAForecastPoolIsNoSpill(t *testing.T) {
	m, s := newRefusingManager(t, SlicedLayout(SlicedPool{PageSize: 1024, Pages: u64(1), Grow: true}))
	var log bytes.Buffer
	m.SetLogger(slog.New(slog.NewTextHandler(&log, nil)))
	mustReserve(t, m, 1024, Eager)
	refusedChangesNothing(t, m, s, 1024)
	require.Empty(t, log.String(), "a refused page warned that the plan was short")

	mustReserve(t, m, 1024, Eager)
	require.Equal(t, uint64(1), m.Spills())
	require.Contains(t, log.String(), "needs more pages than its plan expected")
}

// The direct pool's reclaim test added the request to the reserved bytes:
// past 2^64 the sum wrapped under the watermark, the cache was kept and
// the reservation refused for want of room the cache held.
func TestDirectReclaimPast64BitsHandsTheCacheBack(t *testing.T) {
	m, s := newTestManager(t, DirectLayout())
	require.NoError(t, m.Free(mustReserve(t, m, 1<<63, Lazy)))
	h := mustReserve(t, m, 1<<63+16, Lazy)
	r := m.Report().Dynamic[0]
	require.Equal(t, uint64(1), r.Pages, "the cached 2^63 B went back")
	require.Equal(t, uint64(1<<63+16), r.Usage.BytesReserved)
	require.NoError(t, m.Free(h))
	m.Cleanup(true)
	require.Equal(t, Usage{}, m.Usage())
	require.Zero(t, s.allocs)
}

// A reservation off the arena plan warned that the stream left the plan
// before any fallback pool took it: a refused one (too big, or refused by
// the device) spent the layout's one warning on a reservation that never
// happened, and the real miss after it went unsaid.
func TestRefusedArenaMissDoesNotWarn(t *testing.T) {
	m, s := newRefusingManager(t, arenaTestLayout())
	var log bytes.Buffer
	m.SetLogger(slog.New(slog.NewTextHandler(&log, nil)))
	before := m.Report()
	_, err := m.Reserve(1<<20, Eager) // past the fallback's 8 KiB page
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
	refusedChangesNothing(t, m, s, 100) // slot 0 is 1024 B: a miss the device refuses
	require.Equal(t, before, m.Report())
	require.Empty(t, log.String())

	mustReserve(t, m, 100, Eager)
	require.Equal(t, uint64(1), m.Spills())
	require.Contains(t, log.String(), "left the arena plan")
	require.Contains(t, log.String(), "planned_bytes=", "the warning says what was planned")
	require.Contains(t, log.String(), "needed_bytes=100", "and what came")
}

// A slot whose generation would wrap is retired, not reused: a handle freed
// 2^32 reservations of its slot ago never names the slot's next one (here
// the generation is set near the end rather than counted up to it).
func TestAStaleHandleNeverNamesALaterReservation(t *testing.T) {
	m, _ := newTestManager(t, SubSlicesLayout())
	h0 := mustReserve(t, m, 256, Eager)
	require.NoError(t, m.Free(h0))
	m.reservations[h0.slot].gen = math.MaxUint32 // as after 2^32−2 more reuses
	last := mustReserve(t, m, 256, Eager)
	require.Equal(t, h0.slot, last.slot)
	require.NoError(t, m.Free(last))
	next := mustReserve(t, m, 256, Eager)
	require.NotEqual(t, h0.slot, next.slot, "the slot is retired")
	for _, stale := range []Handle{h0, last} {
		_, err := m.Resolve(stale)
		require.ErrorIs(t, err, vkruntime.ErrNotFound)
		require.ErrorIs(t, m.Free(stale), vkruntime.ErrNotFound)
	}
	_, err := m.Resolve(next)
	require.NoError(t, err, "the live reservation is untouched")
	require.NoError(t, m.checkInvariants())
}

// A reservation the device has no memory for is refused with an
// *OutOfMemoryError whose Size is the size asked, whatever device
// allocation the pools asked for it: a request of the whole device memory
// on a virtual pool took chunks until the device refused the last one, and
// errors.As gave that chunk's size, 5033164800 B here. The device's
// figures and its own error stay; the detail names what it refused. A
// lazy reservation's resolve says the same of its page.
func TestARefusalCarriesTheRequestsOwnSize(t *testing.T) {
	props := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 1 << 30, MemorySize: 150 << 30}
	s := newSparseStorage(64 << 10)
	s.heapSize = props.MemorySize - 5<<20
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}), WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	_, err = m.Reserve(props.MemorySize, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, props.MemorySize, oom.Size, "%v", err)
	require.Equal(t, s.heapSize, oom.Limit, "the device's figures")
	require.Regexp(t, `^memory: reserve 161061273600 B: vkrt: out of device memory: asked 161061273600 B, in use \d+ B, limit 161056030720 B: an allocation of \d+ B for it was refused$`, err.Error())
	require.Empty(t, s.live, "the refused request holds nothing")

	sliced, fs := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4096}))
	h := mustReserve(t, sliced, 100, Lazy)
	fs.failAfter = 0
	_, err = sliced.Resolve(h)
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(100), oom.Size)
	require.ErrorContains(t, err, "(100 B): vkrt: out of device memory: asked 100 B: an allocation of 4096 B for it was refused: test storage refuses")
	var device *vkruntime.OutOfMemoryError
	for e := range allErrors(err) {
		if o, ok := e.(*vkruntime.OutOfMemoryError); ok && o.Size == 4096 {
			device = o
		}
	}
	require.NotNil(t, device, "the device's own error stays in the chain")

	// What wraps the device's error in its words stays around it.
	wrapped, err := NewManager(wrappingStorage{newFakeStorage()}, testProps, SlicedLayout(SlicedPool{PageSize: 4096}))
	require.NoError(t, err)
	_, err = wrapped.Reserve(100, Eager)
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(100), oom.Size)
	require.EqualError(t, err, "memory: reserve 100 B: driver: vkrt: out of device memory: asked 100 B, heap 8192 B: an allocation of 4096 B for it was refused (no room)")
}

// wrappingStorage refuses every Alloc with an *OutOfMemoryError wrapped in
// words of its own.
type wrappingStorage struct{ *fakeStorage }

func (wrappingStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	return vkruntime.StorageHandle{}, fmt.Errorf("driver: %w (no room)", &vkruntime.OutOfMemoryError{Size: size, HeapSize: 8192})
}

// allErrors yields err and every error it wraps, depth first.
func allErrors(err error) func(func(error) bool) {
	return func(yield func(error) bool) {
		var walk func(error) bool
		walk = func(e error) bool {
			if e == nil {
				return true
			}
			if !yield(e) {
				return false
			}
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				return walk(u.Unwrap())
			case interface{ Unwrap() []error }:
				for _, w := range u.Unwrap() {
					if !walk(w) {
						return false
					}
				}
			}
			return true
		}
		walk(err)
	}
}

// The zero Manager, which NewManager did not build, has no pools: its
// Report, Install and Cleanup panicked on the missing persistent pool, and
// its Reserve said a byte overflowed when aligned to 0 B. Each now refuses
// with ErrNotBuilt, or reports the nothing it holds.
func TestTheZeroManagerRefusesWithErrNotBuilt(t *testing.T) {
	var m Manager
	for name, reserve := range map[string]func(uint64, Mapping) (Handle, error){"Reserve": m.Reserve, "ReserveTight": m.ReserveTight} {
		for _, persistent := range []bool{false, true} {
			if persistent {
				m.BeginPersistent()
			}
			var h Handle
			var err error
			require.NotPanics(t, func() { h, err = reserve(1, Eager) }, name)
			require.ErrorIs(t, err, ErrNotBuilt, name)
			require.EqualError(t, err, "memory: the manager was not built by NewManager: reserve 1 B", name)
			require.True(t, h.IsZero(), name)
			m.EndPersistent()
		}
	}
	require.NotPanics(t, func() {
		require.Equal(t, Report{}, m.Report())
		require.Empty(t, m.PoolUsages(nil))
		m.Cleanup(true)
		m.Cleanup(false)
	})
	for _, err := range []error{m.Install(DirectLayout()), m.Check(VirtualLayout(VirtualPlan{}))} {
		require.ErrorIs(t, err, ErrNotBuilt)
		require.NotErrorIs(t, err, &InstallError{Kind: InvalidLayout})
	}
	require.EqualError(t, m.Install(DirectLayout()), `memory: the manager was not built by NewManager: install "Direct"`)
	require.ErrorIs(t, m.Free(Handle{}), vkruntime.ErrNotFound)
	require.Equal(t, Usage{}, m.Usage())
}
