package wasmhost

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"reflect"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// abiFunc is one function of vkrt_v1: its parameters and what it does.
// Every function returns an i32 status.
type abiFunc struct {
	name   string
	params []api.ValueType
	names  []string
	call   func(g *instance, mem api.Memory, stack []uint64) Errno
}

// abi is ABI version 1, in the order wasmhost/ABI.md lists it.
var abi = []abiFunc{
	{"buffer_create", []api.ValueType{i64, i32}, []string{"size", "out_handle"}, bufferCreate},
	{"buffer_write", []api.ValueType{i32, i64, i32, i32}, []string{"handle", "offset", "src", "len"}, bufferWrite},
	{"buffer_read", []api.ValueType{i32, i64, i32, i32}, []string{"handle", "offset", "dst", "len"}, bufferRead},
	{"buffer_free", []api.ValueType{i32}, []string{"handle"}, bufferFree},
	{"launch", []api.ValueType{i32, i32}, []string{"desc", "desc_len"}, launch},
	{"sync", nil, nil, syncStream},
	{"memory_usage", []api.ValueType{i32}, []string{"out"}, memoryUsage},
	{"memory_report", []api.ValueType{i32, i32, i32}, []string{"buf", "buf_len", "out_len"}, memoryReport},
	{"memory_record", []api.ValueType{i32, i32}, []string{"label", "label_len"}, memoryRecord},
	{"memory_install", []api.ValueType{i32, i32}, []string{"layout", "layout_len"}, memoryInstall},
	{"persistent_begin", nil, nil, persistentBegin},
	{"persistent_end", nil, nil, persistentEnd},
	{"is_dry_run", []api.ValueType{i32}, []string{"out"}, isDryRun},
	{"last_error", []api.ValueType{i32, i32, i32}, []string{"buf", "buf_len", "out_len"}, lastError},
}

var abiByName = func() map[string]abiFunc {
	m := map[string]abiFunc{}
	for _, f := range abi {
		m[f.name] = f
	}
	return m
}()

func (h *Host) instantiateABI(ctx context.Context) error {
	b := h.rt.NewHostModuleBuilder(ModuleName)
	for _, f := range abi {
		b.NewFunctionBuilder().WithGoModuleFunction(goFunc(f), f.params, []api.ValueType{i32}).
			WithParameterNames(f.names...).WithResultNames("status").Export(f.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// goFunc is f as wazero calls it: the guest is the one Run put on the
// context.
func goFunc(f abiFunc) api.GoModuleFunc {
	call := f.call
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		g, _ := ctx.Value(instanceKey{}).(*instance)
		if g == nil {
			stack[0] = uint64(ENOSYS) // called outside Run: no guest to act for
			return
		}
		g.calls++
		if !g.memResolved {
			g.mem, g.memResolved = guestMemory(mod), true
		}
		status := call(g, g.mem, stack)
		if status != ESUCCESS {
			// Every status but ESUCCESS is a failed call, last_error's own
			// too, though they leave its message in place.
			g.failedCalls++
		}
		if status != ESUCCESS && ctx.Err() != nil {
			// The run's deadline cut the call short: the guest ends at it,
			// as wazero ends one whose context is done, rather than being
			// handed the failure to exit with as its own.
			code := sys.ExitCodeDeadlineExceeded
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				code = sys.ExitCodeContextCanceled
			}
			panic(sys.NewExitError(code))
		}
		stack[0] = uint64(status)
	}
}

// guestMemory is mod's memory, or nil for a module without one: wazero
// then hands out a non-nil api.Memory holding a nil pointer, which panics
// when used.
func guestMemory(mod api.Module) api.Memory {
	mem := mod.Memory()
	if mem == nil {
		return nil
	}
	if v := reflect.ValueOf(mem); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return mem
}

// Guest memory ranges. wazero checks offset+length in 64 bits, so a range
// that wraps past 2^32 is outside like any other.

func guestRange(mem api.Memory, ptr, n uint32) ([]byte, bool) {
	if mem == nil {
		return nil, ptr == 0 && n == 0
	}
	return mem.Read(ptr, n)
}

func faultf(g *instance, what string, ptr, n uint32, mem api.Memory) Errno {
	size := uint64(0)
	if mem != nil {
		size = uint64(mem.Size())
	}
	g.last = failure{kind: failRange, what: what, ptr: ptr, n: n, a: size}
	return EFAULT
}

func badHandle(g *instance, what string, handle uint32) Errno {
	g.last = failure{kind: failHandle, what: what, handle: handle}
	return EBADF
}

func outOfBuffer(g *instance, what string, handle uint32, offset, n, size uint64) Errno {
	g.last = failure{kind: failOutOfBuffer, what: what, handle: handle, a: offset, b: n, c: size}
	return ERANGE
}

func putU32(mem api.Memory, ptr, v uint32) bool { return mem != nil && mem.WriteUint32Le(ptr, v) }

func bufferCreate(g *instance, mem api.Memory, stack []uint64) Errno {
	size, out := stack[0], uint32(stack[1])
	if _, ok := guestRange(mem, out, 4); !ok {
		return faultf(g, "buffer_create out_handle", out, 4, mem)
	}
	if g.live >= g.maxHandles {
		return g.fail(fail(EDQUOT, "buffer_create: the guest holds %d handles, its quota", g.live))
	}
	if g.full() {
		return g.fail(fail(EDQUOT, "buffer_create: the guest has used every handle a guest can have (%d slots, each for %d buffers)", maxTableHandles, maxGen))
	}
	if g.maxBytes > 0 && size > g.maxBytes-g.bytes {
		return g.fail(fail(EDQUOT, "buffer_create: %d B more would take the guest past its quota of %d B (it holds %d B)", size, g.maxBytes, g.bytes))
	}
	if g.ownLayout && g.maxBytes > 0 && g.persistent == 0 {
		if page, pool, ok := largestPage(g.installed, g.host.c.Properties(), size); ok && page > g.bound {
			return g.fail(fail(EDQUOT, "buffer_create: %d B go to pool %d of the layout the guest installed, whose pages of %d B are past the %d B a guest with a quota of %d B may have its pools reserve (twice the quota plus %d B of default pages)",
				size, pool, page, g.bound, g.maxBytes, g.slack))
		}
	}
	b, errno := g.create(size)
	if errno != ESUCCESS {
		return errno
	}
	putU32(mem, out, g.add(b))
	g.sampleReserved()
	g.sampleDevice()
	return ESUCCESS
}

func bufferWrite(g *instance, mem api.Memory, stack []uint64) Errno {
	return bufferTransfer(g, mem, stack, "buffer_write", "buffer_write src", (*client.Stream).Write)
}

func bufferRead(g *instance, mem api.Memory, stack []uint64) Errno {
	return bufferTransfer(g, mem, stack, "buffer_read", "buffer_read dst", (*client.Stream).ReadInto)
}

// bufferTransfer checks the (handle, offset, ptr, len) arguments buffer_write
// and buffer_read share, in the ABI's order: the guest range (EFAULT), the
// handle (EBADF), then the range inside the buffer (ERANGE); then it moves
// the bytes between the guest range and the buffer with transfer.
func bufferTransfer(g *instance, mem api.Memory, stack []uint64, fn, rangeName string,
	transfer func(s *client.Stream, ctx context.Context, b *client.Buffer, offset uint64, data []byte) error) Errno {
	handle, offset, ptr, n := uint32(stack[0]), stack[1], uint32(stack[2]), uint32(stack[3])
	data, ok := guestRange(mem, ptr, n)
	if !ok {
		return faultf(g, rangeName, ptr, n, mem)
	}
	b := g.lookup(handle)
	if b == nil {
		return badHandle(g, fn, handle)
	}
	if size := b.Size(); offset > size || uint64(n) > size-offset {
		return outOfBuffer(g, fn, handle, offset, uint64(n), size)
	}
	if err := transfer(g.stream, g.ctx, b, offset, data); err != nil {
		return g.fail(err)
	}
	return ESUCCESS
}

func bufferFree(g *instance, _ api.Memory, stack []uint64) Errno {
	handle := uint32(stack[0])
	b := g.lookup(handle)
	if b == nil {
		return badHandle(g, "buffer_free", handle)
	}
	// The handle goes only once the stream has freed its buffer: a refused
	// free changes nothing, the handle still live and counted.
	if err := g.stream.Free(b); err != nil {
		return g.fail(err)
	}
	g.remove(handle)
	g.freed = true
	return ESUCCESS
}

func launch(g *instance, mem api.Memory, stack []uint64) Errno {
	desc, n := uint32(stack[0]), uint32(stack[1])
	data, ok := guestRange(mem, desc, n)
	if !ok {
		return faultf(g, "launch desc", desc, n, mem)
	}
	ops, handles, err := g.host.kernels.parse(data, g)
	if err != nil {
		return g.fail(err)
	}
	// A grid of work groups that find nothing to do would hold the device
	// past the guest's deadline, and its neighbours' launches behind it:
	// no device stops a dispatch once submitted.
	for i, op := range ops {
		if err := kernel.CheckIdleGroups(op.Kernel, op.Grid, op.Push); err != nil {
			return g.fail(&launchError{op: i, ops: len(ops), err: err})
		}
	}
	if err := g.stream.LaunchBatch(g.ctx, ops); err != nil {
		if errors.Is(err, kernel.ErrInvalidDispatch) {
			shown, op := guestRefusal(ops, handles, g.host.c.Device().Limits())
			return g.failShown(&launchError{op: op, ops: len(ops), err: err}, shown)
		}
		return g.fail(err)
	}
	g.sampleDevice()
	return ESUCCESS
}

func syncStream(g *instance, _ api.Memory, _ []uint64) Errno {
	// Launches wait for their work; sync only reports a stream the device
	// failed under, or one the host program closed (it answered 0 there,
	// while every buffer call failed).
	if err := g.stream.Err(); err != nil {
		return g.fail(err)
	}
	if err := g.streamClosed(); err != nil {
		return g.fail(err)
	}
	return ESUCCESS
}

// streamClosed is the error of a guest whose stream the host program
// closed (EIO), or nil.
func (g *instance) streamClosed() error {
	if g.stream.Closed() {
		return fmt.Errorf("the guest's stream %d is closed: %w", g.stream.ID(), client.ErrClosed)
	}
	return nil
}

func memoryUsage(g *instance, mem api.Memory, stack []uint64) Errno {
	out := uint32(stack[0])
	buf, ok := guestRange(mem, out, 32)
	if !ok {
		return faultf(g, "memory_usage out", out, 32, mem)
	}
	if err := g.streamClosed(); err != nil {
		// A closed stream's pools are gone: their usage read as zeros,
		// which a guest took for pools that hold nothing.
		return g.fail(err)
	}
	u := g.stream.Usage()
	binary.LittleEndian.PutUint64(buf[0:], u.NumberAllocs)
	binary.LittleEndian.PutUint64(buf[8:], u.BytesInUse)
	binary.LittleEndian.PutUint64(buf[16:], u.BytesPadding)
	binary.LittleEndian.PutUint64(buf[24:], u.BytesReserved)
	return ESUCCESS
}

// writeOut answers a (buf, buf_len, out_len) call with msg: the needed
// length always goes to out_len, the bytes only if they fit.
func writeOut(g *instance, mem api.Memory, what string, stack []uint64, msg []byte, record bool) Errno {
	dst, errno := checkOut(g, mem, what, stack, record)
	if errno != ESUCCESS {
		return errno
	}
	return putOut(g, mem, what, dst, uint32(stack[2]), msg, record)
}

// putOut is writeOut past checkOut, which gave dst, the bytes of buf.
func putOut(g *instance, mem api.Memory, what string, dst []byte, outLen uint32, msg []byte, record bool) Errno {
	if uint64(len(msg)) > math.MaxUint32 {
		return g.fail(fail(EIO, "%s: %d B do not fit a u32 length", what, len(msg)))
	}
	putU32(mem, outLen, uint32(len(msg)))
	if len(msg) > len(dst) {
		if !record {
			return ERANGE
		}
		return g.fail(fail(ERANGE, "%s: %d B needed, the buffer holds %d B", what, len(msg), len(dst)))
	}
	copy(dst, msg)
	return ESUCCESS
}

// checkOut checks the ranges of a (buf, buf_len, out_len) call: each
// inside the guest's memory (EFAULT), and the two apart (EINVAL). It
// returns buf's bytes. A failure is recorded as the last error unless
// record is false (last_error's own).
func checkOut(g *instance, mem api.Memory, what string, stack []uint64, record bool) ([]byte, Errno) {
	ptr, n, outLen := uint32(stack[0]), uint32(stack[1]), uint32(stack[2])
	dst, ok := guestRange(mem, ptr, n)
	if !ok {
		return nil, faultOrKeep(g, what+" buf", ptr, n, mem, record)
	}
	if _, ok := guestRange(mem, outLen, 4); !ok {
		return nil, faultOrKeep(g, what+" out_len", outLen, 4, mem, record)
	}
	if n > 0 && uint64(outLen) < uint64(ptr)+uint64(n) && uint64(ptr) < uint64(outLen)+4 {
		// The length and the bytes would be written over each other: the
		// guest read a length made of its message, or a message cut by
		// its length.
		if !record {
			return nil, EINVAL
		}
		return nil, g.fail(fail(EINVAL, "%s: out_len [%d, %d) overlaps buf [%d, %d); the length and the bytes would be written over each other",
			what, outLen, uint64(outLen)+4, ptr, uint64(ptr)+uint64(n)))
	}
	return dst, ESUCCESS
}

// faultOrKeep is an EFAULT that, for last_error, leaves the last error the
// guest is trying to read in place.
func faultOrKeep(g *instance, what string, ptr, n uint32, mem api.Memory, record bool) Errno {
	if record {
		return faultf(g, what, ptr, n, mem)
	}
	return EFAULT
}

func memoryReport(g *instance, mem api.Memory, stack []uint64) Errno {
	dst, errno := checkOut(g, mem, "memory_report", stack, true)
	if errno != ESUCCESS {
		return errno
	}
	if err := g.streamClosed(); err != nil {
		// A closed stream's pools are gone: the report read as empty.
		return g.fail(err)
	}
	msg, err := json.Marshal(g.stream.Report())
	if err != nil {
		return g.fail(fail(EIO, "memory_report: %v", err))
	}
	return putOut(g, mem, "memory_report", dst, uint32(stack[2]), msg, true)
}

func lastError(g *instance, mem api.Memory, stack []uint64) Errno {
	msg := []byte(g.last.guestMessage())
	return writeOut(g, mem, "last_error", stack, msg, false)
}

// maxLabel, maxRecords and maxLayoutJSON bound what a guest can make the
// host parse or store.
const (
	maxLabel      = 256
	maxRecords    = 1024
	maxLayoutJSON = 64 << 10
)

func memoryRecord(g *instance, mem api.Memory, stack []uint64) Errno {
	ptr, n := uint32(stack[0]), uint32(stack[1])
	label, ok := guestRange(mem, ptr, n)
	if !ok {
		return faultf(g, "memory_record label", ptr, n, mem)
	}
	if !g.host.cfg.records {
		return g.fail(fail(ENOSYS, "memory_record: this host keeps no records"))
	}
	if n == 0 || n > maxLabel || !utf8.Valid(label) || bytes.IndexByte(label, 0) >= 0 {
		// Say which rule the label broke: a label of 2 B of bad UTF-8
		// read as though its length were wrong.
		why := fmt.Sprintf("got %d B", n)
		if n > 0 && n <= maxLabel {
			why = fmt.Sprintf("got %d B that are not UTF-8", n)
			if utf8.Valid(label) {
				why = fmt.Sprintf("got %d B with a NUL at %d", n, bytes.IndexByte(label, 0))
			}
		}
		return g.fail(fail(EINVAL, "memory_record: a label is 1 to %d B of UTF-8 without NUL, %s", maxLabel, why))
	}
	if g.records >= maxRecords {
		return g.fail(fail(EDQUOT, "memory_record: a guest writes at most %d records a run", maxRecords))
	}
	if _, err := g.host.c.RecordMemory(g.ctx, string(label)); err != nil {
		err = fail(EIO, "memory_record: %w", err)
		if errors.Is(err, client.ErrClosed) {
			return g.fail(err)
		}
		return g.failShown(err, "memory_record: "+environmentRefusal(err))
	}
	g.records++
	return ESUCCESS
}

func memoryInstall(g *instance, mem api.Memory, stack []uint64) Errno {
	ptr, n := uint32(stack[0]), uint32(stack[1])
	text, ok := guestRange(mem, ptr, n)
	if !ok {
		return faultf(g, "memory_install layout", ptr, n, mem)
	}
	if n > maxLayoutJSON {
		return g.fail(fail(EINVAL, "memory_install: %d B of layout JSON, at most %d B", n, maxLayoutJSON))
	}
	l, err := memory.ParseLayout(string(text))
	if err != nil {
		return g.fail(fail(EINVAL, "memory_install: %w", err))
	}
	if g.maxBytes > 0 {
		if n := arenaBytes(l); n > g.bound {
			return g.fail(fail(EDQUOT, "memory_install: the arena's pages take %d B, past the %d B a guest with a quota of %d B may have its pools reserve (twice the quota plus %d B of default pages)",
				n, g.bound, g.maxBytes, g.slack))
		}
	}
	if err := g.stream.InstallMemoryPools(l); err != nil {
		var ie *memory.InstallError
		if errors.As(err, &ie) {
			// The guest is told the pools' words: the client's name its
			// stream and the layout the guest gave.
			return g.failShown(err, ie.Error())
		}
		return g.fail(err)
	}
	g.installed, g.ownLayout = l, true
	return ESUCCESS
}

// maxPersistentDepth bounds how deep a guest may nest persistent windows.
const maxPersistentDepth = 64

func persistentBegin(g *instance, _ api.Memory, _ []uint64) Errno {
	if g.persistent >= maxPersistentDepth {
		return g.fail(fail(EINVAL, "persistent_begin: windows nest at most %d deep", maxPersistentDepth))
	}
	if err := g.stream.BeginPersistent(); err != nil {
		return g.fail(err)
	}
	g.persistent++
	return ESUCCESS
}

func persistentEnd(g *instance, _ api.Memory, _ []uint64) Errno {
	if g.persistent == 0 {
		return g.fail(fail(EINVAL, "persistent_end: no persistent window is open"))
	}
	if err := g.streamClosed(); err != nil {
		// Its windows went with its pools; release ends what is counted.
		return g.fail(err)
	}
	if err := g.stream.EndPersistent(); err != nil {
		if errors.Is(err, client.ErrNoPersistentWindow) {
			// The host program closed the stream's windows (OnStream):
			// none of the guest's is open any more.
			g.persistent = 0
			err = fmt.Errorf("persistent_end: the host program closed the guest's persistent windows on its stream: %w", err)
		}
		return g.fail(err)
	}
	g.persistent--
	return ESUCCESS
}

func isDryRun(g *instance, mem api.Memory, stack []uint64) Errno {
	out := uint32(stack[0])
	v := uint32(0)
	if g.dry {
		v = 1
	}
	if !putU32(mem, out, v) {
		return faultf(g, "is_dry_run out", out, 4, mem)
	}
	return ESUCCESS
}

// environmentRefusal is what last_error tells of a record the host's
// environment refused: its kind, not the environment's words, which name
// the host's files (its directory, the user's home).
func environmentRefusal(err error) string {
	for _, kind := range []error{environment.ErrBusy, environment.ErrReadOnly, environment.ErrReplaced, environment.ErrClosed,
		environment.ErrCorrupt, environment.ErrNotEnvironment, environment.ErrNewerSchema, environment.ErrInvalidRecord,
		environment.ErrLogNotCopied, environment.ErrHardLinked, fs.ErrPermission, fs.ErrNotExist} {
		if errors.Is(err, kind) {
			return "the host's environment refused the record (" + kind.Error() + ")"
		}
	}
	return "the host's environment refused the record"
}
