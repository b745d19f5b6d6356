package client

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// onEveryLayout runs test on the cpu device with and without sparse
// residency, under the default Virtual layout and under SubSlices.
func onEveryLayout(t *testing.T, test func(t *testing.T, c *Client)) {
	const granule = 64 << 10
	for _, cfg := range []struct {
		name   string
		device []cpu.Option
		opts   []Option
	}{
		{"virtual without sparse residency", nil, nil},
		{"virtual with sparse residency", []cpu.Option{cpu.WithSparseGranule(granule)}, nil},
		{"subslices", nil, []Option{WithLayout(memory.SubSlicesLayout())}},
		{"subslices with sparse residency", []cpu.Option{cpu.WithSparseGranule(granule)}, []Option{WithLayout(memory.SubSlicesLayout())}},
	} {
		t.Run(cfg.name, func(t *testing.T) { test(t, openOnCPU(t, cfg.device, cfg.opts...)) })
	}
}

// A nil *Buffer, what a failed Create returns, is no buffer: its methods
// refuse it as the stream's do, rather than dereferencing it.
func TestNilBufferIsNoBuffer(t *testing.T) {
	c := openOnCPU(t, nil)
	ctx := context.Background()
	b, err := c.Empty(ctx, math.MaxUint64)
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
	require.Nil(t, b)
	require.ErrorIs(t, b.Free(), vkruntime.ErrNotFound)
	_, err = b.Read(ctx)
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorIs(t, b.Write(ctx, 0, []byte{1}), vkruntime.ErrNotFound)
	require.Zero(t, b.ID())
	require.Zero(t, b.Size())
	require.Nil(t, b.Stream())
}

// A launch refused by its checks gives no buffer device memory: buffers
// made under a dry run keep their pages unmapped, and the device holds
// what it did.
func TestRefusedLaunchGivesNoBufferDeviceMemory(t *testing.T) {
	onEveryLayout(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		const n = 1 << 16
		x, err := c.Empty(dryrun.With(ctx), 4*n)
		require.NoError(t, err)
		small, err := c.Empty(dryrun.With(ctx), 4*n/2)
		require.NoError(t, err)
		stats, report := c.StorageStats(), c.MemoryReport(ctx)

		err = c.LaunchBatch(ctx, []LaunchOp{Op(kernel.ReLU(n), x, x), Op(kernel.ReLU(n), x, small)})
		require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
		require.ErrorContains(t, err, "launch 1 of a batch of 2")
		err = c.Run(ctx, kernel.ReLU(n), x, small)
		require.ErrorIs(t, err, kernel.ErrInvalidDispatch)

		require.Equal(t, stats, c.StorageStats(), "the device was asked for nothing")
		require.Equal(t, report, c.MemoryReport(ctx), "no page was mapped")
		require.NoError(t, x.Free())
		require.NoError(t, small.Free())
	})
}

// A buffer handed to a stream that did not make it is refused with a
// classified error naming both streams, also when the streams are of two
// clients whose ids overlap; nothing of either buffer changes.
func TestForeignBuffersAreRefusedAndClassified(t *testing.T) {
	onEveryLayout(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		other := openOnCPU(t, nil)
		mine, err := c.Create(ctx, []byte("mine, four words"))
		require.NoError(t, err)
		theirs, err := other.Create(ctx, []byte("theirs, 4 words!"))
		require.NoError(t, err)
		sibling, err := c.NewStream()
		require.NoError(t, err)
		s := c.DefaultStream()

		refusals := map[string]error{
			"read":   func() error { _, err := s.Read(ctx, theirs); return err }(),
			"write":  s.Write(ctx, theirs, 0, []byte("overwritten")),
			"free":   s.Free(theirs),
			"launch": s.Run(ctx, kernel.CopyWords(4), theirs, mine),
		}
		for what, err := range refusals {
			require.ErrorIs(t, err, ErrForeignBuffer, what)
			var fe *ForeignBufferError
			require.ErrorAs(t, err, &fe, what)
			require.Equal(t, ForeignBufferError{Buffer: theirs.ID(), Owner: 0, Stream: 0, OtherClient: true}, *fe, what)
			require.ErrorContains(t, err, "of another client", what)
		}
		err = sibling.Write(ctx, mine, 0, []byte("x"))
		var fe *ForeignBufferError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, ForeignBufferError{Buffer: mine.ID(), Owner: 0, Stream: sibling.ID()}, *fe)
		require.EqualError(t, err, "client: buffer 1 belongs to stream 0, not stream 1")

		got, err := mine.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, "mine, four words", string(got))
		got, err = theirs.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, "theirs, 4 words!", string(got))
	})
}

// Reads and writes outside a buffer, ranges that wrap past 2^64 among
// them, are refused with a classified error carrying the range asked, and
// neither the buffer nor its neighbour changes.
func TestOutOfRangeTransfersAreRefusedAndClassified(t *testing.T) {
	onEveryLayout(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		s := c.DefaultStream()
		b, err := c.Create(ctx, []byte("sixteen bytes..."))
		require.NoError(t, err)
		next, err := c.Create(ctx, []byte("the neighbour"))
		require.NoError(t, err)
		for _, r := range []struct{ offset, length uint64 }{
			{16, 1}, {17, 0}, {1, 16}, {math.MaxUint64, 1}, {math.MaxUint64 - 3, 8}, {1, math.MaxUint64},
		} {
			want := RangeError{Buffer: b.ID(), Offset: r.offset, Length: r.length, Size: 16}
			check := func(what string, err error) {
				t.Helper()
				require.ErrorIs(t, err, ErrOutOfRange, what)
				require.ErrorIs(t, err, vkruntime.ErrOutOfRange, what) // as a device's own refusal
				var re *RangeError
				require.ErrorAs(t, err, &re, what)
				require.Equal(t, want, *re, what)
				if r.offset > math.MaxUint64-r.length {
					require.ErrorContains(t, err, "wraps past 2^64", what)
				}
			}
			_, err := s.ReadAt(ctx, b, r.offset, r.length)
			check("ReadAt", err)
			if r.length <= 64 {
				check("Write", b.Write(ctx, r.offset, make([]byte, r.length)))
				check("ReadInto", s.ReadInto(ctx, b, r.offset, make([]byte, r.length)))
			}
		}
		got, err := b.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, "sixteen bytes...", string(got))
		got, err = next.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, "the neighbour", string(got))
	})
}
