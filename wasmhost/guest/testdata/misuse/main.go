//go:build wasip1

// Command misuse uses the guest SDK the way a careless or hostile guest
// would, against a real host: every misuse must come back as an *Error of
// the right status, never a trap, and change nothing. It exits 1 on the
// first surprise.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/vkrt/vkrt/wasmhost/guest"
)

func check(what string, ok bool) {
	if !ok {
		fmt.Fprintln(os.Stderr, "FAILED:", what)
		os.Exit(1)
	}
}

// refused: err is an *Error of op with status s.
func refused(what string, err error, op string, s guest.Status) {
	var e *guest.Error
	check(fmt.Sprintf("%s: want %s from %s, got %v", what, s, op, err),
		errors.Is(err, s) && errors.As(err, &e) && e.Op == op && e.Message != "")
}

func must[T any](v T, err error) T {
	check(fmt.Sprint(err), err == nil)
	return v
}

func main() {
	b := must(guest.NewFloat32s([]float32{1, 2, 3, 4}))

	// 4 * 2^62 wraps to 0: the write must not land on element 0.
	refused("an element index past 2^64 B", b.WriteFloat32s(1<<62, []float32{-1}), "buffer_write", guest.ERANGE)
	refused("an element index just past 2^64 B", b.WriteFloat32s(1<<62+1, []float32{-1}), "buffer_write", guest.ERANGE)
	check("element 0 unchanged", fmt.Sprint(must(b.Float32s())) == "[1 2 3 4]")
	// A size the host does not hold is refused before a slice of it is
	// made: 3 GiB ran the guest out of memory.
	_, err := guest.BufferOf(b.Handle(), 3<<30).Float32s()
	refused("Float32s of a buffer told 3 GiB", err, "buffer_read", guest.ERANGE)

	var nilBuf *guest.Buffer
	refused("Free of nil", nilBuf.Free(), "buffer_free", guest.EBADF)
	refused("Write to nil", nilBuf.Write(0, []byte{1}), "buffer_write", guest.EBADF)
	refused("Read of nil", nilBuf.Read(0, make([]byte, 4)), "buffer_read", guest.EBADF)
	refused("WriteFloat32s to nil", nilBuf.WriteFloat32s(0, []float32{1}), "buffer_write", guest.EBADF)
	_, err = nilBuf.Float32s()
	refused("Float32s of nil", err, "buffer_read", guest.EBADF)
	check("nil has handle 0", nilBuf.Handle() == 0 && nilBuf.Size() == 0)

	odd := must(guest.NewBuffer(6))
	check("6 B written", odd.Write(0, []byte{1, 0, 0, 0, 9, 9}) == nil)
	_, err = odd.Float32s()
	refused("Float32s of 6 B", err, "buffer_read", guest.EINVAL)
	check("free 6 B", odd.Free() == nil)

	refused("an empty batch", guest.Run(), "launch", guest.EINVAL)
	refused("a nil binding", guest.Run(guest.Add(4, b, nil, b)), "launch", guest.EBADF)
	refused("a batch of a stale buffer", guest.Run(guest.Fill(4, 7, guest.BufferOf(b.Handle()+1<<20, 16))), "launch", guest.EBADF)

	check("free", b.Free() == nil)
	refused("double free", b.Free(), "buffer_free", guest.EBADF)
	refused("write after free", b.Write(0, []byte{1}), "buffer_write", guest.EBADF)
	_, err = b.Float32s()
	refused("read after free", err, "buffer_read", guest.EBADF)

	refused("an empty label", guest.Record(""), "memory_record", guest.EINVAL)
	refused("a label with NUL", guest.Record("a\x00b"), "memory_record", guest.EINVAL)
	refused("a label of 257 B", guest.Record(string(bytes.Repeat([]byte("a"), 257))), "memory_record", guest.EINVAL)
	refused("an empty layout", guest.Install(""), "memory_install", guest.EINVAL)
	u := must(guest.Usage())
	check(fmt.Sprintf("nothing left live: %+v", u), u.Allocations == 0)
	fmt.Println("misuse: every misuse refused")
}
