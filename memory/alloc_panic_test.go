package memory

import (
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
