package conformance_test

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"testing"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device/cpu"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// recyclingStorage keeps released pages for reuse by size, as a caching
// allocator does, with one flaw: an id released twice before a Flush is
// queued twice, so its page goes onto the free list twice and two later
// allocations share its bytes.
type recyclingStorage struct {
	d     *cpu.Device
	align uint64

	mu       sync.Mutex
	next     vkruntime.StorageID
	live     map[vkruntime.StorageID]recPage
	released map[vkruntime.StorageID]recPage // released since the last Flush
	pending  []recPage
	free     map[uint64][]vkruntime.StorageID // size -> inner ids
	held     uint64
}

type recPage struct {
	inner vkruntime.StorageID
	size  uint64
}

func (s *recyclingStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var inner vkruntime.StorageID
	if f := s.free[size]; len(f) > 0 {
		inner, s.free[size] = f[len(f)-1], f[:len(f)-1]
	} else {
		h, err := s.d.Storage().Alloc(size)
		if err != nil && errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
			for _, ids := range s.free { // give the cache back and try again
				for _, id := range ids {
					s.d.Storage().Dealloc(id)
				}
			}
			clear(s.free)
			s.d.Storage().Flush()
			h, err = s.d.Storage().Alloc(size)
		}
		if err != nil {
			return vkruntime.StorageHandle{}, err
		}
		inner = h.ID
	}
	s.next++
	s.live[s.next] = recPage{inner, size}
	s.held += roundUp(s.align, size)
	return vkruntime.StorageHandle{ID: s.next, Size: size}, nil
}

func (s *recyclingStorage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.live[id]; ok {
		delete(s.live, id)
		s.released[id] = p
		s.pending = append(s.pending, p)
		return
	}
	if p, ok := s.released[id]; ok { // the flaw: released again before Flush
		s.pending = append(s.pending, p)
	}
}

func (s *recyclingStorage) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pending {
		s.free[p.size] = append(s.free[p.size], p.inner)
		s.held -= min(s.held, roundUp(s.align, p.size))
	}
	s.pending = nil
	clear(s.released)
}

func (s *recyclingStorage) Held() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held // pending pages count until Flush
}

func (s *recyclingStorage) tr(h vkruntime.StorageHandle) vkruntime.StorageHandle {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.live[h.ID]
	if !ok {
		h.ID = 1 << 60 // unknown to the device: ErrNotFound
		return h
	}
	h.ID = p.inner
	return h
}

func newRecycling(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
	d, err := cpu.New(cpu.WithMemoryLimit(cfg.MemoryLimit))
	if err != nil {
		return conformance.StorageTarget{}, err
	}
	s := &recyclingStorage{d: d, align: d.Properties().Alignment, live: map[vkruntime.StorageID]recPage{},
		released: map[vkruntime.StorageID]recPage{}, free: map[uint64][]vkruntime.StorageID{}}
	return conformance.StorageTarget{Storage: s, Properties: d.Properties(), Memory: translatedMemory{d, s.tr}, Held: s.Held, Close: d.Close}, nil
}

func TestSuiteFailsADoubleReleaseBeforeFlush(t *testing.T) {
	// The flaw is real: released twice before a Flush, one page backs two
	// live allocations.
	tg, err := newRecycling(conformance.StorageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s, m := tg.Storage, tg.Memory
	a, _ := s.Alloc(4096)
	s.Dealloc(a.ID)
	s.Dealloc(a.ID)
	s.Flush()
	b, _ := s.Alloc(4096)
	c, _ := s.Alloc(4096)
	_ = m.Upload(b, make([]byte, 4096))
	ones := make([]byte, 4096)
	for i := range ones {
		ones[i] = 1
	}
	_ = m.Upload(c, ones)
	got := make([]byte, 4096)
	_ = m.Download(b, got)
	if got[0] != 1 {
		t.Fatalf("the flaw did not show: b and c do not alias")
	}

	rep := conformance.RunStorage(context.Background(), newRecycling, conformance.Options{Run: regexp.MustCompile(`^storage/`)})
	for _, r := range rep.Results {
		t.Logf("%s: %s %v %s", r.Check, r.Status, r.Evidence, r.Reason)
	}
	r, _ := rep.Result("storage/dealloc-unknown-changes-nothing")
	if r.Status != conformance.Fail {
		t.Fatalf("a storage that queues an id released twice before Flush twice (two later allocations then share one page) passed; storage/dealloc-unknown-changes-nothing: %s; failed checks: %v", r.Status, rep.Failed())
	}
}
