package client

import (
	"context"
	"fmt"
	"reflect"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/runtime/environment"
)

// Every exported method of a nil or zero *Client and *Stream returns
// ErrNil where it returns an error, and its zero value otherwise (Closed
// says true), where each panicked with a nil dereference. The methods are
// listed by reflection, so one added later is held to it too.
func TestNilClientAndStreamRefuseWithoutPanicking(t *testing.T) {
	errType := reflect.TypeFor[error]()
	ctxType := reflect.TypeFor[context.Context]()
	for _, recv := range []any{(*Client)(nil), &Client{}, (*Stream)(nil), &Stream{}} {
		v := reflect.ValueOf(recv)
		require.GreaterOrEqual(t, v.NumMethod(), 15, "%T's methods are listed", recv)
		for i := range v.NumMethod() {
			m, name := v.Method(i), v.Type().Method(i).Name
			what := fmt.Sprintf("%T (nil: %v).%s", recv, v.IsNil(), name)
			args := make([]reflect.Value, m.Type().NumIn())
			for j := range args {
				if in := m.Type().In(j); in == ctxType {
					args[j] = reflect.ValueOf(context.Background())
				} else {
					args[j] = reflect.Zero(in)
				}
			}
			var out []reflect.Value
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("%s panicked: %v\n%s", what, p, debug.Stack())
					}
				}()
				if m.Type().IsVariadic() {
					out = m.CallSlice(args)
				} else {
					out = m.Call(args)
				}
			}()
			for k, r := range out {
				switch {
				case r.Type() == errType && k == len(out)-1 && name != "Err":
					err, _ := r.Interface().(error)
					require.ErrorIs(t, err, ErrNil, what)
				case name == "Closed":
					require.True(t, r.Bool(), "%s: a nil stream takes no work", what)
				default:
					require.True(t, r.IsZero(), "%s: result %d is %v, want the zero value", what, k, r)
				}
			}
		}
	}
}

// Every exported method of an open Client, Stream and Buffer that takes a
// context, given a nil one, returns ErrNilContext where it returns an
// error and does not panic (each panicked inside the call); Open refuses
// one too, and closes the device handed to it.
func TestNilContextIsRefused(t *testing.T) {
	var nilCtx context.Context
	d, err := cpu.New()
	require.NoError(t, err)
	c, err := Open(nilCtx, WithBackend(d))
	require.ErrorIs(t, err, ErrNilContext)
	require.Nil(t, c)
	requireClosed(t, d, "a failed Open closes the handed device")

	c = openOnCPU(t, nil, WithEnvironment("nilctx", environment.WithDir(t.TempDir())))
	s, err := c.NewStream()
	require.NoError(t, err)
	b, err := s.Create(context.Background(), make([]byte, 64))
	require.NoError(t, err)
	errType := reflect.TypeFor[error]()
	ctxType := reflect.TypeFor[context.Context]()
	for _, recv := range []any{c, s, b} {
		v := reflect.ValueOf(recv)
		for i := range v.NumMethod() {
			m, name := v.Method(i), v.Type().Method(i).Name
			if m.Type().NumIn() == 0 || m.Type().In(0) != ctxType {
				continue
			}
			what := fmt.Sprintf("%T.%s", recv, name)
			args := make([]reflect.Value, m.Type().NumIn())
			args[0] = reflect.Zero(ctxType)
			for j := 1; j < len(args); j++ {
				switch in := m.Type().In(j); {
				case in == reflect.TypeFor[*Buffer]():
					args[j] = reflect.ValueOf(b)
				case in == reflect.TypeFor[Workload]():
					args[j] = reflect.ValueOf(Workload(func(context.Context) error { return nil }))
				case in == reflect.TypeFor[func(context.Context) error]():
					args[j] = reflect.ValueOf(func(context.Context) error { return nil })
				case in == reflect.TypeFor[string]():
					args[j] = reflect.ValueOf("label")
				default:
					args[j] = reflect.Zero(in)
				}
			}
			var out []reflect.Value
			require.NotPanics(t, func() {
				if m.Type().IsVariadic() {
					out = m.CallSlice(args)
				} else {
					out = m.Call(args)
				}
			}, what)
			if n := len(out); n > 0 && out[n-1].Type() == errType {
				err, _ := out[n-1].Interface().(error)
				require.ErrorIs(t, err, ErrNilContext, what)
			}
		}
	}
	got, err := s.Read(context.Background(), b)
	require.NoError(t, err, "the buffer is as it was")
	require.Equal(t, make([]byte, 64), got)
}

// WithStream of a nil context is nil, which the calls then refuse with
// ErrNilContext: it panicked making a context of a nil parent.
func TestWithStreamOfANilContextIsRefusedByTheCall(t *testing.T) {
	c := openOnCPU(t, nil)
	s, err := c.NewStream()
	require.NoError(t, err)
	var nilCtx context.Context
	var ctx context.Context
	require.NotPanics(t, func() { ctx = WithStream(nilCtx, s) })
	require.Nil(t, ctx)
	_, err = c.Empty(ctx, 16)
	require.ErrorIs(t, err, ErrNilContext)
	_, err = c.CallingStream(ctx)
	require.ErrorIs(t, err, ErrNilContext)
}
