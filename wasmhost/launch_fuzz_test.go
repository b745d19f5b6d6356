package wasmhost

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/wasmhost/guest"
)

// FuzzLaunchDescriptor feeds the descriptor parser arbitrary bytes, as a
// guest holding three buffers: it never panics, refuses with EINVAL or
// EBADF only, and what it accepts encodes back to the same bytes.
func FuzzLaunchDescriptor(f *testing.F) {
	a, b, c := guest.BufferOf(firstHandle, 64), guest.BufferOf(secondHandle, 64), guest.BufferOf(1<<indexBits|3, 64)
	for _, ls := range [][]guest.Launch{
		{guest.Fill(4, 7, a)},
		{guest.Add(16, a, b, c), guest.MatMul(2, 2, 2, a, b, c), guest.Softmax(4, 4, c, a)},
		{guest.LayerNorm(2, 8, 1e-5, a, b, b, c)},
		{{Kernel: "transpose", Grid: [3]uint32{1, 1, 1}}},
	} {
		d, err := guest.AppendDescriptor(nil, ls...)
		require.NoError(f, err)
		f.Add(d)
		f.Add(d[:len(d)-1])
		f.Add(append(d, 0))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255})

	table := newKernelTable()
	f.Fuzz(func(t *testing.T, d []byte) {
		g := &instance{}
		bufs := map[*client.Buffer]uint32{}
		for range 3 {
			buf := &client.Buffer{}
			bufs[buf] = g.add(buf)
		}
		ops, _, err := table.parse(d, g)
		if err != nil {
			var se *StatusError
			require.True(t, errors.As(err, &se), "%v", err)
			require.Contains(t, []Errno{EINVAL, EBADF}, se.Status)
			return
		}
		launches := make([]guest.Launch, len(ops))
		for i, op := range ops {
			l := guest.Launch{Kernel: op.Kernel.Name, Grid: op.Grid, Push: op.Push}
			for _, buf := range op.Buffers {
				l.Buffers = append(l.Buffers, guest.BufferOf(bufs[buf], 64))
			}
			launches[i] = l
		}
		again, err := guest.AppendDescriptor(nil, launches...)
		require.NoError(t, err)
		require.Equal(t, d, again)
	})
}
