package wasmhost

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/api"

	"github.com/vkrt/vkrt/client"
)

// fakeModule is a guest module for calling host functions directly: its
// memory is mem, or none when mem is nil. Only what the host functions use
// is implemented; anything else panics.
type fakeModule struct {
	api.Module
	mem *fakeMemory
}

// Memory is what wazero gives for a module without memory too: a non-nil
// api.Memory holding a nil pointer.
func (m fakeModule) Memory() api.Memory { return m.mem }

type fakeMemory struct {
	api.Memory
	b []byte
}

func (m *fakeMemory) Size() uint32 { return uint32(len(m.b)) }

func (m *fakeMemory) Read(offset, n uint32) ([]byte, bool) {
	if uint64(offset)+uint64(n) > uint64(len(m.b)) {
		return nil, false
	}
	return m.b[offset : offset+n : offset+n], true
}

func (m *fakeMemory) WriteUint32Le(offset, v uint32) bool {
	b, ok := m.Read(offset, 4)
	if ok {
		binary.LittleEndian.PutUint32(b, v)
	}
	return ok
}

// call calls the host function name directly with params.
func call(ctx context.Context, mod api.Module, name string, params ...uint64) Errno {
	stack := make([]uint64, max(len(params), 1))
	copy(stack, params)
	goFunc(abiByName[name])(ctx, mod, stack)
	return Errno(stack[0])
}

// TestHostFunctionsCalledDirectly calls the host functions the way wazero
// would, with modules no real guest could be: none behind the call, one
// without memory, one with 64 bytes of it.
func TestHostFunctionsCalledDirectly(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)

	for _, f := range abi {
		params := make([]uint64, len(f.params))
		require.Equal(t, ENOSYS, call(context.Background(), fakeModule{mem: &fakeMemory{b: make([]byte, 64)}}, f.name, params...),
			"%s with no guest behind the call", f.name)
	}

	s, err := c.NewStream()
	require.NoError(t, err)
	defer s.Close()
	guestOn := func() (*instance, context.Context) {
		g := newInstance(h, context.Background(), s, runConfig{})
		t.Cleanup(func() { require.NoError(t, g.release()) })
		return g, context.WithValue(context.Background(), instanceKey{}, g)
	}

	_, ctx := guestOn()
	noMemory := fakeModule{}
	require.Equal(t, EFAULT, call(ctx, noMemory, "buffer_create", 16, 0), "no memory to write the handle to")
	require.Equal(t, EFAULT, call(ctx, noMemory, "is_dry_run", 0))
	require.Equal(t, EFAULT, call(ctx, noMemory, "last_error", 0, 0, 0))
	require.Equal(t, EBADF, call(ctx, noMemory, "buffer_write", 1, 0, 0, 0), "an empty range at 0 is inside even no memory")
	require.Equal(t, ESUCCESS, call(ctx, noMemory, "sync"))

	g, ctx := guestOn()
	mem := &fakeMemory{b: make([]byte, 64)}
	small := fakeModule{mem: mem}
	require.Equal(t, ESUCCESS, call(ctx, small, "buffer_create", 32, 60))
	handle := binary.LittleEndian.Uint32(mem.b[60:])
	require.Equal(t, uint32(firstHandle), handle)
	require.Equal(t, EFAULT, call(ctx, small, "buffer_create", 32, 61))
	require.Equal(t, EFAULT, call(ctx, small, "buffer_write", uint64(handle), 0, 1<<32-8, 16), "a range wrapping past 2^32")
	copy(mem.b, "0123456789abcdefghijklmnopqrstuv")
	require.Equal(t, ESUCCESS, call(ctx, small, "buffer_write", uint64(handle), 0, 0, 32))
	clear(mem.b[:32])
	require.Equal(t, ESUCCESS, call(ctx, small, "buffer_read", uint64(handle), 16, 8, 16))
	require.Equal(t, "ghijklmnopqrstuv", string(mem.b[8:24]))
	require.Equal(t, ERANGE, call(ctx, small, "last_error", 0, 0, 60), "last_error into no room for the last message")
	require.Equal(t, ERANGE, call(ctx, small, "buffer_read", uint64(handle), 17, 0, 16))
	require.Equal(t, ERANGE, call(ctx, small, "last_error", 0, 4, 60))
	need := binary.LittleEndian.Uint32(mem.b[60:])
	require.Greater(t, need, uint32(4), "the needed length is written even when the buffer is too small")
	require.Equal(t, ESUCCESS, call(ctx, small, "buffer_free", uint64(handle)))
	require.Equal(t, EBADF, call(ctx, small, "buffer_free", uint64(handle)))
	require.Equal(t, uint64(6), g.failedCalls, "every call that returned a status other than ESUCCESS, last_error's own two too")
}

// last_error and memory_report refuse an out_len that lies inside buf,
// with EINVAL, writing nothing: the length went in and then the bytes
// over it (or the other way round), so the guest read a length made of
// its message. Ranges that only touch are apart.
func TestOutLenOverlappingBufIsRefused(t *testing.T) {
	dg := newDirectGuest(t)
	ctx, mem, mod := dg.ctx, dg.mem, dg.mod

	require.Equal(t, EBADF, call(ctx, mod, "buffer_free", 99), "a last error to read")
	for _, fn := range []string{"last_error", "memory_report"} {
		for _, c := range []struct{ buf, n, out uint64 }{
			{0, 4096, 0}, {0, 4096, 4092}, {4, 4096, 2}, {4, 4096, 1}, {100, 1, 97}, {100, 1, 100},
		} {
			fill := bytes.Repeat([]byte{0xa5}, len(mem.b))
			copy(mem.b, fill)
			require.Equal(t, EINVAL, call(ctx, mod, fn, c.buf, c.n, c.out), "%s buf [%d, +%d) out_len %d", fn, c.buf, c.n, c.out)
			require.Equal(t, fill, mem.b, "%s: nothing is written", fn)
		}
		for _, c := range []struct{ buf, n, out uint64 }{
			{0, 4096, 4096}, {4, 4096, 0}, {100, 0, 100}, {4100, 4000, 4096},
		} {
			// An empty buf overlaps nothing: ERANGE, the length needed.
			want := ESUCCESS
			if c.n == 0 {
				want = ERANGE
			}
			require.Equal(t, want, call(ctx, mod, fn, c.buf, c.n, c.out), "%s buf [%d, +%d) out_len %d", fn, c.buf, c.n, c.out)
		}
	}
	// last_error's refusal leaves the message it reports in place;
	// memory_report's is the last error.
	require.Equal(t, EBADF, call(ctx, mod, "buffer_free", 99))
	require.Equal(t, EINVAL, call(ctx, mod, "last_error", 0, 4096, 0))
	require.Equal(t, ESUCCESS, call(ctx, mod, "last_error", 0, 4096, 4096))
	n := binary.LittleEndian.Uint32(mem.b[4096:])
	require.Contains(t, string(mem.b[:n]), "buffer_free")
	require.Equal(t, EINVAL, call(ctx, mod, "memory_report", 0, 64, 60))
	require.Equal(t, ESUCCESS, call(ctx, mod, "last_error", 100, 4000, 4100))
	n = binary.LittleEndian.Uint32(mem.b[4100:])
	require.Equal(t, "memory_report: out_len [60, 64) overlaps buf [0, 64); the length and the bytes would be written over each other", string(mem.b[100:100+n]))
}

// memory_usage and memory_report of a guest whose stream the host program
// closed answer EIO, as sync does, and write nothing: they answered
// ESUCCESS with the zeros of pools that were gone. persistent_end answers
// EIO too, as persistent_begin does.
func TestUsageAndReportOfAClosedStreamAreEIO(t *testing.T) {
	dg := newDirectGuest(t)
	ctx, s, mem, mod := dg.ctx, dg.s, dg.mem, dg.mod
	require.Equal(t, ESUCCESS, call(ctx, mod, "memory_usage", 0))
	require.Equal(t, ESUCCESS, call(ctx, mod, "memory_report", 0, 4096, 4096))
	require.Equal(t, ESUCCESS, call(ctx, mod, "persistent_begin"))
	require.NoError(t, s.Close())
	require.Equal(t, EIO, call(ctx, mod, "persistent_end"), "persistent_end answered ESUCCESS where persistent_begin is EIO")
	require.Equal(t, EIO, call(ctx, mod, "persistent_begin"))

	fill := bytes.Repeat([]byte{0xa5}, len(mem.b))
	copy(mem.b, fill)
	require.Equal(t, EIO, call(ctx, mod, "memory_usage", 0))
	require.Equal(t, EIO, call(ctx, mod, "memory_report", 0, 4096, 4096))
	require.Equal(t, EIO, call(ctx, mod, "sync"))
	require.Equal(t, fill, mem.b, "nothing is written")
	require.Equal(t, EFAULT, call(ctx, mod, "memory_usage", 8190), "the range is checked first")
	require.Equal(t, EFAULT, call(ctx, mod, "memory_report", 0, 4096, 8190))
	require.Equal(t, EIO, call(ctx, mod, "memory_usage", 0))
	require.Equal(t, ESUCCESS, call(ctx, mod, "last_error", 0, 4096, 4096))
	n := binary.LittleEndian.Uint32(mem.b[4096:])
	require.Contains(t, string(mem.b[:n]), "is closed")
}

// New, Compile and Run refuse a nil context with ErrNilContext: New and
// Run panicked, and Compile refused the module as one wazero failed on.
func TestNilContextIsRefused(t *testing.T) {
	var nilCtx context.Context
	c := openClient(t)
	h, err := New(nilCtx, c)
	require.ErrorIs(t, err, ErrNilContext)
	require.Nil(t, h)
	h = newHost(t, context.Background(), c)
	src := guestWAT(t, "", `(drop (call $sync))`)
	m, err := h.Compile(nilCtx, src)
	require.ErrorIs(t, err, ErrNilContext)
	require.NotErrorIs(t, err, ErrRefused, "the module is not to blame")
	require.Nil(t, m)
	m = compile(t, h, src)
	var res *Result
	require.NotPanics(t, func() { res, err = h.Run(nilCtx, m) })
	require.ErrorIs(t, err, ErrNilContext)
	require.Nil(t, res)
	_, err = h.Run(context.Background(), m)
	require.NoError(t, err, "the host and the module are as they were")
}

// New refuses a nil or zero client with client.ErrNil, where it made a
// host that refused every guest at Run ("a stream for the guest").
func TestNewRefusesANilClient(t *testing.T) {
	for _, c := range []*client.Client{nil, {}} {
		h, err := New(context.Background(), c)
		require.ErrorIs(t, err, client.ErrNil)
		require.ErrorContains(t, err, "wasmhost: no client to run guests on")
		require.Nil(t, h)
	}
}

// A nil or zero Host or Module is no host or module: its methods return
// ErrNil (Client nil) where each panicked with a nil dereference, and Run
// refuses a zero Module as it does a nil one.
func TestNilAndZeroHostAndModuleRefuseWithoutPanicking(t *testing.T) {
	ctx := context.Background()
	src := guestWAT(t, "", `(drop (call $sync))`)
	for _, h := range []*Host{nil, {}} {
		require.NotPanics(t, func() {
			require.Nil(t, h.Client())
			_, err := h.Compile(ctx, src)
			require.ErrorIs(t, err, ErrNil)
			_, err = h.Run(ctx, nil)
			require.ErrorIs(t, err, ErrNil)
			require.ErrorIs(t, h.Close(ctx), ErrNil)
		}, "host nil: %v", h == nil)
	}
	for _, m := range []*Module{nil, {}} {
		require.NotPanics(t, func() { require.ErrorIs(t, m.Close(ctx), ErrNil) }, "module nil: %v", m == nil)
	}
	h := newHost(t, ctx, openClient(t))
	var err error
	require.NotPanics(t, func() { _, err = h.Run(ctx, &Module{}) })
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "a zero Module")
}

// A nil Option given to New, a nil RunOption given to WithDefaults, and one
// given to Run are refused with ErrInvalidOption, where each panicked when
// called; Run makes no stream for the guest, and the host and module stay
// as they were.
func TestNilOptionsAreRefused(t *testing.T) {
	ctx := context.Background()
	c := openClient(t)
	for _, opts := range [][]Option{{nil}, {WithoutRecords(), nil}, {WithDefaults(WithClocks(), nil)}} {
		var h *Host
		var err error
		require.NotPanics(t, func() { h, err = New(ctx, c, opts...) })
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorContains(t, err, "is nil")
		require.Nil(t, h)
	}
	_, err := New(ctx, c, WithDefaults(WithClocks(), nil))
	require.EqualError(t, err, "wasmhost: invalid option: option 2 of the 2 given to WithDefaults is nil")

	h := newHost(t, ctx, c)
	m := compile(t, h, guestWAT(t, "", `(drop (call $sync))`))
	streams := len(c.Streams())
	var res *Result
	require.NotPanics(t, func() { res, err = h.Run(ctx, m, nil) })
	require.EqualError(t, err, "wasmhost: invalid option: option 1 of the 1 given to Run is nil")
	require.ErrorIs(t, err, ErrInvalidOption)
	require.NotErrorIs(t, err, ErrRefused, "the module is not to blame")
	require.Nil(t, res)
	require.Len(t, c.Streams(), streams, "no stream was made for the guest")
	_, err = h.Run(ctx, m)
	require.NoError(t, err, "the host and the module are as they were")
}

// An argument or environment variable WASI cannot pass is refused as the
// host's option (ErrInvalidOption) before anything is made for the guest,
// by New where WithDefaults gives it: wazero refused it as the guest
// loaded, and Run said the module was refused (ErrRefused).
func TestArgsAndEnvWASICannotPassAreRefused(t *testing.T) {
	ctx := context.Background()
	c := openClient(t)
	h := newHost(t, ctx, c)
	m := compile(t, h, guestWAT(t, "", `(drop (call $sync))`))
	streams := len(c.Streams())
	for _, tc := range []struct {
		opt  RunOption
		want string
	}{
		{WithArgs("guest", "a\x00b"), `WithArgs: argument 1, "a\x00b", holds a NUL byte at 1`},
		{WithEnv("A=B", "c"), `WithEnv: the name "A=B" holds '='`},
		{WithEnv("", "c"), `WithEnv: an empty name`},
		{WithEnv("A\x00", "c"), `WithEnv: the name "A\x00" holds a NUL byte`},
		{WithEnv("SECRET", "s3\x00cr"), `WithEnv: the value of "SECRET" holds a NUL byte at 2`},
	} {
		opt, want := tc.opt, tc.want
		res, err := h.Run(ctx, m, opt)
		require.ErrorIs(t, err, ErrInvalidOption, want)
		require.NotErrorIs(t, err, ErrRefused, "the module is not to blame")
		require.ErrorContains(t, err, "wasmhost: invalid option: "+want)
		require.NotContains(t, err.Error(), "s3", "a value is not shown")
		require.Nil(t, res, "nothing was loaded")
		require.Len(t, c.Streams(), streams, "no stream was made for the guest")

		g, err := New(ctx, c, WithDefaults(opt))
		require.ErrorIs(t, err, ErrInvalidOption, want)
		require.ErrorContains(t, err, "wasmhost: invalid option: WithDefaults: "+want)
		require.Nil(t, g)
	}
	_, err := h.Run(ctx, m, WithArgs("guest", "a=b"), WithEnv("A", "b=c"), WithEnv("A", ""))
	require.NoError(t, err, "'=' in an argument or a value, and an empty value, are passed")
}

// New refuses a closed client with client.ErrClosed, where it made a host
// whose every Run then failed making the guest's stream.
func TestNewRefusesAClosedClient(t *testing.T) {
	c := openClient(t)
	require.NoError(t, c.Close())
	h, err := New(context.Background(), c)
	require.ErrorIs(t, err, client.ErrClosed)
	require.ErrorContains(t, err, "wasmhost: the client to run guests on is closed")
	require.Nil(t, h)
}

// Run on a host whose client was closed since New is refused with
// client.ErrClosed, the client named, before anything is made: a guest
// given a stream with OnStream was refused as an invalid option (the
// stream read as closed), one without failed making its stream.
func TestRunOnAClosedClientIsRefused(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	m := compile(t, h, guestWAT(t, "", `(drop (call $sync))`))
	s := c.DefaultStream()
	require.NoError(t, c.Close())
	for _, opts := range [][]RunOption{nil, {OnStream(s)}} {
		res, err := h.Run(context.Background(), m, opts...)
		require.ErrorIs(t, err, client.ErrClosed)
		require.NotErrorIs(t, err, ErrInvalidOption, "the options are not to blame")
		require.NotErrorIs(t, err, ErrClosed, "the host is open")
		require.EqualError(t, err, "wasmhost: the client the host runs guests on is closed: client: closed")
		require.Nil(t, res)
	}
}

// directGuest is a guest instance on a new stream of a new host, for host
// functions called directly: the context a call is made in, and a module
// of 8 KiB memory.
type directGuest struct {
	ctx context.Context
	g   *instance
	s   *client.Stream
	mem *fakeMemory
	mod fakeModule
}

func newDirectGuest(t *testing.T) directGuest {
	t.Helper()
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	s, err := c.NewStream()
	require.NoError(t, err)
	g := newInstance(h, context.Background(), s, runConfig{})
	t.Cleanup(func() { require.NoError(t, g.release()) })
	t.Cleanup(func() { _ = s.Close() }) // before the instance's release, as a deferred close was
	mem := &fakeMemory{b: make([]byte, 8192)}
	return directGuest{ctx: context.WithValue(context.Background(), instanceKey{}, g), g: g, s: s, mem: mem, mod: fakeModule{mem: mem}}
}
