package memory

import (
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// panickingBindStorage is a sparse storage whose Bind panics, binding
// nothing, while panics is set, as a flawed device's may.
type panickingBindStorage struct {
	*sparseStorage
	panics bool
}

func (s *panickingBindStorage) Bind(id vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	if s.panics {
		panic("the device's Bind panics")
	}
	return s.sparseStorage.Bind(id, binds)
}

// A reservation whose sparse bind panics leaves the virtual pool as a
// refused one does: its binds undone in the granule map and the chunks
// made for it given back. They stayed, held after every cleanup, and the
// next submission sent the binds again.
func TestAPanickedBindLeavesThePoolAsItWas(t *testing.T) {
	s, _ := gigabyteDevicePool(t)
	ps := &panickingBindStorage{sparseStorage: s}
	props := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 64 << 20, MemorySize: 1 << 30}
	m, err := NewManager(ps, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	kept, err := m.Reserve(1<<20, Eager)
	require.NoError(t, err)
	m.Cleanup(true)
	usage, live, bound := m.Usage(), s.liveBytes(), len(s.bound)

	ps.panics = true
	require.Panics(t, func() { _, _ = m.Reserve(8<<20, Eager) })
	ps.panics = false
	require.NoError(t, m.checkInvariants())
	require.Equal(t, usage, m.Usage())
	h, err := m.Reserve(8<<20, Eager)
	require.NoError(t, err)
	require.NoError(t, m.checkInvariants())
	require.NoError(t, m.Free(h))
	m.Cleanup(true)
	require.Equal(t, usage, m.Usage())
	require.Equal(t, live, s.liveBytes(), "device memory held after a cleanup")
	require.Equal(t, bound, len(s.bound))

	h, err = m.Reserve(8<<20, Eager)
	require.NoError(t, err)
	require.NoError(t, m.checkInvariants())
	require.NoError(t, m.Free(h))
	require.NoError(t, m.Free(kept))
	m.Cleanup(true)
	require.NoError(t, m.checkInvariants())
	require.Zero(t, s.liveBytes())
}
