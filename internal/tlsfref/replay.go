package tlsfref

import (
	"errors"
	"fmt"
	"time"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
)

const (
	// VMABlockSize and VMAAlignment are the virtual block VMA replayed the
	// shipped streams in (testdata/traces/README.md): one block of 32 GiB
	// that its figures treat as growable (the extent is what it reached),
	// every allocation aligned to 32 B.
	VMABlockSize = 32 << 30
	VMAAlignment = 32
)

// Result is what one replay of a stream through a Block measured. Apart
// from its Timing it is deterministic.
type Result struct {
	Trace         string
	PeakLiveBytes uint64
	// ExtentBytes is the highest end any allocation reached: the size the
	// growable block needed.
	ExtentBytes uint64
	// BlockBytes is the block the stream was replayed in: VMABlockSize, or
	// a larger power of two where the stream needed more.
	BlockBytes uint64
}

// Ratio is ExtentBytes over PeakLiveBytes.
func (r *Result) Ratio() float64 {
	if r.PeakLiveBytes == 0 {
		return 0
	}
	return float64(r.ExtentBytes) / float64(r.PeakLiveBytes)
}

// Measure replays every event of t, on whatever stream, through one fresh
// Block of VMABlockSize with VMAAlignment, timed from the first event to the
// last as replay.Measure times vkrt's pools: the same per-event bookkeeping
// (a handle and size per allocation, live and peak bytes), none of the
// setup. A stream the block cannot hold is replayed again in one twice as
// large, as a growable block would grow, up to 2^62 B: a stream of 40 GB
// live failed the whole --bench row.
func Measure(t *trace.Trace) (*Result, replay.Timing, error) {
	for size := uint64(VMABlockSize); ; size *= 2 {
		res, timing, err := measureIn(t, size)
		var full *OutOfSpaceError
		if errors.As(err, &full) && size < maxBlockSize {
			continue
		}
		return res, timing, err
	}
}

// maxBlockSize is the largest block Measure replays a stream in.
const maxBlockSize = 1 << 62

// measureIn is Measure in one block of size bytes.
func measureIn(t *trace.Trace, size uint64) (*Result, replay.Timing, error) {
	b, err := New(size, VMAAlignment)
	if err != nil {
		return nil, replay.Timing{}, err
	}
	res := &Result{Trace: t.Name, BlockBytes: size}
	handles := make([]Handle, t.Allocations)
	sizes := make([]uint64, t.Allocations)
	var live uint64
	start := time.Now()
	for _, e := range t.Events {
		if e.Op == trace.OpAlloc {
			a, err := b.Allocate(e.Size)
			if err != nil {
				return nil, replay.Timing{}, fmt.Errorf("tlsfref: %s %s: %d B with %d B live: %w", t.Name, e.Where(), e.Size, live, err)
			}
			handles[e.Index], sizes[e.Index] = a.Handle, e.Size
			live += e.Size
			res.PeakLiveBytes = max(res.PeakLiveBytes, live)
		} else {
			if err := b.Free(handles[e.Index]); err != nil {
				return nil, replay.Timing{}, fmt.Errorf("tlsfref: %s %s: free: %w", t.Name, e.Where(), err)
			}
			live -= sizes[e.Index]
		}
	}
	timing := replay.Timing{Events: len(t.Events), Elapsed: time.Since(start)}
	res.ExtentBytes = b.HighWater()
	return res, timing, nil
}
