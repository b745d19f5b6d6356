package client

import (
	"context"
	"fmt"
	"reflect"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
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
