package dryrun

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// H200 are the device properties replays assume unless told otherwise: an
// NVIDIA H200 as Vulkan sees it. MaxPageSize stays under its
// maxStorageBufferRange of 4 GiB − 1, so one page binds as one buffer.
var H200 = vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 4<<30 - 16, MemorySize: 150_000_000_000}

// ReplayOptions configure a replay.
type ReplayOptions struct {
	// Device is the device the pools size themselves by; zero means H200.
	Device vkruntime.DeviceProperties
	// Progress, when set, is called every so many events with how many are
	// done, and once at the end.
	Progress func(done, total int)
}

func (o ReplayOptions) device() vkruntime.DeviceProperties {
	if o.Device == (vkruntime.DeviceProperties{}) {
		return H200
	}
	return o.Device
}

// ReplayResult is what one replay of a stream measured.
type ReplayResult struct {
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
	// Spills counts reservations that missed their planned place: a full
	// capped pool or an arena miss.
	Spills uint64
	// Report is the pools' report at the end of the stream, with whatever the
	// stream never freed still live.
	Report     memory.Report
	NsPerEvent float64
}

// Ratio is ReservedPeakBytes over PeakLiveBytes.
func (r *ReplayResult) Ratio() float64 {
	if r.PeakLiveBytes == 0 {
		return 0
	}
	return float64(r.ReservedPeakBytes) / float64(r.PeakLiveBytes)
}

// progressEvery is how many events pass between progress calls.
const progressEvery = 1 << 14

// Replay runs the stream against a memory manager with layout l over a
// CountingStorage, pages mapped eagerly, so DriverAllocs is what a real run
// of the stream would ask the driver for. The stream's streams share one
// manager. A reservation the pools refuse stops the replay with an error
// naming the trace line.
func Replay(t *Trace, l memory.Layout, opts ReplayOptions) (*ReplayResult, error) {
	device := opts.device()
	storage := NewCountingStorage(device.MemorySize)
	m, err := memory.NewManager(storage, device, l)
	if err != nil {
		return nil, fmt.Errorf("dryrun: replay %s: %w", t.Name, err)
	}
	// A plan that spills shows in Spills; the pools need not warn as well.
	m.SetLogger(slog.New(slog.DiscardHandler))
	res := &ReplayResult{Trace: t.Name, Events: len(t.Events), Allocations: t.Allocations, Layout: l}
	handles := make([]memory.Handle, t.Allocations)
	sizes := make([]uint64, t.Allocations)
	var live uint64
	start := time.Now()
	for i, e := range t.Events {
		if opts.Progress != nil && i%progressEvery == 0 {
			opts.Progress(i, len(t.Events))
		}
		if e.Op == OpAlloc {
			h, err := m.Reserve(e.Size, memory.Eager)
			if err != nil {
				return nil, fmt.Errorf("dryrun: replay %s line %d: %d B with %d B live and %d B reserved: %w",
					t.Name, e.Line, e.Size, live, m.Usage().BytesReserved, err)
			}
			handles[e.Index], sizes[e.Index] = h, e.Size
			live += e.Size
			res.PeakLiveBytes = max(res.PeakLiveBytes, live)
			res.ReservedPeakBytes = max(res.ReservedPeakBytes, m.Usage().BytesReserved)
			continue
		}
		if err := m.Free(handles[e.Index]); err != nil {
			return nil, fmt.Errorf("dryrun: replay %s line %d: free: %w", t.Name, e.Line, err)
		}
		handles[e.Index] = memory.Handle{}
		live -= sizes[e.Index]
	}
	elapsed := time.Since(start)
	if opts.Progress != nil {
		opts.Progress(len(t.Events), len(t.Events))
	}
	if len(t.Events) > 0 {
		res.NsPerEvent = float64(elapsed.Nanoseconds()) / float64(len(t.Events))
	}
	res.DriverAllocs = storage.Counts().Allocs
	res.Spills = m.Spills()
	res.Report = m.Report()
	return res, nil
}
