package saturate

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAddAndMulStopAtTheTop(t *testing.T) {
	require.Equal(t, uint64(5), Add(2, 3))
	require.Equal(t, uint64(math.MaxUint64), Add(math.MaxUint64-1, 1))
	require.Equal(t, uint64(math.MaxUint64), Add(math.MaxUint64-1, 2))
	require.Equal(t, uint64(6), Mul(2, 3))
	require.Equal(t, uint64(1<<63), Mul(1<<62, 2))
	require.Equal(t, uint64(math.MaxUint64), Mul(1<<62, 4))
}
