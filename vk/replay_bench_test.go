//go:build cgo

package vk

import (
	"errors"
	"testing"
	"time"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// bindCounting passes a storage through, counting its sparse-binding
// submissions and timing them and its device allocations.
type bindCounting struct {
	*Storage
	calls             int
	binding, alloting time.Duration
}

func (s *bindCounting) Bind(virtual vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	s.calls++
	start := time.Now()
	defer func() { s.binding += time.Since(start) }()
	return s.Storage.Bind(virtual, binds)
}

func (s *bindCounting) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	start := time.Now()
	defer func() { s.alloting += time.Since(start) }()
	return s.Storage.Alloc(size)
}

// BenchmarkReplayOnTheDevice replays each shipped stream's reservations
// and frees through the default (Virtual) layout over this device's own
// storage, with no compute: the device allocations and sparse-binding
// submissions are real, so a reservation costs what it costs a run on
// this device, where `vkrt replay --bench` counts them and times the host
// alone. It reports the time an event and the submissions a replay; it
// needs sparse residency.
func BenchmarkReplayOnTheDevice(b *testing.B) {
	d := openTestDevice(b)
	if d.storage.SparseGranule() == 0 {
		b.Skipf("device %s has no sparse residency", d.Name())
	}
	for _, name := range []string{"bert_dynamic", "gpt2_train", "llama_generate", "resnet50_train"} {
		tr := tracetest.Read(b, name)
		b.Run(name, func(b *testing.B) {
			var elapsed, binding, alloting time.Duration
			var calls int
			for range b.N {
				e, c, err := replayOnStorage(tr, d.storage, d.Properties())
				if err != nil {
					b.Fatal(err)
				}
				elapsed, calls, binding, alloting = elapsed+e, calls+c.calls, binding+c.binding, alloting+c.alloting
			}
			n := float64(b.N * len(tr.Events))
			b.ReportMetric(float64(elapsed.Nanoseconds())/n, "ns/event")
			b.ReportMetric(float64(binding.Nanoseconds())/n, "bind-ns/event")
			b.ReportMetric(float64(alloting.Nanoseconds())/n, "alloc-ns/event")
			b.ReportMetric(float64(calls)/float64(b.N), "binds/replay")
		})
	}
}

// replayOnStorage replays tr eagerly through the Virtual layout over s:
// how long the events took, and the storage's submissions and the time in
// them and in its device allocations.
func replayOnStorage(tr *trace.Trace, s *Storage, props vkruntime.DeviceProperties) (time.Duration, *bindCounting, error) {
	counting := &bindCounting{Storage: s}
	m, err := memory.NewManager(counting, props, memory.VirtualLayout(memory.VirtualPlan{}))
	if err != nil {
		return 0, nil, err
	}
	handles := make([]memory.Handle, tr.Allocations)
	start := time.Now()
	for _, e := range tr.Events {
		if e.Op == trace.OpAlloc {
			if handles[e.Index], err = m.Reserve(e.Size, memory.Eager); err != nil {
				return 0, nil, err
			}
			continue
		}
		if err := m.Free(handles[e.Index]); err != nil {
			return 0, nil, err
		}
	}
	elapsed := time.Since(start)
	// What the stream leaves live (its weights) goes too, so the next
	// replay starts from nothing.
	for _, h := range handles {
		if !h.IsZero() {
			_ = m.Free(h) // ErrNotFound for those the stream freed
		}
	}
	m.Cleanup(true)
	s.Flush()
	if held := m.Usage().BytesReserved; held != 0 {
		return 0, nil, errors.New("the pools hold memory after a cleanup with nothing live")
	}
	return elapsed, counting, nil
}
