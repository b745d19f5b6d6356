package wasmhost

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero/api"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// A handle is a slot index plus one in its low indexBits bits and the
// slot's generation above them. Generations start at 1 and a slot whose
// generation would wrap is retired, so a stale handle never names a later
// buffer and no handle is 0.
const (
	indexBits = 20
	indexMask = 1<<indexBits - 1
	maxGen    = 1<<(32-indexBits) - 1
)

type slot struct {
	buf *client.Buffer // nil while free
	gen uint32
}

// instance is one running guest: its stream, its handles and its quotas. A
// guest runs on one goroutine, so nothing here is locked.
type instance struct {
	host   *Host
	ctx    context.Context // the guest's stream and dry-run mark, for client calls
	stream *client.Stream
	dry    bool
	// mem is the guest's memory (nil: it has none), looked up at its first
	// host call; a module's memory never moves.
	mem         api.Memory
	memResolved bool

	slots []slot
	free  []uint32 // free slot indices, reused last-freed first

	live, maxHandles uint32
	bytes, maxBytes  uint64
	// With a quota of device bytes: what its pools may reserve
	// (reservedBound), and the part of it that is default pages
	// (defaultSlack).
	bound, slack uint64
	// freed says the guest's pools may hold free pages a cleanup would
	// return: it freed a buffer since the last, or its stream held pages
	// when it started.
	freed bool
	// installed is the layout the guest installed on its stream, in force
	// while ownLayout.
	installed           memory.Layout
	ownLayout           bool
	peakLive, peakBytes uint64
	baseDevice, peakDev uint64
	peakReserved        uint64
	persistent          int
	records             int // memory records written
	last                failure
	calls, failedCalls  uint64
}

func newInstance(h *Host, ctx context.Context, s *client.Stream, cfg runConfig) *instance {
	inst := &instance{
		host: h, ctx: ctx, stream: s, maxHandles: cfg.maxHandles, maxBytes: cfg.maxDeviceBytes,
	}
	if inst.maxHandles == 0 {
		inst.maxHandles = DefaultMaxHandles
	}
	if inst.maxBytes > 0 {
		p, sparse := h.c.Properties(), h.c.SparseGranule() != 0
		inst.bound, inst.slack = reservedBound(p, sparse, inst.maxBytes), defaultSlack(p, sparse, inst.maxBytes)
		// A stream given with OnStream may hold free pages from before the
		// guest, counted against its bound: a cleanup may return them.
		inst.freed = s.Usage().BytesReserved > 0
	}
	inst.baseDevice = h.deviceBytes()
	return inst
}

// full reports whether the table has no slot left for another handle:
// every index a handle can carry is live or retired.
func (g *instance) full() bool { return len(g.free) == 0 && len(g.slots) >= maxTableHandles }

// add puts b in the table and returns its new handle; the table is not
// full.
func (g *instance) add(b *client.Buffer) uint32 {
	var i uint32
	if n := len(g.free); n > 0 {
		i = g.free[n-1]
		g.free = g.free[:n-1]
	} else {
		i = uint32(len(g.slots))
		g.slots = append(g.slots, slot{gen: 1})
	}
	s := &g.slots[i]
	s.buf = b
	g.live++
	g.bytes += b.Size()
	g.peakLive = max(g.peakLive, uint64(g.live))
	g.peakBytes = max(g.peakBytes, g.bytes)
	return s.gen<<indexBits | (i + 1)
}

// lookup is the live buffer handle names, or nil.
func (g *instance) lookup(handle uint32) *client.Buffer {
	i := handle&indexMask - 1 // a zero index wraps past every slot
	if uint64(i) >= uint64(len(g.slots)) {
		return nil
	}
	s := &g.slots[i]
	if s.buf == nil || s.gen != handle>>indexBits {
		return nil
	}
	return s.buf
}

// remove takes the buffer handle names out of the table, or returns nil.
func (g *instance) remove(handle uint32) *client.Buffer {
	b := g.lookup(handle)
	if b == nil {
		return nil
	}
	i := handle&indexMask - 1
	s := &g.slots[i]
	s.buf = nil
	g.live--
	g.bytes -= b.Size()
	if s.gen < maxGen {
		s.gen++
		g.free = append(g.free, i)
	}
	return b
}

// create makes a buffer of size bytes. A guest with a quota has its pools
// held to their bound: the buffer is first reserved lazily (its pages are
// counted, the device holds nothing yet), and if that takes the pools past
// the bound, their fully free pages and cached allocations go back to the
// device; still past it, the buffer is freed, its pages returned, and
// create answers EDQUOT, the device never having held them. Within the
// bound the buffer gets its memory at once, as an eager one would, unless
// the guest's is a dry run.
func (g *instance) create(size uint64) (*client.Buffer, Errno) {
	if g.maxBytes == 0 {
		b, err := g.stream.Empty(g.ctx, size)
		if err != nil {
			return nil, g.fail(err)
		}
		return b, ESUCCESS
	}
	before := g.stream.Usage().BytesReserved
	b, err := g.stream.Empty(dryrun.With(g.ctx), size)
	if err != nil {
		return nil, g.fail(err)
	}
	reserved := g.stream.Usage().BytesReserved
	// What b added to the pools is pages the device does not hold yet.
	lazy := reserved - min(reserved, before)
	if reserved > g.bound && g.freed {
		g.cleanup(0) // b is live: its pages stay
		reserved = g.stream.Usage().BytesReserved
	}
	if reserved > g.bound {
		if err := g.stream.Free(b); err != nil {
			return nil, g.fail(err)
		}
		// The page b opened, lazy, is counted until a cleanup returns it:
		// left, the pools would go on reserving past the bound
		// (memory_usage, the run's Usage, a later guest on the stream).
		g.cleanup(lazy)
		return nil, g.fail(fail(EDQUOT, "buffer_create: %d B more would make the guest's pools reserve %d B, past the %d B a guest with a quota of %d B may have them reserve (twice the quota plus %d B of default pages)",
			size, reserved, g.bound, g.maxBytes, g.slack))
	}
	if !g.dry {
		if err := g.stream.Back(g.ctx, b); err != nil {
			// The device refused b's pages: they go, as a refused
			// buffer's do.
			_ = g.stream.Free(b)
			g.cleanup(lazy)
			return nil, g.fail(err)
		}
	}
	return b, ESUCCESS
}

// cleanup returns the fully free pages and cached allocations of the
// guest's pools to the device; other streams' pools keep theirs. The
// device's flush may still free pages others released before, so it can
// hold less than when the guest started for reasons not the guest's own:
// the baseline PeakDeviceBytes is measured from drops by what the others
// gave back, or the guest's later pages would hide under it. lazy is what
// the pools reserve without device memory (a refused buffer's pages),
// which the cleanup returns without the device holding any less.
func (g *instance) cleanup(lazy uint64) {
	devBefore, ownBefore := g.host.deviceBytes(), g.ownDevice()
	ownBefore -= min(ownBefore, lazy)
	g.stream.MemoryCleanup()
	devAfter, ownAfter := g.host.deviceBytes(), g.ownDevice()
	g.freed = false
	if devBefore > devAfter {
		others := (devBefore - devAfter) - min(devBefore-devAfter, ownBefore-min(ownBefore, ownAfter))
		g.baseDevice -= min(g.baseDevice, others)
	}
}

// ownDevice is at most the device memory the guest's pools hold: what
// they reserve, none in a dry run.
func (g *instance) ownDevice() uint64 {
	if g.dry {
		return 0
	}
	return g.stream.Usage().BytesReserved
}

// fail remembers err as the guest's last failure and returns its status.
func (g *instance) fail(err error) Errno {
	g.last = failure{kind: failError, err: err}
	return errnoOf(err)
}

// failShown is fail, where last_error tells the guest shown rather than
// err's text (unless shown is "").
func (g *instance) failShown(err error, shown string) Errno {
	g.last = failure{kind: failError, err: err, shown: shown}
	return errnoOf(err)
}

type failKind uint8

const (
	failNone        failKind = iota
	failRange                // ptr, n outside a guest memory of a bytes
	failHandle               // handle names no live buffer
	failOutOfBuffer          // b bytes at offset a outside a buffer of c bytes
	failError                // err
)

// failure is the guest's last failed call, kept by value so that a call
// that fails allocates nothing; its message is made only when the guest
// asks for it.
type failure struct {
	kind    failKind
	what    string
	handle  uint32
	ptr, n  uint32
	a, b, c uint64
	err     error
	shown   string // what last_error tells where not message's text
}

// guestMessage is what last_error tells the guest: message, or shown
// where the host's words name what the guest cannot see.
func (f *failure) guestMessage() string {
	if f.shown != "" {
		return f.shown
	}
	return f.message()
}

// message is the guest's last failure in the host's words (Result's
// LastError): what failed and why, without the status the guest already
// has. last_error tells the guest guestMessage.
func (f *failure) message() string {
	switch f.kind {
	case failRange:
		return fmt.Sprintf("%s: guest range [%d, %d) is outside the guest's %d B of memory", f.what, f.ptr, uint64(f.ptr)+uint64(f.n), f.a)
	case failHandle:
		return fmt.Sprintf("%s: handle %#x names no live buffer of this guest", f.what, f.handle)
	case failOutOfBuffer:
		return fmt.Sprintf("%s: handle %#x: %d B at offset %d is outside its %d B", f.what, f.handle, f.b, f.a, f.c)
	case failError:
		if m, ok := ownMemoryMessage(f.err); ok {
			return m
		}
		var se *StatusError
		if errors.As(f.err, &se) {
			return se.Err.Error()
		}
		return f.err.Error()
	}
	return ""
}

// ownMemoryMessage is what last_error tells of an allocation the client
// refused, the device out of memory or the stream's capped pools full: the
// guest's request and its own pools, not the client's account, which names
// every stream's largest buffers (another guest's buffers and sizes, read
// through last_error) and, for the device, its bytes in use.
func ownMemoryMessage(err error) (string, bool) {
	oom := errors.Is(err, vkruntime.ErrOutOfDeviceMemory)
	var ae *client.AllocationError
	if !errors.As(err, &ae) {
		if !oom {
			return "", false
		}
		return "the device is out of memory", true
	}
	why := "the device is out of memory"
	var ce *vkruntime.CapacityError
	switch {
	case oom:
	case errors.As(err, &ce):
		why = ce.Error() // the guest's own capped pools, in numbers
	default:
		why = "this guest's pools are full"
	}
	u := ae.Pools.Usage()
	allocs := fmt.Sprintf("%d live allocations", u.NumberAllocs)
	if u.NumberAllocs == 1 {
		allocs = "1 live allocation"
	}
	return fmt.Sprintf("%d B (%s) could not be allocated after a cleanup: %s; this guest's pools hold %s reserved, %s in %s, under layout %s",
		ae.Size, memory.FormatBytes(ae.Size), why, memory.FormatBytes(u.BytesReserved), memory.FormatBytes(u.BytesInUse), allocs, ae.Layout.Brief()), true
}

// sampleReserved notes the bytes the guest's pools reserve now, for the
// run's peak: they only grow when a buffer is made.
func (g *instance) sampleReserved() {
	g.peakReserved = max(g.peakReserved, g.stream.Usage().BytesReserved)
}

// sampleDevice notes the device bytes held now, for the run's peak.
func (g *instance) sampleDevice() {
	if now := g.host.deviceBytes(); now > g.baseDevice {
		g.peakDev = max(g.peakDev, now-g.baseDevice)
	}
}

// release frees everything the guest still holds: its buffers and its open
// persistent windows. It runs however the guest ended.
func (g *instance) release() error {
	var errs []error
	for ; g.persistent > 0; g.persistent-- {
		_ = g.stream.EndPersistent() // a closed stream's went with it
	}
	// A stream the host program closed under the guest freed its buffers
	// as it closed: they are gone, not left.
	closed := g.stream.Closed()
	for i := range g.slots {
		if b := g.slots[i].buf; b != nil && !closed {
			if err := g.stream.Free(b); err != nil {
				errs = append(errs, fmt.Errorf("freeing buffer %d the guest left: %w", b.ID(), err))
			}
			g.slots[i].buf = nil
		}
	}
	g.slots, g.free, g.live, g.bytes = nil, nil, 0, 0
	return errors.Join(errs...)
}
