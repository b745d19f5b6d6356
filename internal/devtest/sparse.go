package devtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// RangesShareTheAddressSpace checks that s's virtual ranges share its
// sparse address space, as every sparse storage's must: past what the live
// ones leave, ReserveVirtual is out of device memory with the size asked,
// and a range released with release, then flush, gives its space back.
func RangesShareTheAddressSpace(t testing.TB, s vkruntime.SparseStorage, release func(vkruntime.StorageID), flush func()) {
	t.Helper()
	half := s.MaxVirtualSize()/2 + 1
	v, err := s.ReserveVirtual(half)
	require.NoError(t, err)
	_, err = s.ReserveVirtual(half)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, half, oom.Size)
	release(v.ID)
	flush()
	w, err := s.ReserveVirtual(s.MaxVirtualSize())
	require.NoError(t, err, "the range released, the whole space is free")
	s.ReleaseVirtual(w.ID)
	flush()
}
