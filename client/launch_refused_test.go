package client

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/kernel"
)

// A launch binding one buffer where the kernel may not alias it
// (transpose in place) is refused before any buffer gets device memory,
// and a dry run refuses it as the real run does: the overlap was checked
// only once the buffers held memory, so a dry-run buffer got 2 MiB of
// device memory for a refused launch, and the dry run (and a plan
// measured from it) passed a launch its real run refused.
func TestAnAliasedLaunchIsRefusedBeforeItGivesMemory(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	x, err := c.Empty(dryrun.With(ctx), 4096) // lazy: no device memory
	require.NoError(t, err)
	before, report := c.StorageStats(), c.MemoryReport(ctx).Dynamic
	require.ErrorIs(t, c.Run(dryrun.With(ctx), kernel.Transpose(32, 32), x, x), kernel.ErrInvalidDispatch, "the dry run refuses it")
	require.ErrorIs(t, c.Run(ctx, kernel.Transpose(32, 32), x, x), kernel.ErrInvalidDispatch)
	require.Equal(t, before, c.StorageStats(), "a refused launch gave a dry-run buffer device memory")
	require.Equal(t, report, c.MemoryReport(ctx).Dynamic, "a refused launch changed the pools")

	y, err := c.Empty(dryrun.With(ctx), 4096)
	require.NoError(t, err)
	require.NoError(t, c.Run(dryrun.With(ctx), kernel.Transpose(32, 32), x, y), "two buffers do not alias")
	require.NoError(t, c.Run(ctx, kernel.Transpose(32, 32), x, y))
}

// A launch the device refuses memory for tells the size of the buffer it
// could not back: it told the sum of every binding's, buffers holding
// memory already included.
func TestARefusedLaunchTellsTheBufferItCouldNotBack(t *testing.T) {
	c := openClient(t, WithMemoryLimit(3<<20))
	ctx := context.Background()
	const size = 1800 << 10
	src, err := c.Empty(ctx, size)
	require.NoError(t, err)
	require.NoError(t, src.Write(ctx, 0, []byte{1})) // src holds memory now
	dst, err := c.Empty(dryrun.With(ctx), size)      // dst holds none
	require.NoError(t, err)
	err = c.Run(ctx, kernel.CopyWords(size/4), src, dst)
	var ae *AllocationError
	require.ErrorAs(t, err, &ae)
	require.EqualValues(t, size, ae.Size, "%v", err)
}
