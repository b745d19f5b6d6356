//go:build wasip1

// Command sdk goes through the guest SDK against a real host: buffers,
// launches, the errors of misuse, reports, records, installs and
// persistent windows. It prints what failed and exits 1 on the first
// surprise.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vkrt/vkrt/wasmhost/guest"
)

func check(what string, ok bool) {
	if !ok {
		fmt.Fprintln(os.Stderr, "FAILED:", what)
		os.Exit(1)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAILED:", err)
		os.Exit(1)
	}
	return v
}

func main() {
	check("not a dry run", !guest.DryRun())
	a := must(guest.NewFloat32s([]float32{1, 2, 3, 4}))
	b := must(guest.NewFloat32s([]float32{10, 20, 30, 40}))
	out := must(guest.NewBuffer(16))
	check("a batch runs", guest.Run(guest.Add(4, a, b, out), guest.Scale(4, 0.5, out, out)) == nil)
	got := must(out.Float32s())
	check(fmt.Sprintf("(a + b) / 2 = %v", got), fmt.Sprint(got) == "[5.5 11 16.5 22]")

	err := out.Write(12, make([]byte, 8))
	check("a write past the end is ERANGE", errors.Is(err, guest.ERANGE))
	var e *guest.Error
	check("it is a *guest.Error", errors.As(err, &e) && e.Op == "buffer_write")
	check("with the host's message: "+err.Error(), strings.Contains(e.Message, "8 B at offset 12 is outside its 16 B"))

	check("a launch on too small a buffer is EINVAL", errors.Is(guest.Add(5, a, b, out).Run(), guest.EINVAL))
	check("a forged buffer is EBADF", errors.Is(guest.BufferOf(0xdead, 16).Free(), guest.EBADF))
	check("installing while buffers live is EBUSY", errors.Is(guest.Install("direct"), guest.EBUSY))
	check("a malformed layout is EINVAL", errors.Is(guest.Install(`{"Sliced":[{"page_size":`), guest.EINVAL))

	u := must(guest.Usage())
	check(fmt.Sprintf("three live buffers in the usage: %+v", u), u.Allocations == 3 && u.BytesInUse == 48)
	report := must(guest.Report())
	var parsed map[string]any
	check("the report is JSON with dynamic pools", json.Unmarshal(report, &parsed) == nil && parsed["dynamic"] != nil)
	check("a record is written", guest.Record("sdk: three buffers") == nil)

	for _, buf := range []*guest.Buffer{a, b, out} {
		check("free", buf.Free() == nil)
	}
	check("a double free is EBADF", errors.Is(a.Free(), guest.EBADF))
	check("installing with nothing live works", guest.Install("direct") == nil)

	check("persistent windows open", guest.BeginPersistent() == nil)
	w := must(guest.NewBuffer(64))
	check("and close", guest.EndPersistent() == nil)
	check("one too many closes is EINVAL", errors.Is(guest.EndPersistent(), guest.EINVAL))
	u = must(guest.Usage())
	check("the persistent buffer counts", u.Allocations == 1)
	zeros := make([]byte, 64)
	check("a new buffer reads zeros", w.Read(0, zeros) == nil && bytes.Equal(zeros, make([]byte, 64)))
	check("sync", guest.Sync() == nil)
	fmt.Println("sdk: every check passed")
}
