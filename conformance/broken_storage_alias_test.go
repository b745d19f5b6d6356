package conformance_test

import (
	"context"
	"regexp"
	"sync"
	"testing"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device/cpu"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// bigAliasStorage keeps the contract for allocations under 2 MiB; every
// allocation of 2 MiB or more is placed at the start of one shared 16 MiB
// page, so all the large ones alias each other. Its accounting and its
// memory limit are kept as if each allocation had its own memory.
type bigAliasStorage struct {
	d     *cpu.Device
	align uint64
	limit uint64

	mu     sync.Mutex
	next   vkruntime.StorageID
	live   map[vkruntime.StorageID]aliasPage
	dead   []aliasPage
	held   uint64
	shared vkruntime.StorageID // the inner page the large allocations share
}

type aliasPage struct {
	inner vkruntime.StorageID
	size  uint64
	own   bool // false: the shared page
}

const aliasThreshold, aliasShared = 2 << 20, 16 << 20

func (s *bigAliasStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit != 0 && s.held+roundUp(s.align, size) > s.limit {
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Usage: s.held, Limit: s.limit, HeapSize: s.d.Properties().MemorySize}
	}
	p := aliasPage{size: size, own: size < aliasThreshold || size > aliasShared}
	if p.own {
		h, err := s.d.Storage().Alloc(size)
		if err != nil {
			return h, err
		}
		p.inner = h.ID
	} else {
		if s.shared == 0 {
			h, err := s.d.Storage().Alloc(aliasShared)
			if err != nil {
				return h, err
			}
			s.shared = h.ID
		}
		p.inner = s.shared
	}
	s.next++
	s.live[s.next] = p
	s.held += roundUp(s.align, size)
	return vkruntime.StorageHandle{ID: s.next, Size: size}, nil
}

func (s *bigAliasStorage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.live[id]; ok {
		delete(s.live, id)
		s.dead = append(s.dead, p)
	}
}

func (s *bigAliasStorage) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.dead {
		if p.own {
			s.d.Storage().Dealloc(p.inner)
		}
		s.held -= roundUp(s.align, p.size)
	}
	s.dead = nil
	s.d.Storage().Flush()
}

func (s *bigAliasStorage) Held() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

func (s *bigAliasStorage) tr(h vkruntime.StorageHandle) vkruntime.StorageHandle {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.live[h.ID]
	if !ok {
		h.ID = 1 << 60
		return h
	}
	if h.Offset > p.size || h.Size > p.size-h.Offset { // bounds of the allocation, not of the shared page
		h.ID = 1 << 61
		return h
	}
	h.ID = p.inner
	return h
}

func newBigAlias(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
	d, err := cpu.New()
	if err != nil {
		return conformance.StorageTarget{}, err
	}
	s := &bigAliasStorage{d: d, align: d.Properties().Alignment, limit: cfg.MemoryLimit, live: map[vkruntime.StorageID]aliasPage{}}
	return conformance.StorageTarget{Storage: s, Properties: d.Properties(), Memory: translatedMemory{d, s.tr}, Held: s.Held, Close: d.Close}, nil
}

func TestSuiteFailsLargeAllocationsThatShareMemory(t *testing.T) {
	rep := conformance.RunStorage(context.Background(), newBigAlias, conformance.Options{Run: regexp.MustCompile(`^storage/`)})
	for _, r := range rep.Results {
		t.Logf("%s: %s %v %s", r.Check, r.Status, r.Evidence, r.Reason)
	}
	r, _ := rep.Result("storage/pages-disjoint")
	if r.Status != conformance.Fail {
		t.Fatalf("a storage placing every allocation of 2 MiB or more on the same bytes passed; storage/pages-disjoint: %s; failed checks: %v", r.Status, rep.Failed())
	}
}
