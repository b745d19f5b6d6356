package memory_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// nullStorage hands out ids and holds no memory, as a replay's storage does.
type nullStorage struct{ next vkruntime.StorageID }

func (s *nullStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	s.next++
	return vkruntime.StorageHandle{ID: s.next, Size: size}, nil
}
func (s *nullStorage) Dealloc(vkruntime.StorageID) {}
func (s *nullStorage) Flush()                      {}

// nullSparseStorage adds sparse residency at 2 MiB granules, binding
// nothing.
type nullSparseStorage struct{ nullStorage }

func (s *nullSparseStorage) SparseGranule() uint64  { return 2 << 20 }
func (s *nullSparseStorage) MaxVirtualSize() uint64 { return 1 << 40 }
func (s *nullSparseStorage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	return s.Alloc(size)
}
func (s *nullSparseStorage) ReleaseVirtual(vkruntime.StorageID)                     {}
func (s *nullSparseStorage) Bind(vkruntime.StorageID, []vkruntime.SparseBind) error { return nil }

// h200 are the properties of an NVIDIA H200 as the pools see it.
var h200 = vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 1 << 30, MemorySize: 150_000_000_000 &^ 15}

var benchLayouts = []struct {
	name   string
	layout memory.Layout
	locked bool // take a mutex around every call, as a caller sharing the manager does
}{
	{"SubSlices", memory.SubSlicesLayout(), false},
	{"SubSlicesLocked", memory.SubSlicesLayout(), true},
	{"ExclusivePages", memory.ExclusivePagesLayout(), false},
	{"Direct", memory.DirectLayout(), false},
	{"Virtual", memory.VirtualLayout(memory.VirtualPlan{}), false},
}

// BenchmarkTraceReplay replays the shipped allocation streams of real model
// workloads and reports the cost of one reserve-or-free event.
func BenchmarkTraceReplay(b *testing.B) {
	paths, err := filepath.Glob("../testdata/traces/*.trace.gz")
	require.NoError(b, err)
	require.NotEmpty(b, paths, "no traces under ../testdata/traces")
	for _, path := range paths {
		tr, err := trace.ReadFile(path)
		require.NoError(b, err)
		for _, l := range benchLayouts {
			b.Run(fmt.Sprintf("%s/%s", tr.Name, l.name), func(b *testing.B) {
				handles := make([]memory.Handle, tr.Allocations)
				m, err := memory.NewManager(&nullSparseStorage{}, h200, l.layout)
				require.NoError(b, err)
				var mu *sync.Mutex
				if l.locked {
					mu = &sync.Mutex{}
				}
				replay(b, m, mu, tr, handles) // warm the slabs
				b.ResetTimer()
				for b.Loop() {
					replay(b, m, mu, tr, handles)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(tr.Events)), "ns/event")
			})
		}
	}
}

// replay runs every event of the tr, then frees what the trace left
// live so the next pass starts from empty pools with their pages warm.
func replay(b *testing.B, m *memory.Manager, mu *sync.Mutex, tr *trace.Trace, handles []memory.Handle) {
	for _, e := range tr.Events {
		if mu != nil {
			mu.Lock()
		}
		var err error
		if e.Op == trace.OpAlloc {
			handles[e.Index], err = m.Reserve(e.Size, memory.Eager)
		} else {
			err = m.Free(handles[e.Index])
			handles[e.Index] = memory.Handle{}
		}
		if mu != nil {
			mu.Unlock()
		}
		if err != nil {
			b.Fatalf("%s line %d: %v", tr.Name, e.Line, err)
		}
	}
	for i, h := range handles {
		if !h.IsZero() {
			if err := m.Free(h); err != nil {
				b.Fatalf("%s: freeing what the trace left live: %v", tr.Name, err)
			}
			handles[i] = memory.Handle{}
		}
	}
}
