package plan

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Cutting an arena plan's pages keeps it sound and in place: every
// allocation lies where it did, counted from its page's start, and the
// pieces reserve what the pages did. A cut falls only where the piece
// since the last one holds its share.
func TestCutPagesKeepsEveryAllocationWhereItWas(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cut := 0
	for range 100 {
		lifetimes := randomLifetimes(rng, 1+rng.IntN(300), uint64(1)<<(20+rng.IntN(8)))
		for _, order := range planStrategies {
			a, err := assignArena(lifetimes, uint64(1)<<(24+rng.IntN(8)), order)
			require.NoError(t, err)
			pieces := assignmentOf(cutPages(arenaPlanOf(a, lifetimes)))
			checkAssignment(t, lifetimes, pieces)
			require.Equal(t, a.Reserved(), pieces.Reserved())
			cut += len(pieces.Pages) - len(a.Pages)
			// The pieces of a page follow one another: each allocation's
			// piece starts where its offset in the page less its offset
			// in the piece says, and pieces are in the pages' order.
			starts := make([]uint64, len(pieces.Pages))
			pageOf := make([]int, len(pieces.Pages))
			for k, pl := range pieces.Placements {
				was := a.Placements[k]
				starts[pl.Page], pageOf[pl.Page] = was.Offset-pl.Offset, int(was.Page)
			}
			for i := range pieces.Pages {
				if i == 0 || pageOf[i] != pageOf[i-1] {
					require.Zero(t, starts[i], "piece %d starts page %d", i, pageOf[i])
					continue
				}
				require.Equal(t, starts[i-1]+pieces.Pages[i-1], starts[i], "piece %d follows piece %d", i, i-1)
				require.GreaterOrEqual(t, pieces.Pages[i-1], max(a.Pages[pageOf[i]]/pieceShare, minPieceBytes),
					"piece %d is cut short of its share", i-1)
			}
		}
	}
	require.Positive(t, cut, "no page was cut")
}

// assignmentOf is the assignment an arena plan holds.
func assignmentOf(plan memory.ArenaPlan) assignment {
	a := assignment{Pages: plan.Pages, Placements: make([]placement, len(plan.Slots))}
	for k, s := range plan.Slots {
		a.Placements[k] = placement{Page: s.Page, Offset: s.Offset}
	}
	return a
}

// streamEvent is an allocation of size bytes on stream, or the free of
// allocation index.
type streamEvent struct {
	alloc  bool
	size   uint64
	stream uint32
	index  int32 // the allocation a free releases
}

// streamTrace is the trace of events, allocations numbered in order.
func streamTrace(name string, events []streamEvent) *trace.Trace {
	t := &trace.Trace{Name: name}
	for _, e := range events {
		if e.alloc {
			t.Events = append(t.Events, trace.Event{Op: trace.OpAlloc, Index: int32(t.Allocations), Size: e.size, Stream: e.stream})
			t.Allocations++
			continue
		}
		t.Events = append(t.Events, trace.Event{Op: trace.OpFree, Index: e.index})
	}
	return t
}

// An arena page is one device allocation, held while any of its slots is
// live. A second stream under one stream's plan that makes the plan's
// first reservation (a model's small, long-lived one) and then goes its
// own way kept the whole page for it, beside its own large buffer: on a
// device the run fits with no plan, the plan failed it. Pieces of the page
// hold only what that reservation's piece holds.
func TestAStreamThatLeavesAnArenaPlanEarlyHoldsOnlyItsPiece(t *testing.T) {
	const mib = 1 << 20
	workload := func(stream uint32, first int32) []streamEvent {
		ev := []streamEvent{{alloc: true, size: mib, stream: stream}}
		for range 8 {
			ev = append(ev, streamEvent{alloc: true, size: 32 * mib, stream: stream})
		}
		for k := range int32(8) {
			ev = append(ev, streamEvent{index: first + 1 + k})
		}
		return ev
	}
	from := streamTrace("from", workload(0, 0))
	// Stream 0 runs the planned workload; stream 1 makes its first
	// reservation and then one buffer of 300 MiB, past the room of the
	// page it holds.
	on := streamTrace("on", append(workload(0, 0),
		streamEvent{alloc: true, size: mib, stream: 1},
		streamEvent{alloc: true, size: 300 * mib, stream: 1},
		streamEvent{index: 10}))
	dev := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 4<<30 - 256, MemorySize: 640 * mib}
	opts := replay.Options{Device: dev, NoSparse: true}
	l, plan, peak := strongArena(t, from, opts)
	require.Greater(t, len(plan.Pages), 1, "the arena's 257 MiB are cut into pieces")
	_, err := replay.Run(on, memory.SubSlicesLayout(), opts)
	require.NoError(t, err, "the device holds the run with no plan")
	r, err := replay.Run(on, l, opts)
	require.NoError(t, err, "nor does the plan fail it")
	require.LessOrEqual(t, r.ReservedPeakBytes, dev.MemorySize)
	own, err := replay.Run(from, l, opts)
	require.NoError(t, err)
	require.Equal(t, peak, own.ReservedPeakBytes, "the planned run reserves its peak, pieces or not")
}
