package guest

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The example of wasmhost/ABI.md, byte for byte.
func TestDescriptorOfTheABIExample(t *testing.T) {
	d, err := AppendDescriptor(nil, Fill(4, 7, BufferOf(0x00100001, 16)))
	require.NoError(t, err)
	want := strings.Join(strings.Fields(`
		01 00 00 00  01 00 00 00
		04 00 08 00  01 00 00 00
		01 00 00 00  01 00 00 00  01 00 00 00
		66 69 6c 6c
		04 00 00 00  07 00 00 00
		01 00 10 00`), "")
	require.Equal(t, want, hex.EncodeToString(d))
}

func TestAppendDescriptorRefusesWhatTheHostWould(t *testing.T) {
	b := BufferOf(1, 16)
	for name, launches := range map[string][]Launch{
		"no launches":          nil,
		"257 launches":         make([]Launch, 257),
		"no kernel name":       {{Buffers: []*Buffer{b}}},
		"a 65 B kernel name":   {{Kernel: strings.Repeat("k", 65)}},
		"3 B of push":          {{Kernel: "fill", Push: []byte{1, 2, 3}}},
		"132 B of push":        {{Kernel: "fill", Push: make([]byte, 132)}},
		"17 bindings":          {{Kernel: "fill", Buffers: make([]*Buffer, 17)}},
		"a nil binding":        {Add(4, b, nil, b)},
		"a good then bad one":  {Add(4, b, b, b), {Kernel: ""}},
		"a name of 64 B is ok": nil,
	} {
		if launches == nil && name == "a name of 64 B is ok" {
			_, err := AppendDescriptor(nil, Launch{Kernel: strings.Repeat("k", 64)})
			require.NoError(t, err)
			continue
		}
		_, err := AppendDescriptor(nil, launches...)
		require.Error(t, err, name)
		require.True(t, errors.Is(err, EINVAL) || errors.Is(err, EBADF), "%s: %v", name, err)
	}
	// A malformed launch after a nil binding is EINVAL, as the host reads
	// the whole descriptor before any handle.
	_, err := AppendDescriptor(nil, Add(4, b, nil, b), Launch{Kernel: "fill", Push: []byte{1, 2}})
	require.ErrorIs(t, err, EINVAL)
	require.ErrorContains(t, err, "launch 1 (fill): 2 B of push constants")
	_, err = AppendDescriptor(nil, Add(4, b, nil, b), Add(4, b, b, nil))
	require.ErrorIs(t, err, EBADF)
	require.ErrorContains(t, err, "launch 0 (add): binding 1 is a nil *Buffer")
}

func TestErrorsMatchTheirStatus(t *testing.T) {
	err := error(&Error{Op: "buffer_free", Status: EBADF, Message: "buffer_free: handle 0x7 names no live buffer"})
	require.ErrorIs(t, err, EBADF)
	require.NotErrorIs(t, err, EINVAL)
	require.Equal(t, "vkrt: EBADF: buffer_free: handle 0x7 names no live buffer", err.Error())
	require.Equal(t, "vkrt: sync: EIO", (&Error{Op: "sync", Status: EIO}).Error())
	// A message that names no function gets the function's name.
	busy := &Error{Op: "memory_install", Status: EBUSY, Message: "64 B still live in the pools, in 4 reservations"}
	require.Equal(t, "vkrt: EBUSY: memory_install: 64 B still live in the pools, in 4 reservations", busy.Error())
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, Status(8), e.Status)
	require.Equal(t, "status 99", Status(99).String())
}

// Outside a host every call answers ENOSYS, as an error, never a panic.
func TestOutsideAHost(t *testing.T) {
	_, err := NewBuffer(16)
	require.ErrorIs(t, err, ENOSYS)
	require.ErrorIs(t, BufferOf(1, 16).Write(0, []byte{1}), ENOSYS)
	require.ErrorIs(t, Add(1, BufferOf(1, 4), BufferOf(1, 4), BufferOf(1, 4)).Run(), ENOSYS)
	require.ErrorIs(t, Sync(), ENOSYS)
	_, err = Report()
	require.ErrorIs(t, err, ENOSYS)
	require.False(t, DryRun())
	require.Empty(t, LastError())
}
