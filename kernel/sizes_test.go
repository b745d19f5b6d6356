package kernel

import (
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// BindingSizes is what Validate requires of each binding: a launch whose
// bindings hold exactly that passes, and one short by a word is refused.
func TestBindingSizesAreWhatValidateRequires(t *testing.T) {
	partial := ReduceSum(1000)
	partial.Grid = [3]uint32{3, 2, 1}
	for _, c := range []struct {
		l    Launch
		want []uint64
	}{
		{Add(100), []uint64{400, 400, 400}},
		{FillWords(7, 1), []uint64{28}},
		{Softmax(3, 5), []uint64{60, 60}},
		{Softmax(3, 0), []uint64{0, 0}},
		{LayerNorm(3, 5, 1e-5), []uint64{60, 20, 20, 60}},
		{partial, []uint64{4000, 24}},
		{MatMul(2, 3, 4), []uint64{32, 48, 24}},
		{Transpose(3, 5), []uint64{60, 60}},
	} {
		name := c.l.Kernel.Name
		sizes := BindingSizes(c.l.Kernel, c.l.Grid, c.l.Push)
		require.Equal(t, c.want, sizes, name)
		hs := make([]vkruntime.StorageHandle, len(sizes))
		for i, n := range sizes {
			hs[i] = vkruntime.StorageHandle{ID: vkruntime.StorageID(i + 1), Size: n}
		}
		require.NoError(t, Validate(c.l.Kernel, c.l.Grid, hs, c.l.Push, testLimits), name)
		for i, n := range sizes {
			if n == 0 {
				continue
			}
			short := append([]vkruntime.StorageHandle(nil), hs...)
			short[i].Size = n - 4
			require.ErrorIs(t, Validate(c.l.Kernel, c.l.Grid, short, c.l.Push, testLimits), ErrInvalidDispatch, "%s binding %d", name, i)
		}
	}
	require.Nil(t, BindingSizes(Kernel{Name: "mine"}, [3]uint32{1, 1, 1}, nil))
	require.Nil(t, BindingSizes(Add(1).Kernel, [3]uint32{1, 1, 1}, nil), "push constants short of the kernel's")
}
