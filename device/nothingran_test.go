package device

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// A Dispatch error marked as one before any op ran keeps its message and
// its kinds, typed ones included, and matches ErrNothingRan; nil stays nil.
func TestNothingRanMarksAnErrorAndKeepsIt(t *testing.T) {
	require.NoError(t, NothingRan(nil))
	oom := &vkruntime.OutOfMemoryError{Size: 64, Limit: 32}
	err := NothingRan(oom)
	require.Equal(t, oom.Error(), err.Error())
	require.ErrorIs(t, err, ErrNothingRan)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var got *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &got)
	require.Same(t, oom, got)
	require.NotErrorIs(t, oom, ErrNothingRan)
	require.NotErrorIs(t, errors.New("other"), ErrNothingRan)
}
