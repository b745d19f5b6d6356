package guest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireRefused: err is the SDK's own *Error of op with status s, not the
// ENOSYS every host call answers outside a host.
func requireRefused(t *testing.T, err error, op string, s Status) {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, op, e.Op, "%v", err)
	require.Equal(t, s, e.Status, "%v", err)
	require.ErrorIs(t, err, s)
	require.NotEmpty(t, e.Message)
}

// A nil *Buffer is EBADF, as handle 0 is to the host, not a nil dereference.
func TestNilBufferIsEBADF(t *testing.T) {
	var b *Buffer
	require.Zero(t, b.Handle())
	require.Zero(t, b.Size())
	requireRefused(t, b.Free(), "buffer_free", EBADF)
	requireRefused(t, b.Write(0, []byte{1}), "buffer_write", EBADF)
	requireRefused(t, b.Read(0, make([]byte, 1)), "buffer_read", EBADF)
	requireRefused(t, b.WriteFloat32s(0, []float32{1}), "buffer_write", EBADF)
	_, err := b.Float32s()
	requireRefused(t, err, "buffer_read", EBADF)
}

// 4*at wrapped: element 2^62 was written at byte 0.
func TestWriteFloat32sRefusesAWrappingOffset(t *testing.T) {
	b := BufferOf(1, 16)
	for _, at := range []uint64{1 << 62, 1<<62 + 1, 1<<64 - 1} {
		requireRefused(t, b.WriteFloat32s(at, []float32{1}), "buffer_write", ERANGE)
	}
	// The largest index that does not wrap goes to the host.
	require.ErrorIs(t, b.WriteFloat32s(1<<62-1, []float32{1}), ENOSYS)
}

// Float32s of a buffer that is not whole float32s dropped its tail; of one
// past what a read moves, make panicked.
func TestFloat32sRefusesWhatItCannotRead(t *testing.T) {
	for _, size := range []uint64{6, 1<<32 + 4, 1 << 62, 1<<64 - 4} {
		_, err := BufferOf(1, size).Float32s()
		requireRefused(t, err, "buffer_read", EINVAL)
	}
	_, err := BufferOf(1, 8).Float32s()
	require.ErrorIs(t, err, ENOSYS)
}

// A batch the SDK refuses is an *Error like the host's refusal, and
// AppendDescriptor leaves dst as it was.
func TestRefusedBatchesAreErrors(t *testing.T) {
	b := BufferOf(1, 16)
	requireRefused(t, Run(), "launch", EINVAL)
	requireRefused(t, Run(Launch{Kernel: "fill", Push: []byte{1}}), "launch", EINVAL)
	requireRefused(t, Add(4, b, nil, b).Run(), "launch", EBADF)

	dst := []byte("kept")
	got, err := AppendDescriptor(dst, Fill(4, 7, b), Launch{})
	requireRefused(t, err, "launch", EINVAL)
	require.Equal(t, "kept", string(got))
	require.False(t, errors.Is(err, EBADF))
}
