package client

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
)

// reluInput is n floats, negative and positive, for a ReLU.
func reluInput(n int) []float32 {
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i) - 100
	}
	return in
}

func TestDryRunHoldsNoDeviceMemory(t *testing.T) {
	c := openClient(t)
	storage := c.Device().Storage()
	require.Zero(t, storage.Allocated(), "a fresh client holds no pages")
	dry := dryrun.With(context.Background())

	const n = 4096
	in := reluInput(n)
	x, err := c.Create(dry, cpuref.Bytes(in))
	require.NoError(t, err)
	y, err := c.Empty(dry, 4*n)
	require.NoError(t, err)
	require.NoError(t, c.Run(dry, kernel.ReLU(n), x, y))
	require.NoError(t, y.Write(dry, 0, cpuref.Bytes(in[:10])))
	got, err := y.Read(dry)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4*n), got, "reads under a dry run are zeros")

	// Launches are validated: a binding too small for the push constants is
	// refused under a dry run as it would be for real.
	short, err := c.Empty(dry, 4*n/4)
	require.NoError(t, err)
	require.ErrorIs(t, c.Run(dry, kernel.ReLU(n), x, short), kernel.ErrInvalidDispatch)
	require.ErrorIs(t, c.Run(dry, kernel.ReLU(n), x), kernel.ErrInvalidDispatch)

	require.Zero(t, storage.Allocated(), "nothing under a dry run touches device memory")
	require.Zero(t, storage.Allocations())
	rep := c.MemoryReport(dry)
	var pages, unmapped uint64
	for _, p := range rep.Dynamic {
		pages += p.Pages
		unmapped += p.PagesUnmapped
	}
	require.Positive(t, pages)
	require.Equal(t, pages, unmapped)
	require.Equal(t, uint64(3), rep.Usage().NumberAllocs)
	require.Equal(t, uint64(4*n+4*n+4*n/4), rep.Usage().BytesInUse)

	// A real-run scope executes and gives memory to what it uses.
	realCtx := dryrun.RealRun(dry)
	require.NoError(t, x.Write(realCtx, 0, cpuref.Bytes(in)))
	require.NoError(t, c.Run(realCtx, kernel.ReLU(n), x, y))
	got, err = y.Read(realCtx)
	require.NoError(t, err)
	for i, v := range cpuref.Floats(got) {
		require.Equal(t, max(in[i], 0), v, "element %d", i)
	}
	require.Positive(t, storage.Allocated())
	got, err = short.Read(realCtx)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4*n/4), got)

	for _, b := range []*Buffer{x, y, short} {
		require.NoError(t, b.Free())
	}
	c.MemoryCleanup(dry)
	require.Zero(t, storage.Allocated(), "cleanup returns every page")
}

// Under the Virtual layout on a device with sparse residency, a dry run
// counts the chunks its real run would hold while holding none, and a
// real-run scope allocates and binds only the chunks under the buffers it
// uses: a buffer it never touches stays unmapped, and freeing it reaches
// no driver.
func TestVirtualDryRunMaterialisesOnlyWhatARealRunScopeUses(t *testing.T) {
	const granule = 64 << 10
	d, err := cpu.New(cpu.WithSparseGranule(granule))
	require.NoError(t, err)
	c, err := Open(context.Background(), WithBackend(d), WithLayout(memory.VirtualLayout(memory.VirtualPlan{})))
	require.NoError(t, err)
	defer c.Close()
	dry := dryrun.With(context.Background())

	const n = granule / 4 // one granule of floats
	in := reluInput(n)
	x, err := c.Create(dry, cpuref.Bytes(in))
	require.NoError(t, err)
	pool := func() memory.PoolReport { return c.MemoryReport(dry).Dynamic[0] }
	_, virtual := pool().Kind.(memory.VirtualKind)
	require.True(t, virtual)
	// The pool's first chunk: its unit of growth, which y shares with x.
	chunk := pool().Usage.BytesReserved
	require.GreaterOrEqual(t, chunk, uint64(2*granule))
	y, err := c.Empty(dry, 4*n)
	require.NoError(t, err)
	require.Equal(t, chunk, pool().Usage.BytesReserved, "y fits in x's chunk")
	// A buffer larger than the chunk gets a chunk of its own.
	unused, err := c.Empty(dry, chunk+granule)
	require.NoError(t, err)
	reserved := pool().Usage.BytesReserved
	require.Greater(t, reserved, chunk, "the dry run counts the chunks its real run would hold")
	require.Equal(t, uint64(2), pool().Pages)
	require.Equal(t, pool().Pages, pool().PagesUnmapped)
	require.Equal(t, StorageStats{}, c.StorageStats(), "the dry run reached no driver")

	realCtx := dryrun.RealRun(dry)
	require.NoError(t, x.Write(realCtx, 0, cpuref.Bytes(in)))
	require.NoError(t, c.Run(realCtx, kernel.ReLU(n), x, y))
	got, err := y.Read(realCtx)
	require.NoError(t, err)
	for i, v := range cpuref.Floats(got) {
		require.Equal(t, max(in[i], 0), v, "element %d", i)
	}
	stats := c.StorageStats()
	require.Equal(t, uint64(1), stats.Allocs, "the chunk under x and y, not the one under the unused buffer")
	require.Equal(t, chunk, stats.Bytes)
	require.Equal(t, uint64(1), pool().PagesUnmapped)
	require.Equal(t, reserved, pool().Usage.BytesReserved, "materialising changes no count")

	require.NoError(t, unused.Free())
	c.MemoryCleanup(dry)
	require.Equal(t, stats.Allocs, c.StorageStats().Allocs)
	require.Equal(t, stats.BindCalls, c.StorageStats().BindCalls, "the unused buffer's free and cleanup reach no driver")
	require.Zero(t, c.StorageStats().Deallocs)
	require.NoError(t, x.Free())
	require.NoError(t, y.Free())
	c.MemoryCleanup(dry)
	require.Equal(t, stats.Allocs, c.StorageStats().Deallocs, "cleanup returns every chunk")
	require.Zero(t, pool().Pages)
}

// Back gives a buffer made in a dry run its device memory at once, as its
// first use would, and it reads zeros; a buffer already backed, or of no
// bytes, is left alone, and another stream's is refused.
func TestBackGivesADryRunBufferItsMemory(t *testing.T) {
	ctx := context.Background()
	c := openOnCPU(t, nil)
	b, err := c.Empty(dryrun.With(ctx), 3<<20)
	require.NoError(t, err)
	held := c.Device().Storage().Allocated()
	s := c.DefaultStream()
	require.NoError(t, s.Back(ctx, b))
	require.Greater(t, c.Device().Storage().Allocated(), held, "the device holds the buffer's page")
	after := c.Device().Storage().Allocated()
	require.NoError(t, s.Back(ctx, b))
	require.Equal(t, after, c.Device().Storage().Allocated())
	got, err := b.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 3<<20), got)
	empty, err := c.Empty(dryrun.With(ctx), 0)
	require.NoError(t, err)
	require.NoError(t, s.Back(ctx, empty))
	other, err := c.NewStream()
	require.NoError(t, err)
	require.ErrorIs(t, other.Back(ctx, b), ErrForeignBuffer)
}
