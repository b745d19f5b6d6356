package memory

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// sparseStorage is a fakeStorage with sparse residency: it keeps what is
// bound where, and refuses a bind of memory it does not hold or past its
// range, a submission that names a granule twice (Vulkan's rule for a
// batch), or one that leaves memory bound under two granules. Binding a
// bound granule replaces its binding, as on the devices.
type sparseStorage struct {
	*fakeStorage
	granule  uint64
	ranges   map[vkruntime.StorageID]uint64
	bound    map[[2]uint64][2]uint64 // (range, offset) -> (memory, offset)
	used     map[[2]uint64]bool      // (memory, offset) bound somewhere
	calls    int
	binds    int
	heapSize uint64 // when non-zero, Alloc refuses past it
	// refuseCall, when non-zero, is the Bind call (1-based, refused ones
	// counted) refused whole, binding nothing, as a device refuses a
	// submission.
	refuseCall, refused int
}

func newSparseStorage(granule uint64) *sparseStorage {
	return &sparseStorage{fakeStorage: newFakeStorage(), granule: granule, ranges: map[vkruntime.StorageID]uint64{},
		bound: map[[2]uint64][2]uint64{}, used: map[[2]uint64]bool{}}
}

func (s *sparseStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	if s.heapSize != 0 && s.liveBytes()+size > s.heapSize {
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Limit: s.heapSize, Usage: s.liveBytes()}
	}
	return s.fakeStorage.Alloc(size)
}

func (s *sparseStorage) Dealloc(id vkruntime.StorageID) {
	for k := range s.used {
		if k[0] == uint64(id) {
			panic(fmt.Sprintf("sparse storage: dealloc of %d while offset %d of it is bound", id, k[1]))
		}
	}
	s.fakeStorage.Dealloc(id)
}

func (s *sparseStorage) SparseGranule() uint64  { return s.granule }
func (s *sparseStorage) MaxVirtualSize() uint64 { return 1 << 40 }

// ReserveVirtual refuses past the address space the live ranges leave of
// MaxVirtualSize, as the devices do.
func (s *sparseStorage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	if size == 0 || size%s.granule != 0 {
		// The pools ask whole granules only.
		return vkruntime.StorageHandle{}, misuse("sparse storage: a range of %d B, not a whole number of %d B granules", size, s.granule)
	}
	var taken uint64
	for _, r := range s.ranges {
		taken += r
	}
	if left := s.MaxVirtualSize() - taken; size > left {
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Limit: s.MaxVirtualSize(), Detail: "sparse address space"}
	}
	s.next++
	s.ranges[s.next] = size
	return vkruntime.StorageHandle{ID: s.next, Size: size}, nil
}

func (s *sparseStorage) ReleaseVirtual(id vkruntime.StorageID) {
	// Destroying the range drops its bindings, as the devices do (vk
	// destroys the sparse buffer, cpu forgets the range): the memory is
	// bound to nothing afterwards.
	for k, mem := range s.bound {
		if k[0] == uint64(id) {
			delete(s.used, mem)
			delete(s.bound, k)
		}
	}
	delete(s.ranges, id)
}

func (s *sparseStorage) Bind(id vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	size, ok := s.ranges[id]
	if !ok {
		return fmt.Errorf("bind into unknown range %d", id)
	}
	if s.refused++; s.refused == s.refuseCall {
		return fmt.Errorf("sparse storage refuses submission %d: %w", s.refused, vkruntime.ErrDeviceLost)
	}
	bound := maps.Clone(s.bound)
	named := map[uint64]bool{}
	memBinds := 0
	for _, b := range binds {
		if b.Offset%s.granule != 0 || b.Size%s.granule != 0 || b.MemoryOffset%s.granule != 0 || b.Size == 0 {
			return misuse("bind %+v not of whole granules", b)
		}
		if b.Offset > size || b.Size > size-b.Offset {
			return fmt.Errorf("bind %+v past the range's %d B", b, size)
		}
		for o := uint64(0); o < b.Size; o += s.granule {
			key := [2]uint64{uint64(id), b.Offset + o}
			if named[key[1]] {
				return fmt.Errorf("granule %d named twice in one submission", key[1])
			}
			named[key[1]] = true
			if b.Memory == 0 {
				if _, ok := bound[key]; !ok {
					return fmt.Errorf("unbind of an unbound granule at %d", key[1])
				}
				delete(bound, key)
				continue
			}
			mem := [2]uint64{uint64(b.Memory), b.MemoryOffset + o}
			if size, ok := s.live[b.Memory]; !ok || mem[1] >= size {
				return fmt.Errorf("bind of memory %d at %d, which is not held", b.Memory, mem[1])
			}
			bound[key] = mem
			memBinds++
		}
	}
	used := map[[2]uint64]bool{}
	for key, mem := range bound {
		if used[mem] {
			return fmt.Errorf("memory %v bound under two granules, one at %d", mem, key[1])
		}
		used[mem] = true
	}
	s.calls++
	s.binds += memBinds
	s.bound, s.used = bound, used
	return nil
}

// backed checks that every granule under a device range is bound.
func (s *sparseStorage) backed(h vkruntime.StorageHandle) error {
	for g := h.Offset &^ (s.granule - 1); g < h.Offset+h.Size; g += s.granule {
		if _, ok := s.bound[[2]uint64{uint64(h.ID), g}]; !ok {
			return fmt.Errorf("granule at %d under [%d, %d) is not bound", g, h.Offset, h.Offset+h.Size)
		}
	}
	return nil
}

const testGranule = 64 << 10

func newVirtualManager(t testing.TB, plan VirtualPlan) (*Manager, *sparseStorage) {
	t.Helper()
	s := newSparseStorage(testGranule)
	m, err := NewManager(s, testProps, VirtualLayout(plan))
	require.NoError(t, err)
	return m, s
}

// A random stream: live reservations never overlap, their granules are
// bound, the pool holds the most granules ever needed at once plus its last
// chunk, and a stream the pool has seen needs no new device allocation.
func TestVirtualPoolBacksEveryLiveReservationAndReusesMemory(t *testing.T) {
	m, s := newVirtualManager(t, VirtualPlan{})
	rng := rand.New(rand.NewPCG(7, 8))
	type liveRes struct {
		h    Handle
		size uint64
	}
	run := func(steps int) {
		var live []liveRes
		for range steps {
			if len(live) > 0 && rng.IntN(5) < 2 {
				k := rng.IntN(len(live))
				require.NoError(t, m.Free(live[k].h))
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
				continue
			}
			size := uint64(16 << rng.IntN(17))
			h := mustReserve(t, m, size, Eager)
			sh, err := m.Resolve(h)
			require.NoError(t, err)
			require.NoError(t, s.backed(sh))
			for _, o := range live {
				osh, _ := m.Resolve(o.h)
				require.True(t, sh.Offset+sh.Size <= osh.Offset || osh.Offset+osh.Size <= sh.Offset, "overlap")
			}
			live = append(live, liveRes{h, size})
		}
		for _, l := range live {
			require.NoError(t, m.Free(l.h))
		}
	}
	rng = rand.New(rand.NewPCG(7, 8))
	run(600)
	require.NoError(t, m.checkInvariants())
	allocs := s.allocs
	vp := m.pools[0].(*virtualPool)
	held := m.Usage().BytesReserved
	require.LessOrEqual(t, held, vp.neededPeak*testGranule+max(VirtualChunkUnit, held/virtualGrowthDivisor),
		"the pool holds the granules needed at the peak and at most the rest of its last chunk")
	rng = rand.New(rand.NewPCG(7, 8))
	run(600)
	require.Equal(t, allocs, s.allocs, "the same stream again needs no new device memory")
	m.Cleanup(true)
	require.Empty(t, s.live, "explicit cleanup returns every chunk")
	require.Empty(t, s.bound)
	require.NoError(t, m.checkInvariants())
}

// Sizes that grow with one buffer live at a time (a KV cache reallocated
// larger) hold little more than the largest, whatever the layout: the
// virtual pool rebinds the memory of the freed buffer, an exclusive pool
// returns its free pages too small for the next request. ExclusivePages
// keeps one free page in each size bucket the sizes pass through, until a
// request of that bucket or its dealloc period comes.
func TestGrowingBuffersOneAtATimeHoldLittleMoreThanTheLargest(t *testing.T) {
	for _, c := range []struct {
		l     Layout
		bound float64
	}{{VirtualLayout(VirtualPlan{}), 1.05}, {SubSlicesLayout(), 1.5}, {ExclusivePagesLayout(), 2.5}} {
		l := c.l
		t.Run(l.Kind().String(), func(t *testing.T) {
			s := newSparseStorage(2 << 20)
			props := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 4<<30 - 16, MemorySize: 150_000_000_000}
			m, err := NewManager(s, props, l)
			require.NoError(t, err)
			var peak, largest uint64
			for i := range uint64(40) {
				size := 4_300_000_000 + i*100_000_000
				h, err := m.Reserve(size, Eager)
				require.NoError(t, err, "allocation %d of %d B with %d B reserved", i, size, m.Usage().BytesReserved)
				peak = max(peak, m.Usage().BytesReserved)
				largest = max(largest, size)
				require.NoError(t, m.Free(h))
			}
			require.Less(t, float64(peak), c.bound*float64(largest), "reserved peak %d B for %d B live", peak, largest)

			// 200 buffers from 100 MB to 1.1 GB, one live at a time.
			m.Cleanup(true)
			peak, largest = 0, 0
			for i := range uint64(200) {
				size := 100_000_000 + i*5_000_000
				h, err := m.Reserve(size, Eager)
				require.NoError(t, err)
				peak = max(peak, m.Usage().BytesReserved)
				largest = max(largest, size)
				require.NoError(t, m.Free(h))
			}
			require.Less(t, float64(peak), c.bound*float64(largest), "reserved peak %d B for %d B live", peak, largest)
		})
	}
}

// With no plan, a submission that binds a reservation's fresh granules
// binds the spare memory just above it too, a unit at most: reservations
// placed one above another then find it bound, where each took a
// submission of its own. What is bound ahead is idle, so a later shortage
// takes it back before the pool grows: the same device allocations and
// bytes either way.
func TestWithoutAPlanTheNextPlacesAboveAreBound(t *testing.T) {
	const n, size = 64, 4 * testGranule // 16 MiB in all: one unit of 20 MiB
	m, s := newVirtualManager(t, VirtualPlan{})
	var hs []Handle
	for range n {
		hs = append(hs, mustReserve(t, m, size, Eager))
	}
	require.Equal(t, 1, s.allocs)
	require.Equal(t, 1, s.calls, "one submission binds the first reservation and the spare memory above it")
	for _, h := range hs {
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		require.NoError(t, s.backed(sh))
	}
	// A reservation past the unit: the pool unbinds what is idle before it
	// grows, and a submission that unbinds binds nothing ahead.
	for _, h := range hs[:n/2] {
		require.NoError(t, m.Free(h))
	}
	big := mustReserve(t, m, VirtualChunkUnit/2, Eager) // above the live half: past what is bound
	require.Equal(t, 1, s.allocs, "the idle granules, those bound ahead among them, hold it")
	require.Len(t, s.bound, (n/2)*4+VirtualChunkUnit/2/testGranule,
		"bound: the live reservations' granules and nothing ahead, as that submission unbound the idle ones")
	sh, err := m.Resolve(big)
	require.NoError(t, err)
	require.NoError(t, s.backed(sh))
	require.NoError(t, m.checkInvariants())
}

// Idle memory is unbound where TLSF places last, in its largest free
// blocks: a small hole keeps its memory bound, so the small reservation
// that reuses it needs no submission. The hand alone, sweeping from the
// range's start, unbound the small hole first.
func TestIdleMemoryGoesFromTheLargestFreeBlocksFirst(t *testing.T) {
	const g = testGranule
	m, s := newVirtualManager(t, VirtualPlan{})
	// One chunk of a unit, every granule of it bound by the first
	// submission (the first reservation and the spare memory above it).
	var hs []Handle
	for _, n := range []uint64{1, 1, 1, 32, 1, 264} { // granules 0, 1, 2, 3..34, 35, 36..299
		hs = append(hs, mustReserve(t, m, n*g, Eager))
	}
	require.Equal(t, 1, s.allocs)
	require.Equal(t, 1, s.calls)
	hole, err := m.Resolve(hs[1])
	require.NoError(t, err)
	require.NoError(t, m.Free(hs[1])) // a hole of one granule
	require.NoError(t, m.Free(hs[3])) // a hole of 32
	// Too large for either hole: above the live reservations, over the
	// last 20 granules bound ahead and 20 unbound.
	x := mustReserve(t, m, 40*g, Eager)
	require.Equal(t, 1, s.allocs, "idle memory holds it")
	require.Equal(t, 2, s.calls)
	_, bound := s.bound[[2]uint64{uint64(hole.ID), hole.Offset}]
	require.True(t, bound, "the small hole keeps its memory: the hole of 32 granules gave what was short")
	y := mustReserve(t, m, g, Eager)
	sh, err := m.Resolve(y)
	require.NoError(t, err)
	require.Equal(t, hole.Offset, sh.Offset, "TLSF reuses the small hole")
	require.Equal(t, 2, s.calls, "on memory still bound: no submission")
	for _, h := range []Handle{x, y} {
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		require.NoError(t, s.backed(sh))
	}
	require.NoError(t, m.checkInvariants())
}

// A shortfall of a unit or more, one large reservation's, is rounded up to
// half units, not whole ones: it is still one device allocation, and what
// it leaves spare, often at the run's peak, is at most half a unit. Smaller
// shortfalls take a whole unit once the pool holds two, so small
// reservations do not multiply the allocations.
func TestALargeShortfallTakesHalfUnits(t *testing.T) {
	const unit = VirtualChunkUnit
	m, s := newVirtualManager(t, VirtualPlan{})
	small := mustReserve(t, m, 1<<20, Eager)
	require.Equal(t, uint64(unit), m.Usage().BytesReserved, "a small shortfall takes a unit")
	// Two units and a byte, of which the first unit's spare 19 MiB holds
	// some: the 21 MiB and a granule lacking take a unit and a half, where
	// whole units took two.
	large := mustReserve(t, m, 2*unit+1, Eager)
	require.Equal(t, 2, s.allocs, "one device allocation for the large reservation")
	require.Equal(t, uint64(unit+unit+unit/2), m.Usage().BytesReserved)
	require.NoError(t, m.Free(large))
	require.NoError(t, m.Free(small))
}

// With no plan, a pool of a unit or two short of less than a unit takes
// half of what it holds (or the shortfall), not a whole unit: a workload
// of a unit and a little held two units, nearly twice its peak, where
// PyTorch's small segments take 2 MiB each. From two units on, a small
// shortfall takes a whole unit again.
func TestASmallPoolWithNoPlanGrowsByHalfWhatItHolds(t *testing.T) {
	const unit = VirtualChunkUnit
	m, s := newVirtualManager(t, VirtualPlan{})
	var hs []Handle
	// reserve takes size past what the pool holds free, so the shortfall is
	// what comes past it.
	grow := func(past uint64) uint64 {
		t.Helper()
		before := m.Usage()
		free := before.BytesReserved - before.BytesInUse
		hs = append(hs, mustReserve(t, m, free+past, Eager))
		return m.Usage().BytesReserved - before.BytesReserved
	}
	require.Equal(t, uint64(unit), grow(testGranule), "the first shortfall takes a unit")
	require.Equal(t, uint64(unit/2), grow(testGranule), "a unit held: a small shortfall takes half of it")
	require.Equal(t, uint64(3*unit/4), grow(testGranule), "a unit and a half held: three fourths of a unit")
	require.Equal(t, uint64(unit), grow(testGranule), "two units and a fourth held: a whole unit, as before")
	require.Equal(t, uint64(unit), grow(unit/4), "a whole unit")
	require.Equal(t, 5, s.allocs)
	for _, h := range hs {
		require.NoError(t, m.Free(h))
	}
	require.NoError(t, m.checkInvariants())
}

// With no plan, a pool that would pass PyTorch's pace in device
// allocations, less a tenth of it kept in hand, grows by a twelfth of what
// it holds at least: forty buffers of 30 MiB, each a mapping call of
// PyTorch's expandable segments, took forty allocations, one for each, as
// many as PyTorch; the pace's larger steps keep the pool a tenth under
// that (36; 39 with no margin), for at most a twelfth of the peak spare.
// (With a hundred buffers a fortieth of what is held alone takes the count
// under PyTorch's, so the test keeps to forty, where only the pace does.)
func TestAPoolWithNoPlanKeepsPyTorchsPaceInAllocations(t *testing.T) {
	const n, size = 40, 30 << 20
	m, s := newVirtualManager(t, VirtualPlan{})
	for range n {
		mustReserve(t, m, size, Eager)
	}
	p := m.pools[0].(*virtualPool)
	require.Equal(t, uint64(n), p.pytorchCalls, "PyTorch maps pages for each buffer")
	require.LessOrEqual(t, s.allocs, n-n/virtualPaceMargin, "a tenth fewer device allocations than PyTorch's")
	require.LessOrEqual(t, float64(m.Usage().BytesReserved), (1+1.0/virtualPaceStep)*n*size)
	require.NoError(t, m.checkInvariants())
	t.Logf("%d device allocations, %.4f× the live bytes", s.allocs, float64(m.Usage().BytesReserved)/(n*size))
}

// An explicit cleanup is PyTorch's empty_cache: its segments unmap what
// they hold free, so filling the pool again counts PyTorch's mapping calls
// again. Without that, a pool that once grew large found itself past
// PyTorch's pace when it grew again, and took a twelfth of what it held
// at each step (TestGrowingBuffersOneAtATimeHoldLittleMoreThanTheLargest:
// 1.0764× the largest buffer against 1.05).
func TestAnExplicitCleanupForecastsPyTorchMappingAgain(t *testing.T) {
	const n, size, small = 10, 30 << 20, 1 << 20
	m, _ := newVirtualManager(t, VirtualPlan{})
	p := m.pools[0].(*virtualPool)
	fill := func() []Handle {
		var hs []Handle
		for range n {
			hs = append(hs, mustReserve(t, m, size, Eager), mustReserve(t, m, small, Eager))
		}
		return hs
	}
	freeAll := func(hs []Handle) {
		for _, h := range hs {
			require.NoError(t, m.Free(h))
		}
	}
	freeAll(fill())
	calls := p.pytorchCalls
	require.Equal(t, uint64(n+n/2), calls, "a call for each large buffer, one for each 2 MiB of small ones")
	freeAll(fill())
	require.Equal(t, calls, p.pytorchCalls, "the freed memory is still mapped")
	m.Cleanup(true)
	fill()
	require.Equal(t, 2*calls, p.pytorchCalls, "unmapped at the cleanup, mapped anew")
}

// A plan the run outgrows is a forecast: the pool grows, warns once with
// what was planned and what came, and counts each growth; only the device
// running out of memory fails a reservation.
func TestVirtualPlanOutgrownGrowsWarnsOnceAndFailsOnlyWhenTheDeviceIsFull(t *testing.T) {
	m, s := newVirtualManager(t, VirtualPlan{PlannedBytes: 1 << 20})
	var logged bytes.Buffer
	m.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
	var hs []Handle
	for range 40 {
		hs = append(hs, mustReserve(t, m, 1<<20, Eager))
	}
	require.Equal(t, 1, bytes.Count(logged.Bytes(), []byte("level=WARN")), logged.String())
	require.Contains(t, logged.String(), "planned_bytes=1048576")
	require.Positive(t, m.Spills())
	for _, h := range hs {
		require.NoError(t, m.Free(h))
	}
	s.heapSize = s.liveBytes() + 4<<20
	_, err := m.Reserve(s.liveBytes()+64<<20, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.NoError(t, m.checkInvariants())
	h := mustReserve(t, m, s.liveBytes()+2<<20, Eager) // what is held plus what the device has left
	require.NoError(t, m.Free(h))
}

// Under a plan the pool takes device memory in a few allocations as the run
// needs it, never past what the run needs by more than a unit: the plan
// over virtualPlanUnitDivisor, at most VirtualChunkUnit.
func TestVirtualPlanTakesMemoryInFewAllocationsAsNeeded(t *testing.T) {
	m, s := newVirtualManager(t, VirtualPlan{PlannedBytes: 256 << 20})
	var hs []Handle
	for range 64 {
		hs = append(hs, mustReserve(t, m, 2<<20, Eager))
	}
	const need, planned = 128 << 20, 256 << 20
	require.LessOrEqual(t, s.allocs, 16)
	require.LessOrEqual(t, m.Usage().BytesReserved, uint64(need+min(VirtualChunkUnit, planned/virtualPlanUnitDivisor)),
		"at most a unit past what the run needs, though the plan expects more")
	require.Zero(t, m.Spills())
	for _, h := range hs {
		require.NoError(t, m.Free(h))
	}
}

// A run that follows its plan finds memory bound ahead under the places
// the plan gives it next: binding each place when first touched would be
// a submission per reservation, here 64. The pool binds only what it
// holds, so a plan larger than the run costs no memory.
func TestAPlannedRunFindsItsNextPlacesBound(t *testing.T) {
	const n, size = 64, 3 * testGranule / 2 // places sharing no granule
	var slots []VirtualSlot
	for k := range uint64(n) {
		slots = append(slots, VirtualSlot{Size: size, Offset: k * 2 * testGranule})
	}
	m, s := newVirtualManager(t, VirtualPlan{PlannedBytes: 2 * n * testGranule, Slots: slots})
	var hs []Handle
	for range n {
		hs = append(hs, mustReserve(t, m, size, Eager))
	}
	require.Zero(t, m.Spills())
	require.Equal(t, s.allocs, s.calls, "one submission for each device allocation, none for a reservation between them")
	require.LessOrEqual(t, s.allocs, 16)
	for _, h := range hs {
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		require.NoError(t, s.backed(sh))
		require.NoError(t, m.Free(h))
	}
	require.Equal(t, uint64(2*n*testGranule), m.Usage().BytesReserved, "the plan's bytes, no more")
}

// Binding ahead never names a granule the same submission unbinds: here
// the reservation of b unbinds a's idle granules, among them the one the
// plan gives c next, and Vulkan leaves the order of one submission's
// binds open, so binding it there too could end either way on a GPU.
func TestBindingAheadLeavesWhatTheSubmissionUnbinds(t *testing.T) {
	const g = testGranule
	plan := VirtualPlan{PlannedBytes: 4 * g, Slots: []VirtualSlot{{3 * g, 0}, {g, 3 * g}, {g, 0}}}
	m, s := newVirtualManager(t, plan)
	a := mustReserve(t, m, 3*g, Eager)
	require.NoError(t, m.Free(a))
	b := mustReserve(t, m, g, Eager) // the storage refuses a submission naming a granule twice
	c := mustReserve(t, m, g, Eager)
	require.Zero(t, m.Spills())
	for _, h := range []Handle{b, c} {
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		require.NoError(t, s.backed(sh))
	}
}

// A run that follows its plan keeps following it across an explicit
// cleanup with nothing live, which hands every chunk back and starts the
// granule map anew: binding ahead starts again from where the run is and
// grows the map as it goes, here over places 512 granules apart, past the
// map's first growth.
func TestAPlannedRunFollowsItsPlanAcrossACleanup(t *testing.T) {
	const n, size = 8, testGranule
	var slots []VirtualSlot
	for k := range uint64(n) {
		slots = append(slots, VirtualSlot{Size: size, Offset: k * 512 * testGranule})
	}
	// A plan of more than the places take, so chunks come in several
	// granules and the spare ones are bound ahead.
	m, s := newVirtualManager(t, VirtualPlan{PlannedBytes: 64 * testGranule, Slots: slots})
	h := mustReserve(t, m, size, Eager)
	require.NoError(t, m.Free(h))
	m.Cleanup(true)
	require.Zero(t, m.Usage().BytesReserved, "nothing live: every chunk handed back")
	calls, allocs := s.calls, s.allocs
	for range n - 1 {
		h := mustReserve(t, m, size, Eager)
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		require.NoError(t, s.backed(sh))
	}
	require.Zero(t, m.Spills(), "the run still follows its plan")
	require.Equal(t, s.allocs-allocs, s.calls-calls,
		"one submission for each device allocation: what the cleanup unbound is bound ahead again")
}

// A storage without sparse residency gets the SubSlices pools, and so does
// one whose granule a virtual pool cannot use: none, not a power of two,
// below virtualMinGranule, or past the device's memory, or whose sparse
// address space holds no granule (a virtual pool of 0 B served nothing and
// broke its own structure; a plan's layout was refused as invalid). The
// pools serve a reservation.
func TestVirtualLayoutFallsBackToSubSlicesWithoutSparseResidency(t *testing.T) {
	tiny := vkruntime.DeviceProperties{Alignment: 1, MaxPageSize: 4096, MemorySize: 4096}
	plan := VirtualPlan{PlannedBytes: 4096, Slots: []VirtualSlot{{64, 0}, {128, 64}}}
	for _, tc := range []struct {
		granule uint64
		props   vkruntime.DeviceProperties
		space   uint64 // the storage's sparse address space where not 0
		plan    VirtualPlan
	}{{0, testProps, 0, VirtualPlan{}}, {3 << 20, testProps, 0, VirtualPlan{}}, {1, tiny, 0, VirtualPlan{}},
		{virtualMinGranule / 2, tiny, 0, VirtualPlan{}}, {64 << 10, tiny, 0, VirtualPlan{}},
		{testGranule, testProps, testGranule - 1, VirtualPlan{}}, {testGranule, testProps, 1, plan}} {
		var s vkruntime.SparseStorage = newSparseStorage(tc.granule)
		if tc.space != 0 {
			s = smallSpaceStorage{s.(*sparseStorage), tc.space}
		}
		m, err := NewManager(s, tc.props, VirtualLayout(tc.plan))
		require.NoError(t, err)
		require.NoError(t, m.checkInvariants())
		sub, err := NewManager(newFakeStorage(), tc.props, SubSlicesLayout())
		require.NoError(t, err)
		require.Equal(t, len(sub.Report().Dynamic), len(m.Report().Dynamic))
		_, isSliced := m.Report().Dynamic[0].Kind.(SlicedKind)
		require.True(t, isSliced, "a granule of %d B", tc.granule)
		require.True(t, m.Layout().Equal(VirtualLayout(tc.plan)), "the layout asked for is kept")
		h, err := m.Reserve(100, Eager)
		require.NoError(t, err, "a granule of %d B", tc.granule)
		require.NoError(t, m.Free(h))
		require.NoError(t, m.checkInvariants())
	}
}

// smallSpaceStorage is a sparse storage whose address space is space
// bytes.
type smallSpaceStorage struct {
	*sparseStorage
	space uint64
}

func (s smallSpaceStorage) MaxVirtualSize() uint64 { return s.space }

// Lazy reservations bind nothing until resolved, and count the granules
// they need for a plan.
func TestVirtualLazyReservationsBindOnResolve(t *testing.T) {
	m, s := newVirtualManager(t, VirtualPlan{})
	h := mustReserve(t, m, 3*testGranule, Lazy)
	require.Zero(t, s.allocs)
	require.Equal(t, uint64(3*testGranule), m.Report().Dynamic[0].Kind.(VirtualKind).NeededPeakBytes)
	sh, err := m.Resolve(h)
	require.NoError(t, err)
	require.NoError(t, s.backed(sh))
	require.Equal(t, 1, s.allocs)
	require.NoError(t, m.Free(h))
	require.NoError(t, m.checkInvariants())
}

func TestVirtualLayoutAndKindJSON(t *testing.T) {
	for _, in := range []string{`"Virtual"`, `{"Virtual":{"planned_bytes":123456}}`} {
		l, err := ParseLayout(in)
		require.NoError(t, err)
		require.Equal(t, in, l.String())
	}
	_, err := ParseLayout(`{"Virtual":{"planned_bytes":-1}}`)
	require.Error(t, err)
	_, err = ParseLayout(`{"Virtual":{"planned":1}}`)
	require.Error(t, err)
	l, err := ParseLayout("virtual")
	require.NoError(t, err)
	require.Equal(t, LayoutVirtual, l.Kind())
	k := VirtualKind{GranuleSize: 2 << 20, PlannedBytes: 5, NeededPeakBytes: 6}
	b, err := k.MarshalJSON()
	require.NoError(t, err)
	back, err := UnmarshalPoolKind(b)
	require.NoError(t, err)
	require.Equal(t, k, back)
}

// TestVirtualPoolRefusedBindLeavesTheMapAsTheDeviceHasIt: a submission the
// device refuses binds and unbinds nothing, so the pool must not believe
// otherwise — every reservation made afterwards is backed where it lies,
// and a refused unbind at cleanup keeps the chunk instead of releasing
// memory still bound.
func TestVirtualPoolRefusedBindLeavesTheMapAsTheDeviceHasIt(t *testing.T) {
	for refuse := 1; refuse <= 12; refuse++ {
		s := newSparseStorage(refusedGranule)
		s.refuseCall = refuse
		refusedBindStream(t, s, rand.New(rand.NewPCG(uint64(refuse), 7)), 60, 17, fmt.Sprintf("refused call %d", refuse))
	}
}

const refusedGranule = 64 << 10

// refusedBindStream drives a random stream (reservations of up to three
// granules, frees, a cleanup every cleanupEvery steps) through a fresh
// virtual pool over s, which refuses a submission, and checks after each
// reservation that every live one lies on memory the device bound and
// that the pool holds its invariants; at the end, with nothing live, a
// cleanup returns every chunk and range. It reports whether the pool ever
// held more than one range.
func refusedBindStream(t *testing.T, s *sparseStorage, r *rand.Rand, steps, cleanupEvery int, name string) (spread bool) {
	t.Helper()
	props := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 1 << 20, MemorySize: 1 << 30}
	ranges := len(s.ranges)
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	m.SetLogger(slog.New(slog.DiscardHandler))
	var live []Handle
	for step := range steps {
		if len(live) > 0 && r.IntN(3) == 0 {
			k := r.IntN(len(live))
			require.NoError(t, m.Free(live[k]))
			live = slices.Delete(live, k, k+1)
			continue
		}
		if step%cleanupEvery == cleanupEvery-1 {
			m.Cleanup(true)
			continue
		}
		h, err := m.Reserve(uint64(r.IntN(3*refusedGranule)+1), Eager)
		if err != nil {
			// Refused, or out of address space.
			require.True(t, errors.Is(err, vkruntime.ErrDeviceLost) || errors.Is(err, vkruntime.ErrOutOfDeviceMemory), "%s: %v", name, err)
			continue
		}
		live = append(live, h)
		spread = spread || len(m.pools[0].(*virtualPool).segs) > 0
		for _, lh := range live {
			sh, err := m.Resolve(lh)
			require.NoError(t, err)
			require.NoError(t, s.backed(sh), "%s, step %d: a live reservation lies on memory the device never bound", name, step)
		}
		require.NoError(t, m.checkInvariants(), "%s, step %d", name, step)
		require.NoError(t, deviceAgrees(m.pools[0].(*virtualPool), s), "%s, step %d", name, step)
	}
	for _, h := range live {
		require.NoError(t, m.Free(h))
	}
	m.Cleanup(true)
	m.Cleanup(true)
	require.Empty(t, s.live, "%s: every chunk returned", name)
	require.Len(t, s.ranges, ranges, "%s: every range returned", name)
	return spread
}

// virtualReplay drives one random stream (reservations of up to three
// granules, frees, cleanups) through a fresh virtual pool with the mapping
// given, and returns the report after every step.
func virtualReplay(t *testing.T, plan VirtualPlan, mapping Mapping, seed uint64) ([]Report, *sparseStorage) {
	t.Helper()
	m, s := newVirtualManager(t, plan)
	m.SetLogger(slog.New(slog.DiscardHandler))
	r := rand.New(rand.NewPCG(seed, 11))
	live, reports := randomSteps(t, m, mapping, 600, func() uint64 { return uint64(r.IntN(3*testGranule) + 1) }, r)
	for _, h := range live {
		require.NoError(t, m.Free(h))
	}
	m.Cleanup(true)
	require.NoError(t, m.checkInvariants())
	return append(reports, m.Report()), s
}

// randomSteps drives steps random steps through m: reservations of size()
// bytes (half the steps), frees, and cleanups, explicit or not; it checks
// the invariants after each and returns the live reservations and the
// report after every step.
func randomSteps(t *testing.T, m *Manager, mapping Mapping, steps int, size func() uint64, r *rand.Rand) ([]Handle, []Report) {
	t.Helper()
	var live []Handle
	var reports []Report
	for range steps {
		switch k := r.IntN(10); {
		case k < 5 || len(live) == 0:
			live = append(live, mustReserve(t, m, size(), mapping))
		case k < 9:
			i := r.IntN(len(live))
			require.NoError(t, m.Free(live[i]))
			live = slices.Delete(live, i, i+1)
		default:
			m.Cleanup(r.IntN(2) == 0)
		}
		require.NoError(t, m.checkInvariants())
		reports = append(reports, m.Report())
	}
	return live, reports
}

// A dry run of a stream (Lazy reservations) reports what its real run
// (Eager) holds: the same usage, pages, peaks, reserved bytes and largest
// allocation after every step, its chunks all unmapped — and it reaches
// the driver not once.
func TestVirtualLazyReplayReportsWhatTheEagerReplayHolds(t *testing.T) {
	for _, plan := range []VirtualPlan{{}, {PlannedBytes: 40 * testGranule}} {
		for seed := range uint64(4) {
			lazy, ls := virtualReplay(t, plan, Lazy, seed)
			eager, es := virtualReplay(t, plan, Eager, seed)
			require.Positive(t, es.allocs)
			require.Positive(t, es.calls)
			var peak uint64
			for i := range lazy {
				l, e := lazy[i].Dynamic[0], eager[i].Dynamic[0]
				require.Equal(t, e.Pages, l.PagesUnmapped, "plan %v seed %d step %d: every chunk of a dry run is unmapped", plan, seed, i)
				require.Zero(t, e.PagesUnmapped)
				l.PagesUnmapped = 0
				require.Equal(t, e, l, "plan %v seed %d step %d", plan, seed, i)
				peak = max(peak, e.Usage.BytesReserved)
			}
			require.Positive(t, peak)
			require.Zero(t, ls.allocs, "a dry run allocates no device memory")
			require.Zero(t, ls.calls, "a dry run binds nothing")
			require.Zero(t, ls.next, "a dry run reserves no address range")
			require.Zero(t, lazy[len(lazy)-1].Dynamic[0].Pages, "an explicit cleanup with nothing live returns every chunk")
		}
	}
}

// Resolving a lazy reservation gives it exactly its granules: their
// chunk is allocated and bound under them, nothing else. Memory a lazy
// reservation took from idle granules the device bound is unbound there
// when it is resolved, and freeing and cleaning up what was never resolved
// reaches no driver.
func TestVirtualLazyReservationMaterialisesOnlyWhatIsResolved(t *testing.T) {
	m, s := newVirtualManager(t, VirtualPlan{})
	m.pools[0].(*virtualPool).unit = testGranule // each shortfall its own chunk
	a := mustReserve(t, m, 2*testGranule, Lazy)
	b := mustReserve(t, m, 3*testGranule, Lazy)
	require.Zero(t, s.allocs+s.calls)
	before := m.Report().Dynamic[0]
	require.Equal(t, before.Pages, before.PagesUnmapped)

	sh, err := m.Resolve(b)
	require.NoError(t, err)
	require.NoError(t, s.backed(sh))
	require.Equal(t, 1, s.allocs, "the chunk under b")
	require.Equal(t, 3, s.binds, "b's three granules, not a's")
	require.Error(t, s.backed(vkruntime.StorageHandle{ID: sh.ID, Offset: 0, Size: 2 * testGranule}), "a stays unbound")
	after := m.Report().Dynamic[0]
	require.Equal(t, before.Usage, after.Usage)
	require.Equal(t, before.Pages, after.Pages)
	require.Equal(t, before.PagesUnmapped-1, after.PagesUnmapped)
	require.NoError(t, m.checkInvariants())

	// b's granules go idle; a lazy reservation that does not fit where b
	// was takes their memory in the pool's account only: the device keeps
	// them bound until c is resolved.
	x := mustReserve(t, m, testGranule, Lazy)
	require.NoError(t, m.Free(b))
	calls, allocs := s.calls, s.allocs
	c := mustReserve(t, m, 4*testGranule, Lazy)
	require.Equal(t, [2]int{calls, allocs}, [2]int{s.calls, s.allocs})
	require.Equal(t, 3, staleGranules(m.pools[0].(*virtualPool)))
	require.NoError(t, m.checkInvariants())
	sh, err = m.Resolve(c)
	require.NoError(t, err)
	require.NoError(t, s.backed(sh))
	require.Equal(t, calls+1, s.calls, "one submission unbinds the stale granules and binds c's")
	require.Equal(t, allocs+1, s.allocs, "the chunk under c's fourth granule")
	require.Empty(t, m.pools[0].(*virtualPool).stale)
	require.Len(t, s.bound, 4, "c's granules alone are bound")
	require.NoError(t, m.checkInvariants())
	require.NoError(t, m.Free(x))

	// a was never resolved: freeing it and cleaning up reach no driver
	// for it.
	calls, allocs, deallocs := s.calls, s.allocs, s.deallocs
	require.NoError(t, m.Free(a))
	require.Equal(t, [3]int{calls, allocs, deallocs}, [3]int{s.calls, s.allocs, s.deallocs})
	require.NoError(t, m.Free(c))
	m.Cleanup(true)
	require.NoError(t, m.checkInvariants())
	require.Empty(t, s.live, "every chunk returned")
	require.Empty(t, s.ranges, "the range returned")
	require.Equal(t, s.allocs, s.deallocs)
	require.Equal(t, allocs, s.allocs)
}

// staleGranules counts the granules the device binds and the pool's
// account has unbound.
func staleGranules(p *virtualPool) (n int) {
	for _, r := range p.stale {
		n += r.n
	}
	return n
}

// The device's sparse address space is shared by every stream's ranges: a
// pool's first range is a fourth of the heap, and a pool that finds less
// than that left takes a smaller one (what it needs, at least 64 MiB, so
// that streams after it find room too; halves of that down to what its
// reservations reach where even that is not left) rather than failing, and
// places inside it; one that cannot fit even that is out of device memory
// and changes nothing.
func TestVirtualPoolsShareTheSparseAddressSpace(t *testing.T) {
	s := newSparseStorage(testGranule)
	props := testProps
	props.MemorySize = 150e9 // first ranges of 37.5 GB
	quarter := uint64(props.MemorySize/4) &^ (testGranule - 1)
	space := 2*quarter + 100<<20 // two first ranges and 100 MiB
	takeAddressSpace(s, space)
	var managers []*Manager
	var sizes []uint64
	var held []Handle
	for i := range 4 {
		m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
		require.NoError(t, err)
		h := mustReserve(t, m, 3*testGranule, Eager)
		held = append(held, h)
		sh, err := m.Resolve(h)
		require.NoError(t, err, "stream %d", i)
		require.NoError(t, s.backed(sh))
		require.NoError(t, m.checkInvariants())
		vp := m.pools[0].(*virtualPool)
		require.Equal(t, vp.space, s.ranges[vp.vrange.ID], "the pool places within the range it got")
		managers, sizes = append(managers, m), append(sizes, vp.space)
	}
	require.Equal(t, quarter, sizes[0])
	require.Equal(t, sizes[0], sizes[1], "whole first ranges while the space lasts")
	require.Equal(t, uint64(virtualTightRange), sizes[2], "then what they need, at least 64 MiB, though more is left")
	require.Less(t, sizes[3], sizes[2], "then less, where that is not left")
	var total uint64
	for _, size := range sizes {
		total += size
	}
	require.LessOrEqual(t, total, space)
	// A reservation larger than what is left of the address space fails
	// as out of device memory and leaves the pool as it was.
	last := managers[len(managers)-1]
	before, ranges := last.Report(), len(s.ranges)
	_, err := last.Reserve(sizes[len(sizes)-1]+testGranule, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Equal(t, before, last.Report())
	require.Len(t, s.ranges, ranges)
	// Once the first stream gives its range back, the last one, emptied
	// and cleaned up, takes a whole range again.
	for _, i := range []int{0, len(managers) - 1} {
		require.NoError(t, managers[i].Free(held[i]))
		managers[i].Cleanup(true)
	}
	big := mustReserve(t, last, sizes[len(sizes)-1]+testGranule, Eager)
	_, err = last.Resolve(big)
	require.NoError(t, err)
	require.Equal(t, sizes[0], last.pools[0].(*virtualPool).space, "a whole range again")
	require.NoError(t, last.checkInvariants())
	require.NoError(t, last.Free(big))
	last.Cleanup(true)
	// The ranges of the streams between hold on, and only they.
	total = 0
	for _, size := range sizes[1 : len(sizes)-1] {
		total += size
	}
	var ranged uint64
	for id, size := range s.ranges {
		if id != 1<<30 {
			ranged += size
		}
	}
	require.Equal(t, total, ranged)

	// With the address space all taken, a new stream's first reservation
	// is out of device memory, and nothing is left held.
	takeAddressSpace(s, total)
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	live := len(s.live)
	_, err = m.Reserve(testGranule, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.NoError(t, m.checkInvariants())
	require.Zero(t, m.Usage().NumberAllocs)
	m.Cleanup(true)
	require.Len(t, s.live, live, "no chunk is left behind")
}

// reportingSparse is a sparseStorage that says what its live ranges leave
// of the address space (runtime.VirtualSpaceReporter), as the devices do.
type reportingSparse struct{ *sparseStorage }

func (s reportingSparse) VirtualSpaceLeft() uint64 {
	var taken uint64
	for _, r := range s.ranges {
		taken += r
	}
	return s.MaxVirtualSize() - taken
}

// Where the storage says what the address space has left, pools take
// first ranges of a fourth of the heap while the ranges before them leave
// half the space or more, and then what they need, at least 64 MiB:
// 200 streams (and on, see TestStreamsPastTheirFirstRangesStillFindRoom
// in dryrun/replay) find room in 1 TiB with a 150 GB heap, where a
// sixteenth of what was left for each held 85 and the largest range that
// fit left the 34th none.
func TestFirstRangesLeaveRoomForTheStreamsAfterThem(t *testing.T) {
	s := reportingSparse{newSparseStorage(testGranule)}
	props := testProps
	props.MemorySize = 150e9
	quarter := uint64(props.MemorySize/4) &^ (testGranule - 1)
	half := s.MaxVirtualSize() / 2
	whole := 0
	for i := range 200 {
		left := s.VirtualSpaceLeft()
		m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
		require.NoError(t, err)
		h := mustReserve(t, m, 3*testGranule, Eager)
		_, err = m.Resolve(h)
		require.NoError(t, err, "stream %d, %d B of address space left", i, left)
		size := m.pools[0].(*virtualPool).space
		if left >= half {
			require.Equal(t, quarter, size, "stream %d: a fourth of the heap while half the space is left", i)
			whole++
		} else {
			require.Equal(t, uint64(virtualTightRange), size, "stream %d: then what it needs, at least 64 MiB", i)
		}
		require.NoError(t, m.Free(h))
	}
	require.Equal(t, int((s.MaxVirtualSize()-half+quarter-1)/quarter), whole)
}

// smallSpace is a sparse storage whose ranges may take only 1 GiB.
type smallSpace struct{ *sparseStorage }

func (smallSpace) MaxVirtualSize() uint64 { return 1 << 30 }

// A Virtual plan whose places end past the address space the device's
// ranges may take is an invalid layout, at NewManager and at Install, and
// an Install refused for it changes nothing; its first range could never
// be reserved. (Its pool's space was worked out by a difference that
// wrapped, and the run failed at its first reservation.)
func TestAPlanPastTheAddressSpaceIsInvalid(t *testing.T) {
	s := smallSpace{newSparseStorage(testGranule)}
	past := VirtualLayout(VirtualPlan{PlannedBytes: 2 << 20, Slots: []VirtualSlot{{Size: 1 << 20, Offset: 0}, {Size: 1 << 20, Offset: 1 << 30}}})
	_, err := NewManager(s, testProps, past)
	var ie *InstallError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, InvalidLayout, ie.Kind)
	require.ErrorContains(t, err, "this device's sparse ranges may take 1073741824 B")

	m, err := NewManager(s, testProps, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	h := mustReserve(t, m, 3*testGranule, Eager)
	before := m.Report()
	err = m.Install(past)
	require.ErrorAs(t, err, &ie)
	require.Equal(t, InvalidLayout, ie.Kind)
	require.Equal(t, before, m.Report(), "a refused install changes nothing")
	require.NoError(t, m.Free(h))

	fits := VirtualLayout(VirtualPlan{PlannedBytes: 2 << 20, Slots: []VirtualSlot{{Size: 1 << 20, Offset: 0}, {Size: 1 << 20, Offset: 1 << 29}}})
	_, err = NewManager(s, testProps, fits)
	require.NoError(t, err, "a plan inside the space installs")
}

// limitedSparseStorage is a sparseStorage that allocates at most limit
// bytes at once.
type limitedSparseStorage struct {
	*sparseStorage
	limit uint64
}

func (s limitedSparseStorage) MaxAllocationSize() uint64 { return s.limit }

// A storage whose largest allocation is smaller than its sparse granule
// cannot back a granule with one allocation: the Virtual layout stands
// aside for the SubSlices pools, as on a storage without sparse residency.
// Its chunks were a granule each, 64 KiB asked of a storage that allocates
// 4 KiB at most.
func TestAGranulePastTheLargestAllocationIsNoSparseResidency(t *testing.T) {
	s := limitedSparseStorage{newSparseStorage(64 << 10), 4 << 10}
	m, err := NewManager(s, vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 4 << 10, MemorySize: 1 << 20}, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	for _, size := range []uint64{100, 4000, 2 << 10} {
		_, err := m.Reserve(size, Eager)
		require.NoError(t, err)
	}
	_, virtual := m.Report().Dynamic[0].Kind.(VirtualKind)
	require.False(t, virtual, "%v", m.Report().Dynamic[0].Kind)
	for id, size := range s.live {
		require.LessOrEqual(t, size, uint64(4<<10), "allocation %d", id)
	}
}

// A heap larger than half the device's sparse address space does not let
// the first stream's range take the space: each first range takes at most
// half of what is left, and every stream after finds room (with a heap of
// 4x the space the second stream was refused 4 B; of 2x, the third).
func TestAHeapLargerThanTheAddressSpaceLeavesRoomForEveryStream(t *testing.T) {
	for _, times := range []uint64{1, 2, 4} {
		s := reportingSparse{newSparseStorage(testGranule)}
		props := testProps
		props.MemorySize = times * s.MaxVirtualSize()
		for i := range 50 {
			left := s.VirtualSpaceLeft()
			m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
			require.NoError(t, err)
			h := mustReserve(t, m, 3*testGranule, Eager)
			_, err = m.Resolve(h)
			require.NoError(t, err, "heap of %dx the space: stream %d, %d B of address space left", times, i, left)
			require.LessOrEqual(t, m.pools[0].(*virtualPool).space, max(left/2, uint64(virtualTightRange)), "stream %d takes at most half of what is left", i)
			require.NoError(t, m.Free(h))
		}
	}
}

// A pool whose planned places need more address space than is left for
// its whole first range, but no more than is left, takes a range of what
// it needs: halving from the whole range passed over it (places ending at
// 322 GB, 354 GB left: 360 GB refused, then 180 GB, too small) and the
// reservation was refused with the space to hold it.
func TestARangeOfWhatThePlanNeedsIsTriedBeforeGivingUp(t *testing.T) {
	s := newSparseStorage(testGranule)
	_, err := s.ReserveVirtual(s.MaxVirtualSize() - 330<<30)
	require.NoError(t, err)
	props := testProps
	props.MemorySize = 150e9
	plan := VirtualPlan{PlannedBytes: 1 << 20, Slots: []VirtualSlot{{Size: 1 << 20, Offset: 300 << 30}}}
	m, err := NewManager(s, props, VirtualLayout(plan))
	require.NoError(t, err)
	h := mustReserve(t, m, 1<<20, Eager)
	_, err = m.Resolve(h)
	require.NoError(t, err, "330 GiB of address space hold the planned places")
	p := m.pools[0].(*virtualPool)
	require.GreaterOrEqual(t, p.space, p.slotsEnd+testGranule)
	require.LessOrEqual(t, p.space, uint64(330<<30))
}

// Streams under one large plan share the device's sparse address space:
// each pool's first range held the plan's places and a fourth of the heap
// past them, and once half the space was taken, a power of two of at least
// the places. Seven streams under a plan of 120 GB of places on a 1 TiB
// space got ranges, and the eighth none, where nine hold the places. Now
// a planned pool keeps at most a fourth of its places past them, and
// exactly what it needs once the space is short: eight get theirs.
func TestStreamsUnderOneLargePlanShareTheAddressSpace(t *testing.T) {
	s := reportingSparse{newSparseStorage(2 << 20)}
	props := testProps
	props.MemorySize = 150e9
	const places = 57221 << 21 // 120 GB in 2 MiB granules
	plan := VirtualLayout(VirtualPlan{PlannedBytes: places, Slots: []VirtualSlot{{Size: places, Offset: 0}}})
	served := 0
	for ; served < 10; served++ {
		m, err := NewManager(s, props, plan)
		require.NoError(t, err)
		h, err := m.Reserve(places, Lazy) // the planned slot, backed by none
		require.NoError(t, err)
		if _, err := m.Resolve(h); err != nil {
			require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
			break
		}
		require.NoError(t, m.Free(h))
	}
	require.Equal(t, 8, served, "streams whose pools got the plan's places")
}

// A stream whose first planned place the device's sparse address space can
// no longer hold the plan's places for (the streams before took it) runs
// without its plan, warned once and counted as a spill, where its pool was
// refused its range: past the eighth stream under a 120 GB plan in 1 TiB,
// each stream's first reservation failed with the heap nearly empty.
func TestStreamsPastWhatTheAddressSpaceHoldsOfAPlanRunWithoutIt(t *testing.T) {
	s := reportingSparse{newSparseStorage(2 << 20)}
	props := testProps
	props.MemorySize = 150e9
	const places = 57221 << 21 // 120 GB in 2 MiB granules
	plan := VirtualLayout(VirtualPlan{PlannedBytes: 4 << 20,
		Slots: []VirtualSlot{{Size: 2 << 20, Offset: 0}, {Size: 2 << 20, Offset: places - 2<<20}}})
	for stream := range 12 {
		m, err := NewManager(s, props, plan)
		require.NoError(t, err)
		var log bytes.Buffer
		m.SetLogger(slog.New(slog.NewTextHandler(&log, nil)))
		placesFit := s.VirtualSpaceLeft() >= places+2<<20
		h, err := m.Reserve(2<<20, Eager) // the first planned place
		require.NoError(t, err, "stream %d", stream)
		_, err = m.Resolve(h)
		require.NoError(t, err)
		k := m.Report().Dynamic[0].Kind.(VirtualKind)
		if placesFit {
			require.Zero(t, m.Spills(), "stream %d follows its plan", stream)
			require.Equal(t, uint64(4<<20), k.PlannedBytes)
			continue
		}
		require.Equal(t, uint64(1), m.Spills(), "stream %d runs without its plan", stream)
		require.Zero(t, k.PlannedBytes, "stream %d", stream)
		require.Contains(t, log.String(), "cannot hold the plan's places")
		require.Contains(t, log.String(), fmt.Sprintf("places_bytes=%d", uint64(places)))
		// It grows by its shortfall, not towards the plan.
		h2, err := m.Reserve(64<<20, Eager)
		require.NoError(t, err)
		require.NoError(t, m.Free(h2))
	}
	require.Less(t, s.VirtualSpaceLeft(), uint64(places), "the streams that followed the plan took the space")
}

// A run that left its plan, once half the address space is taken, places
// in its planned places' own area before it takes another range of what
// the streams share.
func TestARunThatLeftItsPlanUsesItsPlacesBeforeMoreAddressSpace(t *testing.T) {
	s := reportingSparse{newSparseStorage(2 << 20)}
	props := testProps
	props.MemorySize = 150e9
	other, err := s.ReserveVirtual(600 << 30) // another stream's
	require.NoError(t, err)
	const places = 5120 << 21 // 10 GiB
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{PlannedBytes: 4 << 20,
		Slots: []VirtualSlot{{Size: 2 << 20, Offset: 0}, {Size: 2 << 20, Offset: places - 2<<20}}}))
	require.NoError(t, err)
	mustReserve(t, m, 2<<20, Eager) // follows the plan: the range holds the places
	ranges := len(s.ranges)
	// The first leaves the plan with the first place live; neither fits
	// the granule the range keeps above the places.
	for _, size := range []uint64{4 << 20, 1 << 30} {
		h := mustReserve(t, m, size, Eager)
		require.Len(t, s.ranges, ranges, "no range taken for %d B: %d B of address space left", size, s.VirtualSpaceLeft())
		at, err := m.Resolve(h)
		require.NoError(t, err)
		require.NotEqual(t, other.ID, at.ID)
		require.Less(t, at.Offset, uint64(places), "placed among the planned places")
	}
}

// A run that leaves a small plan at its first reservation places above the
// plan's places: the first range keeps a sixteenth of the heap past them,
// so a run sixteen times the plan still places in one range, where a
// fourth of the places (16 MiB here) sent each large buffer to a range of
// its own.
func TestARunLeavingASmallPlanPlacesInItsFirstRange(t *testing.T) {
	s := reportingSparse{newSparseStorage(testGranule)}
	props := testProps
	props.MemorySize = 160 << 30
	plan := VirtualPlan{PlannedBytes: 64 << 20, Slots: []VirtualSlot{{Size: 64 << 20, Offset: 0}}}
	m, err := NewManager(s, props, VirtualLayout(plan))
	require.NoError(t, err)
	var live []Handle
	for _, size := range []uint64{32 << 20, 256 << 20, 256 << 20, 256 << 20, 256 << 20} {
		h := mustReserve(t, m, size, Eager)
		_, err := m.Resolve(h)
		require.NoError(t, err)
		live = append(live, h)
	}
	p := m.pools[0].(*virtualPool)
	require.False(t, p.following, "the first reservation left the plan")
	require.Empty(t, p.segs, "the run places in its first range")
	require.Equal(t, 64<<20+props.MemorySize/virtualPlanHeadroomFloor, p.space, "the places and a sixteenth of the heap")
	for _, h := range live {
		require.NoError(t, m.Free(h))
	}
}

// A reservation whose TLSF block lacks memory, while the pool has too
// little spare memory for it, goes to a free block near it in TLSF's bins
// whose granules have memory bound: it needs no submission, where binding
// TLSF's block would unbind idle memory elsewhere to move it there.
func TestAReservationGoesWhereMemoryIsBoundRatherThanMoveIt(t *testing.T) {
	const g = testGranule
	m, s := newVirtualManager(t, VirtualPlan{})
	// A chunk of a unit, every granule used: granule 0, a hole-to-be of
	// 12 granules, a granule, and the rest.
	a := mustReserve(t, m, g, Eager)
	h := mustReserve(t, m, 12*g, Eager)
	b := mustReserve(t, m, g, Eager)
	rest := mustReserve(t, m, VirtualChunkUnit-14*g, Eager)
	require.Equal(t, 1, s.allocs)
	require.Equal(t, 1, s.calls)
	hole, err := m.Resolve(h)
	require.NoError(t, err)
	require.NoError(t, m.Free(h))
	// A unit more, above: the hole's memory moves under it, so the hole's
	// granules have none now, and a second chunk gives the rest.
	x := mustReserve(t, m, VirtualChunkUnit, Eager)
	require.Equal(t, 2, s.allocs)
	require.Equal(t, 2, s.calls)
	_, bound := s.bound[[2]uint64{uint64(hole.ID), hole.Offset}]
	require.False(t, bound, "the hole's memory went to the unit above")
	// 16 granules above that, and the spare memory above them bound with
	// them in the same submission: idle, in the free block above.
	e := mustReserve(t, m, 16*g, Eager)
	require.Equal(t, 3, s.calls)
	es, err := m.Resolve(e)
	require.NoError(t, err)
	_, bound = s.bound[[2]uint64{uint64(es.ID), es.Offset + 16*g}]
	require.True(t, bound, "the granule above the 16 has memory bound ahead")
	// One granule: TLSF's block is the hole, which has no memory; the
	// free block above the 16 granules does.
	y := mustReserve(t, m, g, Eager)
	require.Equal(t, 3, s.calls, "on memory already bound: no submission")
	ys, err := m.Resolve(y)
	require.NoError(t, err)
	require.Equal(t, es.Offset+16*g, ys.Offset, "placed where memory is bound, not in the hole")
	for _, h := range []Handle{a, b, rest, x, e, y} {
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		require.NoError(t, s.backed(sh))
	}
	require.NoError(t, m.checkInvariants())
}
