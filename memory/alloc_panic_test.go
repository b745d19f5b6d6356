package memory

import (
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// panickingAllocStorage is a storage whose Alloc panics, allocating
// nothing, while panics is set, as a flawed device's may, and refuses the
// next refuse Allocs.
type panickingAllocStorage struct {
	*fakeStorage
	panics bool
	refuse int
}

func (s *panickingAllocStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	switch {
	case s.panics:
		panic("the device's Alloc panics")
	case s.refuse > 0:
		s.refuse--
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Detail: "test storage refuses"}
	}
	return s.fakeStorage.Alloc(size)
}

// A reservation whose device Alloc panics, after its pool gave the memory
// of cached free allocations back to make room, leaves nothing behind for
// the next refusal to act on: the pool kept the list of what it unmapped,
// and a later reservation the device refused gave memory again to the
// entries of that list, released by a cleanup meanwhile (the count of
// unmapped pages wrapped past 2^64 and the device held an allocation of
// 0 B no page owned).
func TestAPanickedAllocLeavesNoPagesToRemap(t *testing.T) {
	for _, c := range []struct {
		name   string
		layout Layout
		sizes  []uint64 // reserved and freed: the cache
		next   uint64   // a reservation that unmaps some of it
	}{
		{"direct", DirectLayout(), []uint64{1024, 1024, 1024}, 2048},
		{"exclusive", SlicedLayout(SlicedPool{PageSize: 8 << 20, Exclusive: true}), []uint64{1 << 20, 1 << 20}, 4 << 20},
		{"exclusive capped", SlicedLayout(SlicedPool{PageSize: 8 << 20, Pages: u64(2), Exclusive: true}), []uint64{1 << 20, 1 << 20}, 4 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &panickingAllocStorage{fakeStorage: newFakeStorage()}
			m, err := NewManager(s, testProps, c.layout)
			require.NoError(t, err)
			var hs []Handle
			for _, size := range c.sizes {
				hs = append(hs, mustReserve(t, m, size, Eager))
			}
			for _, h := range hs {
				require.NoError(t, m.Free(h))
			}
			s.panics = true
			require.Panics(t, func() { _, _ = m.Reserve(c.next, Eager) })
			s.panics = false
			require.NoError(t, m.checkInvariants())
			m.Cleanup(true)
			require.NoError(t, m.checkInvariants())
			require.Empty(t, s.live)

			s.refuse = 1
			_, err = m.Reserve(c.next, Eager)
			require.Zero(t, s.refuse)
			require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
			require.NoError(t, m.checkInvariants())
			require.Equal(t, Usage{}, m.Usage())
			require.Empty(t, s.live, "the device holds allocations no page owns")
			rep := m.Report()
			for _, p := range append(rep.Dynamic, rep.Persistent) {
				require.Zero(t, p.Pages)
				require.Zero(t, p.PagesUnmapped)
			}
			h := mustReserve(t, m, c.next, Eager)
			require.NoError(t, m.Free(h))
			m.Cleanup(true)
			require.NoError(t, m.checkInvariants())
			require.Empty(t, s.live)
		})
	}
}

// panickingAllocSparse is a sparse storage whose next Alloc panics while
// panics is set, allocating nothing.
type panickingAllocSparse struct {
	*sparseStorage
	panics bool
}

func (s *panickingAllocSparse) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	if s.panics {
		s.panics = false
		panic("the device's Alloc panics")
	}
	return s.sparseStorage.Alloc(size)
}

// A virtual reservation whose device Alloc panics leaves the pool agreeing
// with the device, as a refused one does: the idle granules it unbound to
// make room were never sent to the device (addChunks panicked), and the
// granules it bound to a chunk whose memory the device panicked giving
// stayed bound in the pool's account, to a chunk with none, while the
// device bound them elsewhere or not at all. Streams of random calls,
// seeded, where each broke one of these.
func TestAPanickedAllocLeavesTheVirtualPoolAgreeing(t *testing.T) {
	props := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 4096, MemorySize: 1 << 20}
	layouts := fuzzLayouts()[6:10]
	sizes := []uint64{0, 1, 16, 64, 100, 128, 256, 500, 1000, 1024, 2048, 3000, 4096, 5000, 1 << 16, 1 << 19}
	for _, seed := range []uint64{0, 1, 1081} {
		rng := rand.New(rand.NewPCG(seed, 9))
		s := &panickingAllocSparse{sparseStorage: newSparseStorage(256)}
		if rng.IntN(2) == 0 {
			s.heapSize = uint64(rng.IntN(64)+1) << 12
		}
		m, err := NewManager(s, props, layouts[rng.IntN(len(layouts))])
		require.NoError(t, err)
		m.SetLogger(slog.New(slog.DiscardHandler))
		var hs []Handle
		for step := 0; step < 200; step++ {
			s.panics = rng.IntN(5) == 0
			func() {
				defer func() { _ = recover() }()
				switch rng.IntN(10) {
				case 0, 1, 2, 3:
					size, mapping, tight := sizes[rng.IntN(len(sizes))], Mapping(rng.IntN(2)), rng.IntN(2) != 0
					reserve := m.Reserve
					if tight {
						reserve = m.ReserveTight
					}
					if h, err := reserve(size, mapping); err == nil {
						hs = append(hs, h)
					}
				case 4, 5:
					hs = freeOne(m, rng, hs)
				case 6:
					if len(hs) > 0 {
						h := hs[rng.IntN(len(hs))]
						if rng.IntN(2) == 0 {
							_, _ = m.Resolve(h)
						} else {
							_, _ = m.ResolveTight(h)
						}
					}
				case 7:
					m.Cleanup(rng.IntN(2) == 0)
				case 8:
					_ = m.Install(layouts[rng.IntN(len(layouts))])
				case 9:
					if rng.IntN(2) == 0 {
						m.BeginPersistent()
					} else {
						m.EndPersistent()
					}
				}
			}()
			s.panics = false
			requirePoolsWhole(t, m, s.sparseStorage, "seed %d step %d", seed, step)
		}
	}
}

// requirePoolsWhole fails t where m breaks an invariant or a virtual pool
// of it disagrees with the device about what is bound.
func requirePoolsWhole(t *testing.T, m *Manager, s *sparseStorage, msgAndArgs ...any) {
	t.Helper()
	require.NoError(t, m.checkInvariants(), msgAndArgs...)
	for _, p := range m.pools {
		if vp, ok := p.(*virtualPool); ok {
			require.NoError(t, deviceAgrees(vp, s), msgAndArgs...)
		}
	}
}

// freeOne frees one of hs, drawn by rng, and returns hs without it where
// the free took (a panicking device may have stopped it).
func freeOne(m *Manager, rng *rand.Rand, hs []Handle) []Handle {
	if len(hs) == 0 {
		return hs
	}
	i := rng.IntN(len(hs))
	if m.Free(hs[i]) == nil {
		hs = slices.Delete(hs, i, i+1)
	}
	return hs
}

// panickingStorage is a sparse storage whose Alloc, Dealloc or Flush
// panics at its n-th next call, where n is set, as a flawed device's may.
type panickingStorage struct {
	*sparseStorage
	alloc, dealloc, flush int
}

func countDown(n *int, what string) {
	if *n > 0 {
		if *n--; *n == 0 {
			panic("the device's " + what + " panics")
		}
	}
}

func (s *panickingStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	countDown(&s.alloc, "Alloc")
	return s.sparseStorage.Alloc(size)
}

func (s *panickingStorage) Dealloc(id vkruntime.StorageID) {
	countDown(&s.dealloc, "Dealloc")
	s.sparseStorage.Dealloc(id)
}

func (s *panickingStorage) Flush() {
	countDown(&s.flush, "Flush")
	s.sparseStorage.Flush()
}

// A cleanup or a reservation in which the device's Dealloc or Flush
// panics leaves every pool whole: what it released so far is released,
// the rest held as it was. The sliced pool dropped a page's block before
// giving the page back, the direct pool took an allocation out of its
// cache, the exclusive pool left released pages in its free lists and
// emptied groups in place, and the virtual pool took a chunk's granules
// out of its spare ones, each before the device's call that panicked.
// Streams of random calls, seeded, over every layout.
func TestAPanickedDeallocLeavesThePoolsWhole(t *testing.T) {
	props := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 4096, MemorySize: 1 << 20}
	layouts := fuzzLayouts()
	layouts = layouts[:len(layouts)-1]
	sizes := []uint64{0, 1, 16, 64, 100, 128, 256, 500, 1000, 1024, 2048, 3000, 4096, 5000, 1 << 16, 1 << 19}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 5))
		s := &panickingStorage{sparseStorage: newSparseStorage(256)}
		m, err := NewManager(s, props, layouts[rng.IntN(len(layouts))], WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		var hs []Handle
		for step := range 150 {
			switch rng.IntN(12) {
			case 0:
				s.alloc = 1 + rng.IntN(2)
			case 1, 2:
				s.dealloc = 1 + rng.IntN(3)
			case 3:
				s.flush = 1 + rng.IntN(2)
			}
			func() {
				defer func() { _ = recover() }()
				switch rng.IntN(10) {
				case 0, 1, 2, 3:
					reserve := m.Reserve
					if rng.IntN(2) == 0 {
						reserve = m.ReserveTight
					}
					if h, err := reserve(sizes[rng.IntN(len(sizes))], Mapping(rng.IntN(2))); err == nil {
						hs = append(hs, h)
					}
				case 4, 5:
					hs = freeOne(m, rng, hs)
				case 6:
					if len(hs) > 0 {
						_, _ = m.ResolveTight(hs[rng.IntN(len(hs))])
					}
				case 7, 8:
					m.Cleanup(rng.IntN(2) == 0)
				case 9:
					_ = m.Install(layouts[rng.IntN(len(layouts))])
				}
			}()
			s.alloc, s.dealloc, s.flush = 0, 0, 0
			requirePoolsWhole(t, m, s.sparseStorage, "seed %d step %d", seed, step)
		}
	}
}

// A reservation after which an exclusive pool sweeps its pages idle for a
// period, where the device's Dealloc or Flush panics in the sweep, leaves
// nothing counted live: the pool had counted the reservation and kept its
// page in use, and the manager, which gave out no handle, could never
// free either.
func TestAPanicInAnExclusiveSweepLeaksNoPage(t *testing.T) {
	for name, l := range map[string]Layout{
		"uncapped": SlicedLayout(SlicedPool{PageSize: 8 << 20, Exclusive: true}),
		"capped":   SlicedLayout(SlicedPool{PageSize: 8 << 20, Pages: u64(2), Exclusive: true}),
	} {
		for _, what := range []string{"Dealloc", "Flush"} {
			t.Run(name+"/"+what, func(t *testing.T) {
				s := &panickingStorage{sparseStorage: newSparseStorage(256)}
				m, err := NewManager(s, testProps, l)
				require.NoError(t, err)
				// The page of b stays free while a's is reserved and
				// freed again and again, until a sweep returns it.
				a := mustReserve(t, m, 1<<20, Eager)
				b := mustReserve(t, m, 2<<20, Eager)
				require.NoError(t, m.Free(a))
				require.NoError(t, m.Free(b))
				if what == "Dealloc" {
					s.dealloc = 1
				} else {
					s.flush = 1
				}
				panicked := false
				for range 2 * exclusiveDeallocPeriod {
					require.NotPanics(t, func() {
						defer func() { panicked = recover() != nil }()
						h := mustReserve(t, m, 1<<20, Eager)
						require.NoError(t, m.Free(h))
					})
					if panicked {
						break
					}
				}
				require.True(t, panicked, "no sweep reached the device")
				require.NoError(t, m.checkInvariants())
				require.Zero(t, m.Usage().NumberAllocs)
				require.Zero(t, m.Usage().BytesInUse)
				m.Cleanup(true)
				require.NoError(t, m.checkInvariants())
				require.Empty(t, s.live, "a page no reservation holds was kept")
			})
		}
	}
}

// The reservation a sweep whose Dealloc or Flush panics rolls back is no
// reservation served: the pool's largest_alloc counted it all the same,
// larger than any the pool had served, as a report's high-water mark.
func TestAPanicInAnExclusiveSweepLeavesLargestAllocAsItWas(t *testing.T) {
	for _, what := range []string{"Dealloc", "Flush"} {
		t.Run(what, func(t *testing.T) {
			s := &panickingStorage{sparseStorage: newSparseStorage(256)}
			m, err := NewManager(s, testProps, SlicedLayout(SlicedPool{PageSize: 8 << 20, Exclusive: true}))
			require.NoError(t, err)
			p := m.pools[0].(*exclusivePool)
			// The page of b stays free, for the second sweep to return.
			a := mustReserve(t, m, 1<<20, Eager)
			b := mustReserve(t, m, 2<<20, Eager)
			require.NoError(t, m.Free(a))
			require.NoError(t, m.Free(b))
			for p.lastSweep == 0 || p.served+1-p.lastSweep < exclusiveDeallocPeriod {
				require.NoError(t, m.Free(mustReserve(t, m, 1<<20, Eager)))
			}
			require.Equal(t, uint64(2<<20), m.Report().Dynamic[0].LargestAlloc)
			if what == "Dealloc" {
				s.dealloc = 1
			} else {
				s.flush = 1
			}
			// A page of its own (the free ones too small hold less than
			// half of it), then the sweep, which panics.
			require.PanicsWithValue(t, "the device's "+what+" panics", func() { _, _ = m.Reserve(7<<20, Eager) })
			require.NoError(t, m.checkInvariants())
			require.Zero(t, m.Usage().NumberAllocs)
			require.Equal(t, uint64(2<<20), m.Report().Dynamic[0].LargestAlloc, "the rolled-back reservation is not the largest served")
			// One that stands counts as ever.
			h := mustReserve(t, m, 7<<20, Eager)
			require.Equal(t, uint64(7<<20), m.Report().Dynamic[0].LargestAlloc)
			require.NoError(t, m.Free(h))
		})
	}
}
