package wasmhost

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// The launch descriptor (ABI.md): a little-endian header of version and op
// count, then each op's fixed part, kernel name, push constants and buffer
// handles, with nothing after the last op.
const (
	descriptorVersion = 1
	headerSize        = 8
	opHeaderSize      = 20
	maxBatch          = 256
	maxKernelName     = 64
	maxPush           = 128
	maxBindings       = 16
)

// kernelTable is the built-in catalogue by name.
type kernelTable map[string]kernel.Kernel

func newKernelTable() kernelTable {
	t := kernelTable{}
	for _, k := range kernel.All() {
		t[k.Name] = k
	}
	return t
}

func malformed(format string, args ...any) error {
	return fail(EINVAL, "launch: malformed descriptor: "+format, args...)
}

// parse reads a descriptor into launches on g's buffers, and each launch's
// binding handles. It checks the whole descriptor before it returns
// anything: a malformed one is EINVAL, then a handle g does not hold EBADF.
func (t kernelTable) parse(d []byte, g *instance) ([]client.LaunchOp, [][]uint32, error) {
	if len(d) < headerSize {
		return nil, nil, malformed("%d B, the header alone is %d B", len(d), headerSize)
	}
	if v := binary.LittleEndian.Uint32(d); v != descriptorVersion {
		return nil, nil, malformed("version %d, this host reads version %d", v, descriptorVersion)
	}
	count := binary.LittleEndian.Uint32(d[4:])
	if count == 0 || count > maxBatch {
		return nil, nil, malformed("%d launches, a batch holds 1 to %d", count, maxBatch)
	}
	ops := make([]client.LaunchOp, count)
	raw := make([][]byte, count) // each launch's binding handles
	rest := d[headerSize:]
	at := headerSize
	for n := range ops {
		if len(rest) < opHeaderSize {
			return nil, nil, malformed("launch %d at byte %d: %d B left, its fixed part is %d B", n, at, len(rest), opHeaderSize)
		}
		nameLen := int(binary.LittleEndian.Uint16(rest))
		pushLen := int(binary.LittleEndian.Uint16(rest[2:]))
		bindings := int(binary.LittleEndian.Uint16(rest[4:]))
		flags := binary.LittleEndian.Uint16(rest[6:])
		var grid [3]uint32
		for i := range grid {
			grid[i] = binary.LittleEndian.Uint32(rest[8+4*i:])
		}
		switch {
		case nameLen == 0 || nameLen > maxKernelName:
			return nil, nil, malformed("launch %d: kernel name of %d B, want 1 to %d", n, nameLen, maxKernelName)
		case pushLen > maxPush || pushLen%4 != 0:
			return nil, nil, malformed("launch %d: %d B of push constants, want a multiple of 4 up to %d", n, pushLen, maxPush)
		case bindings > maxBindings:
			return nil, nil, malformed("launch %d: %d bindings, at most %d", n, bindings, maxBindings)
		case flags != 0:
			return nil, nil, malformed("launch %d: flags %#x, version 1 defines none", n, flags)
		}
		body := nameLen + pushLen + 4*bindings
		rest, at = rest[opHeaderSize:], at+opHeaderSize
		if len(rest) < body {
			return nil, nil, malformed("launch %d at byte %d: %d B left, it needs %d B", n, at, len(rest), body)
		}
		name := rest[:nameLen]
		k, ok := t[string(name)]
		if !ok {
			return nil, nil, fail(EINVAL, "launch %d: no kernel %q in the catalogue", n, abbreviate(name))
		}
		ops[n] = client.LaunchOp{Kernel: k, Grid: grid, Push: append([]byte(nil), rest[nameLen:nameLen+pushLen]...)}
		raw[n] = rest[nameLen+pushLen : body]
		rest, at = rest[body:], at+body
	}
	if len(rest) > 0 {
		return nil, nil, malformed("%d B after the last of %d launches", len(rest), count)
	}
	// Only a well-formed descriptor has its handles looked up.
	handles := make([][]uint32, count)
	for n := range ops {
		op := &ops[n]
		op.Buffers = make([]*client.Buffer, len(raw[n])/4)
		handles[n] = make([]uint32, len(op.Buffers))
		for i := range op.Buffers {
			h := binary.LittleEndian.Uint32(raw[n][4*i:])
			handles[n][i] = h
			if op.Buffers[i] = g.lookup(h); op.Buffers[i] == nil {
				where := "launch:"
				if count > 1 {
					where = opWhere(n, int(count)) + ","
				}
				return nil, nil, fail(EBADF, "%s kernel %q, binding %d: handle %#x names no live buffer of this guest", where, op.Kernel.Name, i, h)
			}
		}
	}
	return ops, handles, nil
}

// abbreviate quotes at most 64 bytes of what a guest sent.
func abbreviate(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%s…", b[:64])
	}
	return string(b)
}

// opWhere names op n of a batch of of launches in a message: "launch"
// for a single one, "launch: op 1 of 2" in a batch. Each message of a
// launch starts "launch: ", which the guest's SDK takes as naming the call
// and does not name again.
func opWhere(n, of int) string {
	if of == 1 {
		return "launch"
	}
	return fmt.Sprintf("launch: op %d of %d", n, of)
}

// launchError is a launch the kernel's checks refused: op of ops, err the
// refusal (the client's, or kernel.CheckIdleGroups'). Its message says
// "launch: " and the refusal once, without the client's and the kernel's
// own prefixes ("client: launch: vkrt: invalid dispatch …"); errors.Is
// and errors.As still find kernel.ErrInvalidDispatch and
// *kernel.DispatchError. An op of -1 is one not known.
type launchError struct {
	op, ops int
	err     error
}

func (e *launchError) Error() string {
	where := "launch"
	if e.op >= 0 {
		where = opWhere(e.op, e.ops)
	}
	return where + ": " + refusalText(e.err)
}

func (e *launchError) Unwrap() error { return e.err }

// refusalText is a launch's refusal without the client's and the kernel's
// prefixes: "invalid dispatch of kernel "fill": …".
func refusalText(err error) string {
	var de *kernel.DispatchError
	if errors.As(err, &de) {
		return fmt.Sprintf("invalid dispatch of kernel %q: %s", de.Kernel, de.Reason)
	}
	return strings.TrimPrefix(err.Error(), "vkrt: ")
}

// guestRefusal is what last_error tells of a launch the client refused
// for the kernel's checks, and which op it was: the same refusal, naming
// the guest's handles where the client names its own buffer ids as
// storages ("storage 1 [0, 64)"), which a guest cannot map to its handles
// and which number the host's buffers. "" and -1 where the launches pass
// (a refusal of their device memory's handles, not their sizes).
func guestRefusal(ops []client.LaunchOp, handles [][]uint32, limits kernel.Limits) (string, int) {
	for n, op := range ops {
		sh := make([]vkruntime.StorageHandle, len(op.Buffers))
		for i, b := range op.Buffers {
			// Each handle stands for its buffer, as the client's buffer id
			// does: the same buffer bound twice is the same storage.
			sh[i] = vkruntime.StorageHandle{ID: vkruntime.StorageID(handles[n][i]), Size: b.Size()}
		}
		var de *kernel.DispatchError
		if !errors.As(kernel.Validate(op.Kernel, op.Grid, sh, op.Push, limits), &de) {
			continue
		}
		for i, h := range sh {
			de.Reason = strings.ReplaceAll(de.Reason, h.String(), fmt.Sprintf("handle %#x [0, %d)", handles[n][i], h.Size))
		}
		return (&launchError{op: n, ops: len(ops), err: de}).Error(), n
	}
	return "", -1
}
