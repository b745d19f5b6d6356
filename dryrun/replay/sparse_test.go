package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// The model's ranges share three fourths of the H200's 1 TiB sparse
// address space with its allocations, counted at three times their bytes
// as the H200's driver maps them; allocations stop at thirteen sixteenths.
// Without sparse residency allocations take none of it.
func TestTheModelCountsAllocationsInTheAddressSpace(t *testing.T) {
	s := replay.NewCountingStorage(0)
	s.Granule = replay.H200Granule
	const gib = 1 << 30
	space := s.MaxVirtualSize()
	require.Equal(t, uint64(768*gib), space)
	_, err := s.Alloc(100 * gib)
	require.NoError(t, err)
	require.Equal(t, space-300*gib, s.VirtualSpaceLeft())
	_, err = s.ReserveVirtual(space - 300*gib + 1)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	_, err = s.ReserveVirtual(space - 300*gib)
	require.NoError(t, err)
	require.Zero(t, s.VirtualSpaceLeft())
	// 768 GiB taken of the 832 GiB allocations may reach: 21⅓ GiB more.
	_, err = s.Alloc(22 * gib)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.ErrorContains(t, err, "the driver's address space")
	_, err = s.Alloc(21 * gib)
	require.NoError(t, err)

	plain := replay.NewCountingStorage(0)
	_, err = plain.Alloc(1 << 40)
	require.NoError(t, err, "no sparse residency, no address space counted")
}
