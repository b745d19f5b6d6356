package client

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

func TestBuffersRoundTrip(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	data := []byte("vkrt buffers hold what they were given, byte for byte")
	b, err := c.Create(ctx, data)
	require.NoError(t, err)
	require.Equal(t, uint64(len(data)), b.Size())
	require.Equal(t, c.DefaultStream(), b.Stream())
	got, err := b.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, data, got)

	require.NoError(t, b.Write(ctx, 5, []byte("BUFFERS")))
	got, err = b.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, "vkrt BUFFERS hold", string(got[:17]))
	part, err := c.DefaultStream().ReadAt(ctx, b, 5, 7)
	require.NoError(t, err)
	require.Equal(t, "BUFFERS", string(part))

	err = b.Write(ctx, uint64(len(data))-2, []byte("xyz"))
	require.ErrorContains(t, err, "range [")
	got, err = b.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, "yte", string(got[len(got)-3:]), "a refused write changes nothing")

	require.NoError(t, b.Free())
	_, err = b.Read(ctx)
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorIs(t, b.Free(), vkruntime.ErrNotFound)
}

func TestBuffersAreZeroInitialised(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	// Fill slices with a pattern, free them, and take the same sizes again:
	// the pools hand the same memory back, and it must read as zeros.
	const size = 4096
	pattern := make([]byte, size)
	for i := range pattern {
		pattern[i] = byte(i*7 + 1)
	}
	var bufs []*Buffer
	for range 4 {
		b, err := c.Create(ctx, pattern)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		require.NoError(t, b.Free())
	}
	for range 4 {
		b, err := c.Empty(ctx, size)
		require.NoError(t, err)
		got, err := b.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, make([]byte, size), got)
		require.NoError(t, b.Free())
	}
	// A kernel reading fresh buffers over reused memory sees zeros too.
	x, err := c.Empty(ctx, size)
	require.NoError(t, err)
	y, err := c.Empty(ctx, size)
	require.NoError(t, err)
	out, err := c.Create(ctx, pattern)
	require.NoError(t, err)
	require.NoError(t, c.Run(ctx, kernel.Add(size/4), x, y, out))
	got, err := out.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, make([]byte, size), got)
	for _, b := range []*Buffer{x, y, out} {
		require.NoError(t, b.Free())
	}

	// A partial first write leaves the rest zero.
	b, err := c.Empty(ctx, 16)
	require.NoError(t, err)
	require.NoError(t, b.Write(ctx, 4, []byte{1, 2}))
	got, err = b.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, got)
}

func TestLaunch(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	const n = 1000
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i)*0.5, float32(n-i)
	}
	ba, err := c.Create(ctx, cpuref.Bytes(a))
	require.NoError(t, err)
	bb, err := c.Create(ctx, cpuref.Bytes(b))
	require.NoError(t, err)
	out, err := c.Empty(ctx, 4*n)
	require.NoError(t, err)
	require.NoError(t, c.Run(ctx, kernel.Add(n), ba, bb, out))
	raw, err := out.Read(ctx)
	require.NoError(t, err)
	for i, v := range cpuref.Floats(raw) {
		require.Equal(t, a[i]+b[i], v, "element %d", i)
	}

	// A launch that does not fit its bindings is refused and changes nothing.
	small, err := c.Empty(ctx, 4*n/2)
	require.NoError(t, err)
	err = c.Run(ctx, kernel.Add(n), ba, bb, small)
	require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
	raw, err = small.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4*n/2), raw)

	// Buffers of another stream cannot be bound.
	other, err := c.NewStream()
	require.NoError(t, err)
	foreign, err := other.Empty(ctx, 4*n)
	require.NoError(t, err)
	err = c.Run(ctx, kernel.Add(n), ba, bb, foreign)
	require.ErrorContains(t, err, "belongs to stream 1, not stream 0")
	require.NoError(t, other.Close())
	_, err = other.Empty(ctx, 4)
	require.ErrorIs(t, err, ErrClosed)
}

func TestLaunchBatch(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	const n = 3000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%17) - 8
	}
	bx, err := c.Create(ctx, cpuref.Bytes(x))
	require.NoError(t, err)
	sum, err := c.Empty(ctx, 4*n)
	require.NoError(t, err)
	scaled, err := c.Empty(ctx, 4*n)
	require.NoError(t, err)
	out, err := c.Empty(ctx, 4*n)
	require.NoError(t, err)

	// relu(2.5 * (x + x)), each launch reading the one before it.
	chain := []LaunchOp{Op(kernel.Add(n), bx, bx, sum), Op(kernel.Scale(n, 2.5), sum, scaled), Op(kernel.ReLU(n), scaled, out)}
	require.NoError(t, c.LaunchBatch(dryrun.With(ctx), chain))
	raw, err := out.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4*n), raw, "a dry batch runs nothing")

	require.NoError(t, c.LaunchBatch(ctx, chain))
	raw, err = out.Read(ctx)
	require.NoError(t, err)
	for i, v := range cpuref.Floats(raw) {
		require.Equal(t, max(2.5*(x[i]+x[i]), 0), v, "element %d", i)
	}

	// One bad launch refuses the whole batch, dry or not, before anything runs.
	fresh, err := c.Empty(ctx, 4*n)
	require.NoError(t, err)
	bad := []LaunchOp{Op(kernel.Add(n), bx, bx, fresh), Op(kernel.ReLU(2*n), fresh, out)}
	for _, run := range []context.Context{dryrun.With(ctx), ctx} {
		err = c.LaunchBatch(run, bad)
		require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
		require.ErrorContains(t, err, "launch 1 of a batch of 2")
	}
	raw, err = fresh.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4*n), raw)
}

// A Buffer value copied and freed frees the buffer itself: neither the copy
// nor the original reaches the memory the pools hand the next buffer, and
// neither frees it twice.
func TestCopiedBufferNeverReachesAnotherBuffersMemory(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	a, err := c.Create(ctx, []byte("the first buffer's bytes"))
	require.NoError(t, err)
	cp := *a
	require.NoError(t, cp.Free())

	nines := make([]byte, a.Size())
	for i := range nines {
		nines[i] = 9
	}
	nb, err := c.Create(ctx, nines)
	require.NoError(t, err)

	_, err = a.Read(ctx)
	require.ErrorIs(t, err, vkruntime.ErrNotFound, "the original is freed with its copy")
	require.ErrorIs(t, a.Write(ctx, 0, []byte{1}), vkruntime.ErrNotFound)
	_, err = cp.Read(ctx)
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorIs(t, a.Free(), vkruntime.ErrNotFound, "no second free into the new buffer's slot")
	require.ErrorIs(t, c.Run(ctx, kernel.ReLU(uint32(a.Size()/4)), a, nb), vkruntime.ErrNotFound)

	got, err := nb.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, nines, got, "the new buffer kept its bytes")
	require.NoError(t, nb.Free())

	var zero Buffer
	_, err = zero.Read(ctx)
	require.ErrorIs(t, err, vkruntime.ErrNotFound, "a zero Buffer is no buffer")
	require.ErrorIs(t, zero.Free(), vkruntime.ErrNotFound)
	require.ErrorIs(t, c.Run(ctx, kernel.ReLU(0), &zero, nb), vkruntime.ErrNotFound)
}
