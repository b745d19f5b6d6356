package faultstorage_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/faultstorage"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// errorClass is what a failed call of each kind must surface as; Dealloc
// and Flush fail silently and must surface as nothing.
var errorClass = map[faultstorage.Op]error{
	faultstorage.Alloc:          vkruntime.ErrOutOfDeviceMemory,
	faultstorage.ReserveVirtual: vkruntime.ErrOutOfDeviceMemory,
	faultstorage.Bind:           vkruntime.ErrDeviceLost,
}

// workload is the start of a shipped trace: enough allocations and frees to
// grow, reuse and return pages in every pool kind.
func workload(t *testing.T) *trace.Trace {
	full := tracetest.Read(t, "bert_dynamic")
	n := 1500
	if tracetest.Quick() {
		n = 120
	}
	return &trace.Trace{Name: full.Name + " prefix", Events: full.Events[:min(n, len(full.Events))]}
}

type faultCase struct {
	name    string
	layout  memory.Layout
	granule uint64 // the inner storage's sparse granule; 0: none
}

func faultCases() []faultCase {
	capped := func(n uint64) *uint64 { return &n }
	return []faultCase{
		{"sub-slices", memory.SubSlicesLayout(), 0},
		{"exclusive-pages", memory.ExclusivePagesLayout(), 0},
		{"direct", memory.DirectLayout(), 0},
		{"sliced capped, spilling", memory.SlicedLayout(
			memory.SlicedPool{PageSize: 8 << 20, Pages: capped(2)},
			memory.SlicedPool{PageSize: 64 << 20, Pages: capped(2)},
			memory.SlicedPool{PageSize: 4 << 30}), 0},
		{"virtual", memory.VirtualLayout(memory.VirtualPlan{}), 2 << 20},
	}
}

// outcome is what one run of the workload saw.
type outcome struct {
	failures []error // the errors Reserve returned
}

// runWorkload replays tr through a manager over s, checking after every
// refused reservation that the refusal changed nothing and that the same
// reservation then succeeds (the storage fails once), and at the end that
// releasing everything and cleaning up returns every byte to the device.
func runWorkload(t *testing.T, tr *trace.Trace, c faultCase, s *faultstorage.Storage, armed string) outcome {
	t.Helper()
	m, err := memory.NewManager(s, replay.H200(), c.layout)
	require.NoError(t, err)
	m.SetLogger(slog.New(slog.DiscardHandler))
	var out outcome
	// reserve makes a reservation; when the storage fails it, it checks
	// the refusal and makes it again, which must then succeed.
	reserve := func(size uint64, at string) memory.Handle {
		before, injected := m.Report(), len(s.Injected())
		h, err := m.Reserve(size, memory.Eager)
		defer func() {
			sh, err := m.Resolve(h)
			require.NoError(t, err, "%s: %s", armed, at)
			require.Zero(t, s.Unbacked(sh), "%s: %s: a reservation lies on memory the device never bound", armed, at)
		}()
		if err == nil {
			return h
		}
		require.Greater(t, len(s.Injected()), injected, "%s: %s: reserve %d B failed with no failure injected: %v", armed, at, size, err)
		out.failures = append(out.failures, err)
		// A virtual pool keeps the memory it allocated for a bind the
		// device then refused, free for the next reservation; cleanup
		// returns it, which the end of the run checks.
		requireHoldsNoMore(t, before, m.Report(), armed+": "+at, strings.HasPrefix(armed, "Bind"))
		h, err = m.Reserve(size, memory.Eager)
		require.NoError(t, err, "%s: %s: the manager is usable after a failure", armed, at)
		return h
	}
	allocs := 0
	for _, e := range tr.Events {
		if e.Op == trace.OpAlloc {
			allocs = max(allocs, int(e.Index)+1)
		}
	}
	handles := make([]memory.Handle, allocs)
	live := make([]bool, len(handles))
	for i, e := range tr.Events {
		switch e.Op {
		case trace.OpAlloc:
			handles[e.Index], live[e.Index] = reserve(e.Size, fmt.Sprintf("event %d", i)), true
		case trace.OpFree:
			if int(e.Index) >= len(live) || !live[e.Index] {
				continue // its allocation is past the prefix
			}
			require.NoError(t, m.Free(handles[e.Index]), "%s: event %d", armed, i)
			live[e.Index] = false
		}
		if i%97 == 96 {
			m.Cleanup(false)
		}
	}
	for i, l := range live {
		if l {
			require.NoError(t, m.Free(handles[i]), armed)
		}
	}
	m.Cleanup(true)
	// A Flush that failed leaves releases stuck until the next one.
	m.Cleanup(true)
	require.Zero(t, m.Usage().NumberAllocs, armed)
	require.Zero(t, m.Usage().BytesReserved, "%s: the pools still hold memory after explicit cleanup", armed)
	allocs, bytes, ranges := s.Held()
	require.Zero(t, allocs, "%s: %d allocations (%d B) leaked: %v", armed, allocs, bytes, s.HeldIDs())
	require.Zero(t, ranges, "%s: virtual ranges leaked", armed)
	require.Zero(t, s.Stuck(), armed)
	require.Empty(t, s.Misuses(), armed)

	// Still usable: a reservation after all that works and returns.
	require.NoError(t, m.Free(reserve(1<<20, "after cleanup")), armed)
	m.Cleanup(true)
	m.Cleanup(true) // a refused unbind keeps its chunk until the next
	allocs, _, _ = s.Held()
	require.Zero(t, allocs, armed)
	return out
}

// requireHoldsNoMore: a reservation the storage failed made no reservation
// and holds no more memory than before, in any pool. A pool may have given
// memory back on the way (an exclusive pool returns idle pages when the
// device is full), and the demand it saw is recorded.
func requireHoldsNoMore(t *testing.T, before, after memory.Report, at string, mayKeepFreeMemory bool) {
	t.Helper()
	require.Len(t, after.Dynamic, len(before.Dynamic), at)
	pairs := [][2]memory.PoolReport{{before.Persistent, after.Persistent}}
	for i := range before.Dynamic {
		pairs = append(pairs, [2]memory.PoolReport{before.Dynamic[i], after.Dynamic[i]})
	}
	for i, p := range pairs {
		b, a := p[0], p[1]
		require.Equal(t, b.Usage.NumberAllocs, a.Usage.NumberAllocs, "%s: pool %d: a failed reserve made a reservation", at, i-1)
		require.Equal(t, b.Usage.BytesInUse, a.Usage.BytesInUse, "%s: pool %d", at, i-1)
		if !mayKeepFreeMemory {
			require.LessOrEqual(t, a.Usage.BytesReserved, b.Usage.BytesReserved, "%s: pool %d: a failed reserve kept memory", at, i-1)
			require.LessOrEqual(t, a.Pages, b.Pages, "%s: pool %d: a failed reserve kept a page", at, i-1)
		}
	}
}

func newInner(granule uint64) *replay.CountingStorage {
	inner := replay.NewCountingStorage(0)
	inner.Granule = granule
	return inner
}

// TestEveryStorageFailureSurfacesAsItsClassAndLeaksNothing fails each call
// of a real workload in turn — every Alloc, Dealloc, Flush, ReserveVirtual
// and Bind the manager makes — and checks the failure surfaces as its error
// class (or, for the silent ones, not at all), changes nothing, leaks
// nothing, and leaves the manager usable.
func TestEveryStorageFailureSurfacesAsItsClassAndLeaksNothing(t *testing.T) {
	tr := workload(t)
	for _, c := range faultCases() {
		t.Run(c.name, func(t *testing.T) {
			clean := faultstorage.Wrap(newInner(c.granule))
			base := runWorkload(t, tr, c, clean, "no failure")
			require.Empty(t, base.failures)
			points := 0
			for _, op := range faultstorage.Ops {
				calls := clean.Calls(op)
				for n := 1; n <= calls; n++ {
					armed := fmt.Sprintf("%s #%d of %d", op, n, calls)
					s := faultstorage.Wrap(newInner(c.granule)).FailNth(op, n, nil)
					got := runWorkload(t, tr, c, s, armed)
					require.Zero(t, s.FreedWhileBound(), "%s: memory released while still bound", armed)
					require.Equal(t, []string{fmt.Sprintf("%s #%d", op, n)}, s.Injected(), "%s: the armed call happened", armed)
					class, loud := errorClass[op]
					if !loud {
						require.Empty(t, got.failures, "%s fails silently", armed)
						continue
					}
					for _, err := range got.failures {
						require.True(t, errors.Is(err, class), "%s: surfaced as %v, not as %v", armed, err, class)
					}
					points += len(got.failures)
				}
			}
			t.Logf("%s: %d failures surfaced to Reserve", c.name, points)
			t.Logf("%s: %d calls failed one at a time (Alloc %d, Dealloc %d, Flush %d, ReserveVirtual %d, Bind %d)", c.name,
				clean.Calls(faultstorage.Alloc)+clean.Calls(faultstorage.Dealloc)+clean.Calls(faultstorage.Flush)+
					clean.Calls(faultstorage.ReserveVirtual)+clean.Calls(faultstorage.Bind),
				clean.Calls(faultstorage.Alloc), clean.Calls(faultstorage.Dealloc), clean.Calls(faultstorage.Flush),
				clean.Calls(faultstorage.ReserveVirtual), clean.Calls(faultstorage.Bind))
		})
	}
}
