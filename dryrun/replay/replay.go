// Package replay drives vkrt's memory pools over a recorded allocation
// stream ([trace.Trace]) on a storage that counts device allocations and
// holds no memory ([CountingStorage]), so a layout or a plan can be judged
// against a real model's stream on any machine. Its [Result] is
// deterministic; the wall-clock cost of a replay is measured apart
// ([Measure]).
package replay

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// H200 are the device properties replays assume unless told otherwise: an
// NVIDIA H200 as Vulkan sees it, but for the page limit. MaxPageSize stays
// under its maxStorageBufferRange of 4 GiB − 1, so one page binds as one
// buffer; vk on the H200 also caps pages at its maxMemoryAllocationSize
// (4 GiB − 2 MiB), which the model does not apply.
func H200() vkruntime.DeviceProperties {
	return vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 4<<30 - 16, MemorySize: 150_000_000_000}
}

// Options configure a replay.
type Options struct {
	// Device is the device the pools size themselves by; zero means H200.
	Device vkruntime.DeviceProperties
	// Progress, when set, is called every so many events with how many are
	// done, and once at the end.
	Progress func(done, total int)
	// NoSparse models a device without sparse residency (lavapipe): the
	// Virtual layout then builds the SubSlices pools. Otherwise the storage
	// offers sparse residency in granules of Granule bytes, a power of two
	// (0: H200Granule); a replay with another is refused, and so is one of
	// the Virtual layout with a granule its pools cannot take on Device
	// (too small, not a multiple of its alignment, past its memory), which
	// would build the SubSlices pools in its place.
	NoSparse bool
	Granule  uint64
	// Observe, when set, is called after each event with its index in the
	// stream and the manager holding its result, for callers that chart the
	// pools over the stream. It must only read the manager.
	Observe func(event int, m *memory.Manager)
}

func (o Options) device() vkruntime.DeviceProperties {
	if o.Device == (vkruntime.DeviceProperties{}) {
		return H200()
	}
	return o.Device
}

// Result is what one replay of a stream measured. It is deterministic: the
// same stream, layout and device give the same Result.
type Result struct {
	Trace       string
	Events      int
	Allocations int
	Layout      memory.Layout
	// PeakLiveBytes is the most requested bytes live at once.
	PeakLiveBytes uint64
	// ReservedPeakBytes is the most bytes the pools reserved at once.
	ReservedPeakBytes uint64
	// DriverAllocs counts the device allocations the pools made.
	DriverAllocs uint64
	// BindCalls counts the submissions that bound or unbound device memory
	// in a virtual range (vkQueueBindSparse), Binds the ranges they bound.
	// BoundBytes and UnboundBytes are the memory those submissions bound
	// and unbound: on the H200 a submission's time grows with its ranges
	// and bytes as well as with the submissions (BenchmarkSparseBind in
	// vk: 131 µs for one granule, 159 µs for 256 in one range, 1.41 ms for
	// 64 apart).
	BindCalls, Binds         uint64
	BoundBytes, UnboundBytes uint64
	// Retries counts reservations the device refused that succeeded after
	// an explicit cleanup, as a client retries them.
	Retries uint64
	// managersCleaned counts the managers the retries cleaned up.
	managersCleaned int
	// Spills counts reservations that missed their planned place: a full
	// capped pool or an arena miss.
	Spills uint64
	// Report is the pools' report at the end of the stream, with whatever the
	// stream never freed still live: of the first stream the trace allocates
	// on, the only one in most traces.
	Report memory.Report
	// Streams are the reports of every stream's pools, in the order the
	// trace first allocates on them.
	Streams []StreamReport
}

// StreamReport is the report of one stream's pools after a replay.
type StreamReport struct {
	Stream uint32
	Report memory.Report
}

// Timing is the wall-clock cost of one replay, apart from its Result
// because it differs from run to run.
type Timing struct {
	Events  int
	Elapsed time.Duration
}

// NsPerEvent is the cost of one replayed allocate-or-free event.
func (t Timing) NsPerEvent() float64 {
	if t.Events == 0 {
		return 0
	}
	return float64(t.Elapsed.Nanoseconds()) / float64(t.Events)
}

// Ratio is ReservedPeakBytes over PeakLiveBytes.
func (r *Result) Ratio() float64 {
	if r.PeakLiveBytes == 0 {
		return 0
	}
	return float64(r.ReservedPeakBytes) / float64(r.PeakLiveBytes)
}

// progressEvery is how many events pass between progress calls.
const progressEvery = 1 << 14

// Run replays the stream against memory managers with layout l over one
// CountingStorage, pages mapped eagerly, so DriverAllocs is what a real run
// of the stream would ask the driver for. Each of the trace's streams gets
// its own manager, as each stream of a client has its own pools. A
// reservation the pools refuse stops the replay with an error naming the
// trace line; a trace Read could not have made (trace.Check) is refused
// before anything is replayed, and a nil one with trace.ErrNil.
func Run(t *trace.Trace, l memory.Layout, opts Options) (*Result, error) {
	res, _, err := Measure(t, l, opts)
	return res, err
}

// virtualPool says whether the pools of a report are a Virtual layout's
// pool, as the manager built it on a storage with sparse residency.
func virtualPool(r memory.Report) bool {
	if len(r.Dynamic) != 1 {
		return false
	}
	_, ok := r.Dynamic[0].Kind.(memory.VirtualKind)
	return ok
}

// unusableGranule says why the pools took no sparse granule of g bytes,
// a power of two, on the device d modelled by storage s.
func unusableGranule(g uint64, d vkruntime.DeviceProperties, s *CountingStorage) string {
	switch {
	case g%d.Alignment != 0:
		return fmt.Sprintf("not a multiple of the device's alignment of %d B", d.Alignment)
	case d.MemorySize != 0 && g > d.MemorySize:
		return fmt.Sprintf("more than the device's memory of %d B", d.MemorySize)
	case g > s.MaxVirtualSize():
		return fmt.Sprintf("more than the %d B its sparse ranges may take", s.MaxVirtualSize())
	}
	return "too small for the pools"
}

// streamPools are the managers of a replay, one per stream in the order the
// trace first allocates on them.
type streamPools struct {
	storage  *CountingStorage
	device   vkruntime.DeviceProperties
	layout   memory.Layout
	byStream map[uint32]int
	managers []*memory.Manager
	streams  []uint32
	// changed lists the managers that may have had events since the last
	// cleanup, once each (dirty); the one at hand is taken as changed
	// too. A manager left as cleanup left it has nothing more to give
	// back, and cleaning every stream's at each refusal made a trace of
	// 73,000 streams, each refused a page once the device was full, take
	// 37 s under sub-slices (2.3 s cleaning these alone).
	changed []int
	dirty   []bool
	// cleaned counts the managers cleaned up (for tests).
	cleaned int
	// warnLayout: the layout's warnings, said once for all the streams.
	warnLayout func(memory.Layout, string)
}

// touch marks manager k as having had events since the last cleanup.
func (p *streamPools) touch(k int) {
	if !p.dirty[k] {
		p.dirty[k] = true
		p.changed = append(p.changed, k)
	}
}

func (p *streamPools) manager(stream uint32) (*memory.Manager, int, error) {
	if i, ok := p.byStream[stream]; ok {
		return p.managers[i], i, nil
	}
	// A plan that spills shows in Spills; the pools need not warn as well.
	// What the layout asks past the device is said once, not a stream each.
	m, err := memory.NewManager(p.storage, p.device, p.layout, memory.WithLogger(slog.New(slog.DiscardHandler)),
		memory.WithLayoutWarnings(p.warnLayout))
	if err != nil {
		return nil, 0, err
	}
	p.byStream[stream] = len(p.managers)
	p.managers, p.streams, p.dirty = append(p.managers, m), append(p.streams, stream), append(p.dirty, false)
	p.touch(len(p.managers) - 1)
	return m, len(p.managers) - 1, nil
}

// cleanup gives back what every stream's pools hold unused: those of the
// managers changed since the last cleanup, and of the one at hand.
func (p *streamPools) cleanup(atHand int) {
	p.touch(atHand)
	for _, k := range p.changed {
		p.managers[k].Cleanup(true)
		p.dirty[k] = false
	}
	p.cleaned += len(p.changed)
	p.changed = p.changed[:0]
}

// liveAlloc is what a live allocation needs at its free, side by side:
// one store at the allocation, one line read at the free.
type liveAlloc struct {
	h     memory.Handle
	owner int32 // the manager of the allocation
	size  uint64
}

// replayer is the state of Measure's loop, kept in a struct of its own so
// that the loop reads it through one pointer, not reloading a large
// function's spilled variables after each call to the pools. The loop
// does no more per event than a replay must: the manager of the last
// allocation's stream is kept at hand, errors are classified only when
// there is one, and the reserved peak is the storage's, read once at the
// end (the bytes every stream's pools hold are the bytes the storage
// holds; TestReservedPeakIsThePoolsPeak checks it).
type replayer struct {
	t        *trace.Trace
	res      *Result
	pools    *streamPools
	managers []*memory.Manager
	m        *memory.Manager // the manager of stream
	k        int             // its index in managers
	stream   uint32
	allocs   []liveAlloc
	live     uint64
	observe  func(int, *memory.Manager)
}

// events replays run, the events from index from of the trace.
func (r *replayer) events(run []trace.Event, from int) error {
	for i := range run {
		e := &run[i]
		if e.Op == trace.OpAlloc {
			if e.Stream != r.stream {
				if err := r.switchTo(e); err != nil {
					return err
				}
			}
			h, err := r.m.Reserve(e.Size, memory.Eager)
			if err != nil {
				if h, err = r.retry(e, err); err != nil {
					return err
				}
			}
			r.allocs[e.Index] = liveAlloc{h: h, owner: int32(r.k), size: e.Size}
			r.live += e.Size
			r.res.PeakLiveBytes = max(r.res.PeakLiveBytes, r.live)
			if r.observe != nil {
				r.observe(from+i, r.m)
			}
			continue
		}
		a := &r.allocs[e.Index]
		if int(a.owner) != r.k {
			r.pools.touch(int(a.owner))
		}
		fm := r.managers[a.owner]
		if err := fm.Free(a.h); err != nil {
			return fmt.Errorf("replay: %s: free: %w", at(r.t, e.Where()), err)
		}
		r.live -= a.size
		if r.observe != nil {
			r.observe(from+i, fm)
		}
	}
	return nil
}

// at names a place in trace t, as trace.Check names it: the trace's name
// before it, where the trace has one ("replay:  line 2" named nothing).
func at(t *trace.Trace, where string) string {
	if t.Name == "" {
		return where
	}
	return t.Name + " " + where
}

// switchTo makes the manager of e's stream the one at hand.
func (r *replayer) switchTo(e *trace.Event) error {
	m, k, err := r.pools.manager(e.Stream)
	if err != nil {
		return fmt.Errorf("replay: %s: stream %d: %w", at(r.t, e.Where()), e.Stream, err)
	}
	// The manager left has had the events since it came to hand.
	r.pools.touch(r.k)
	r.pools.touch(k)
	r.m, r.k, r.stream, r.managers = m, k, e.Stream, r.pools.managers
	return nil
}

// retry handles a reservation the pools refused with err: as a client
// does, when the device is out of memory it gives back what the pools
// hold unused and tries once more, tight (an allocation of its own size
// where a page does not fit).
func (r *replayer) retry(e *trace.Event, err error) (memory.Handle, error) {
	var h memory.Handle
	if errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
		r.pools.cleanup(r.k)
		if h, err = r.m.ReserveTight(e.Size, memory.Eager); err == nil {
			r.res.Retries++
			return h, nil
		}
	}
	return h, fmt.Errorf("replay: %s: %d B with %d B live and %d B reserved: %w",
		at(r.t, e.Where()), e.Size, r.live, r.pools.storage.Counts().BytesHeld, err)
}

// Measure is Run, timed.
func Measure(t *trace.Trace, l memory.Layout, opts Options) (*Result, Timing, error) {
	if err := t.Check(); err != nil {
		return nil, Timing{}, fmt.Errorf("replay: %w", err)
	}
	if g := opts.Granule; !opts.NoSparse && g&(g-1) != 0 {
		// The pools take no such granule, and built the SubSlices pools
		// for the Virtual layout as for a device without sparse
		// residency, saying nothing.
		return nil, Timing{}, fmt.Errorf("replay: a sparse granule of %d B (Options.Granule) is not a power of two, as a device's is", g)
	}
	device := opts.device()
	storage := NewCountingStorage(device.MemorySize)
	if !opts.NoSparse {
		storage.Granule = cmp.Or(opts.Granule, H200Granule)
	}
	pools := &streamPools{storage: storage, device: device, layout: l, byStream: make(map[uint32]int),
		warnLayout: memory.LayoutWarningsOnce(func() *slog.Logger { return nil })}
	// The layout is checked before the stream starts, on the first stream
	// the trace allocates on (stream 0 for a trace with no allocations).
	first := uint32(0)
	for _, e := range t.Events {
		if e.Op == trace.OpAlloc {
			first = e.Stream
			break
		}
	}
	m, k, err := pools.manager(first)
	if err != nil {
		if t.Name == "" {
			return nil, Timing{}, fmt.Errorf("replay: %w", err)
		}
		return nil, Timing{}, fmt.Errorf("replay: %s: %w", t.Name, err)
	}
	if _, virtual := l.Virtual(); virtual && opts.Granule != 0 && !opts.NoSparse && !virtualPool(m.Report()) {
		// The pools took no such granule, as for a granule not a power
		// of two, and built the SubSlices pools for the Virtual layout,
		// saying nothing.
		return nil, Timing{}, fmt.Errorf("replay: a sparse granule of %d B (Options.Granule) is %s: the pools take none such, "+
			"and the Virtual layout would be the SubSlices pools; give a granule this device takes, or NoSparse to model one without sparse residency",
			opts.Granule, unusableGranule(opts.Granule, device, storage))
	}
	res := &Result{Trace: t.Name, Events: len(t.Events), Allocations: t.Allocations, Layout: l}
	r := &replayer{t: t, res: res, pools: pools, m: m, k: k, stream: first, managers: pools.managers,
		allocs: make([]liveAlloc, t.Allocations), observe: opts.Observe}
	// The loop is what --bench times against the reference allocator, so
	// it does no more per event than a replay must (see replayer.events);
	// progress is told between runs of events rather than checked at each.
	progress, events := opts.Progress, t.Events
	start := time.Now()
	for from := 0; from < len(events); from += progressEvery {
		if progress != nil {
			progress(from, len(events))
		}
		if err := r.events(events[from:min(from+progressEvery, len(events))], from); err != nil {
			return nil, Timing{}, err
		}
	}
	timing := Timing{Events: len(t.Events), Elapsed: time.Since(start)}
	if opts.Progress != nil {
		opts.Progress(len(t.Events), len(t.Events))
	}
	counts := storage.Counts()
	res.ReservedPeakBytes = counts.PeakBytesHeld
	res.DriverAllocs, res.BindCalls, res.Binds = counts.Allocs, counts.BindCalls, counts.Binds
	res.BoundBytes, res.UnboundBytes = counts.BoundBytes, counts.UnboundBytes
	res.managersCleaned = pools.cleaned
	for i, m := range pools.managers {
		res.Spills += m.Spills()
		res.Streams = append(res.Streams, StreamReport{Stream: pools.streams[i], Report: m.Report()})
	}
	res.Report = res.Streams[0].Report
	return res, timing, nil
}
