package faultstorage_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/faultstorage"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

func TestNthCallFailsOnceWithItsClass(t *testing.T) {
	s := faultstorage.Wrap(newInner(0)).FailNth(faultstorage.Alloc, 2, nil)
	a, err := s.Alloc(100)
	require.NoError(t, err)
	_, err = s.Alloc(200)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(200), oom.Size)
	b, err := s.Alloc(300)
	require.NoError(t, err, "a failure is armed for one call")
	require.Equal(t, 3, s.Calls(faultstorage.Alloc))
	require.Equal(t, []string{"Alloc #2"}, s.Injected())
	n, bytes, _ := s.Held()
	require.Equal(t, 2, n)
	require.Equal(t, uint64(400), bytes)
	s.Dealloc(a.ID)
	s.Dealloc(b.ID)
	n, _, _ = s.Held()
	require.Zero(t, n)
}

func TestFailedDeallocStaysHeldUntilAFlushGetsThrough(t *testing.T) {
	inner := newInner(0)
	s := faultstorage.Wrap(inner).FailNth(faultstorage.Dealloc, 1, nil).FailNth(faultstorage.Flush, 1, nil)
	h, err := s.Alloc(4096)
	require.NoError(t, err)
	s.Dealloc(h.ID)
	require.Equal(t, 1, s.Stuck())
	require.Equal(t, uint64(4096), inner.Counts().BytesHeld, "the device still holds it")
	s.Flush()
	require.Equal(t, 1, s.Stuck(), "the first flush fails too")
	s.Flush()
	require.Zero(t, s.Stuck())
	require.Zero(t, inner.Counts().BytesHeld)
	n, _, _ := s.Held()
	require.Zero(t, n)
}

func TestMisuseIsRecorded(t *testing.T) {
	s := faultstorage.Wrap(newInner(2 << 20))
	h, err := s.Alloc(2 << 20)
	require.NoError(t, err)
	s.Dealloc(h.ID)
	s.Dealloc(h.ID)
	s.Dealloc(99)
	r, err := s.ReserveVirtual(8 << 20)
	require.NoError(t, err)
	_ = s.Bind(r.ID, []vkruntime.SparseBind{{Offset: 0, Size: 2 << 20, Memory: h.ID}})
	s.ReleaseVirtual(r.ID)
	s.ReleaseVirtual(r.ID)
	require.Len(t, s.Misuses(), 4, "%v", s.Misuses())
}

func TestWrappedStorageWithoutSparseOffersNone(t *testing.T) {
	s := faultstorage.Wrap(newInner(0))
	require.Zero(t, s.SparseGranule())
	require.Zero(t, s.MaxAllocationSize())
	m, err := memory.NewManager(s, vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 64 << 20, MemorySize: 1 << 30},
		memory.VirtualLayout(memory.VirtualPlan{}))
	require.NoError(t, err)
	_, err = m.Reserve(1000, memory.Eager)
	require.NoError(t, err, "a virtual layout falls back to sliced pools")
	require.Zero(t, s.Calls(faultstorage.ReserveVirtual))
}
