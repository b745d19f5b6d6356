package runtime

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCapacityErrorClassifies(t *testing.T) {
	var err error = fmt.Errorf("reserve: %w", &CapacityError{Size: 100, Capacity: 64, InUse: 32})
	require.ErrorIs(t, err, ErrPoolCapacityExceeded)
	require.NotErrorIs(t, err, ErrBufferTooBig)
	var ce *CapacityError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, uint64(100), ce.Size)
	require.Contains(t, err.Error(), "asked 100 B, capacity 64 B with 32 B in use (32 B free)")
}

func TestOutOfMemoryErrorClassifies(t *testing.T) {
	var err error = &OutOfMemoryError{Size: 1 << 30, HeapSize: 2 << 30, Limit: 1 << 29}
	require.ErrorIs(t, err, ErrOutOfDeviceMemory)
	require.True(t, errors.Is(err, ErrOutOfDeviceMemory))
	require.Equal(t, "vkrt: out of device memory: asked 1073741824 B, heap 2147483648 B, limit 536870912 B", err.Error())
}

func TestDevicePropertiesValidate(t *testing.T) {
	require.NoError(t, DeviceProperties{Alignment: 16, MaxPageSize: 1 << 20}.Validate())
	require.Error(t, DeviceProperties{Alignment: 12, MaxPageSize: 1 << 20}.Validate())
	require.Error(t, DeviceProperties{Alignment: 16}.Validate())
	require.Error(t, DeviceProperties{Alignment: 16, MaxPageSize: 100}.Validate())
}

// A closed device is a kind of its own: neither lost nor missing a handle,
// and classified however many layers wrap it.
func TestErrClosedIsItsOwnKind(t *testing.T) {
	err := fmt.Errorf("client: %w", fmt.Errorf("backend: device 0: %w", ErrClosed))
	require.ErrorIs(t, err, ErrClosed)
	for _, other := range []error{ErrNotFound, ErrBufferTooBig, ErrPoolCapacityExceeded, ErrOutOfDeviceMemory, ErrDeviceLost, ErrOverlappingBinds} {
		require.NotErrorIs(t, err, other)
		require.NotErrorIs(t, other, ErrClosed)
	}
}

// Arguments wrong in themselves and what a device lacks are kinds of their
// own, told from every other and from each other.
func TestInvalidArgumentAndUnsupportedAreTheirOwnKinds(t *testing.T) {
	kinds := []error{ErrNotFound, ErrBufferTooBig, ErrPoolCapacityExceeded, ErrOutOfDeviceMemory, ErrDeviceLost, ErrClosed, ErrOverlappingBinds, ErrOutOfRange, ErrZeroSize, ErrInvalidArgument, ErrUnsupported}
	for i, a := range kinds {
		for j, b := range kinds {
			require.Equal(t, i == j, errors.Is(fmt.Errorf("device: %w", a), b), "%v against %v", a, b)
		}
	}
}
