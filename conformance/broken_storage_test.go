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

// cpuMemory is the cpu device's transfers as conformance.Memory.
type cpuMemory struct{ d *cpu.Device }

func (m cpuMemory) Upload(dst vkruntime.StorageHandle, data []byte) error {
	return m.d.Upload(context.Background(), dst, data)
}
func (m cpuMemory) Download(src vkruntime.StorageHandle, dst []byte) error {
	return m.d.Download(context.Background(), src, dst)
}

// cpuTarget is a correct storage target over the pure-Go device, the
// limit scaled by limitNum/limitDen (1/1 is honest).
func cpuTarget(cfg conformance.StorageConfig, limitNum, limitDen uint64) (conformance.StorageTarget, *cpu.Device, error) {
	d, err := cpu.New(cpu.WithMemoryLimit(cfg.MemoryLimit * limitNum / limitDen))
	if err != nil {
		return conformance.StorageTarget{}, nil, err
	}
	return conformance.StorageTarget{Storage: d.Storage(), Properties: d.Properties(), Memory: cpuMemory{d}, Held: d.Storage().Allocated, Close: d.Close}, d, nil
}

func storageReport(t *testing.T, ns conformance.NewStorage, run string) conformance.Report {
	t.Helper()
	rep := conformance.RunStorage(context.Background(), ns, conformance.Options{Run: regexp.MustCompile(run)})
	for _, r := range rep.Results {
		t.Logf("%s: %s %v %s", r.Check, r.Status, r.Evidence, r.Reason)
	}
	return rep
}

// The honest baseline passes.
func TestAnHonestWrappedStoragePasses(t *testing.T) {
	rep := storageReport(t, func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		tg, _, err := cpuTarget(cfg, 1, 1)
		return tg, err
	}, "^storage/")
	if len(rep.Failed()) != 0 {
		t.Fatalf("baseline failed: %v", rep.Failed())
	}
}

// A storage that holds up to 7/4 of the memory limit asked before it
// refuses: the limit is not honoured.
func TestSuiteFailsAStoragePastItsLimit(t *testing.T) {
	rep := storageReport(t, func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		tg, _, err := cpuTarget(cfg, 7, 4)
		return tg, err
	}, "^storage/")
	if r, _ := rep.Result("storage/oom-classified"); r.Status != conformance.Fail {
		t.Fatalf("a storage that holds 7/4 of the %d B memory limit it was asked for before refusing passed; storage/oom-classified: %s; failed checks: %v", 8<<20, r.Status, rep.Failed())
	}
}

// reusingStorage hands out ids from a LIFO free list: a stale id names the
// next allocation, so a transfer through it reaches another allocation's
// memory.
type reusingStorage struct {
	inner vkruntime.Storage
	mu    sync.Mutex
	next  vkruntime.StorageID
	free  []vkruntime.StorageID
	m     map[vkruntime.StorageID]vkruntime.StorageID // outer -> inner
}

func (s *reusingStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	h, err := s.inner.Alloc(size)
	if err != nil {
		return h, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var id vkruntime.StorageID
	if n := len(s.free); n > 0 {
		id, s.free = s.free[n-1], s.free[:n-1]
	} else {
		s.next++
		id = s.next
	}
	s.m[id] = h.ID
	h.ID = id
	return h, nil
}
func (s *reusingStorage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	in, ok := s.m[id]
	if ok {
		delete(s.m, id)
		s.free = append(s.free, id)
	}
	s.mu.Unlock()
	if ok {
		s.inner.Dealloc(in)
	}
}
func (s *reusingStorage) Flush() { s.inner.Flush() }
func (s *reusingStorage) tr(h vkruntime.StorageHandle) vkruntime.StorageHandle {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.m[h.ID]
	if !ok {
		in = 1 << 60
	}
	h.ID = in
	return h
}

// translatedMemory is the cpu device's transfers for a storage wrapping
// it, each handle translated to the device's by tr.
type translatedMemory struct {
	d  *cpu.Device
	tr func(vkruntime.StorageHandle) vkruntime.StorageHandle
}

func (m translatedMemory) Upload(dst vkruntime.StorageHandle, data []byte) error {
	return m.d.Upload(context.Background(), m.tr(dst), data)
}
func (m translatedMemory) Download(src vkruntime.StorageHandle, dst []byte) error {
	return m.d.Download(context.Background(), m.tr(src), dst)
}

// roundUp is n rounded up to a multiple of align.
func roundUp(align, n uint64) uint64 { return (n + align - 1) / align * align }

func TestSuiteFailsAStorageReusingReleasedIDs(t *testing.T) {
	rep := storageReport(t, func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		d, err := cpu.New(cpu.WithMemoryLimit(cfg.MemoryLimit))
		if err != nil {
			return conformance.StorageTarget{}, err
		}
		s := &reusingStorage{inner: d.Storage(), m: map[vkruntime.StorageID]vkruntime.StorageID{}}
		return conformance.StorageTarget{Storage: s, Properties: d.Properties(), Memory: translatedMemory{d, s.tr}, Held: d.Storage().Allocated, Close: d.Close}, nil
	}, "^storage/released-not-found$")
	r, _ := rep.Result("storage/released-not-found")
	if r.Status != conformance.Fail {
		t.Fatalf("a transfer through a released id wrote into another live allocation; storage/released-not-found: %s (%s)", r.Status, r.Reason)
	}
}

// staleMemory caches every Download by handle and never drops the cache
// on Upload: a range read twice reads what it held the first time.
type staleMemory struct {
	cpuMemory
	mu    sync.Mutex
	cache map[vkruntime.StorageHandle][]byte
}

func (m *staleMemory) Download(src vkruntime.StorageHandle, dst []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.cache[src]; ok {
		copy(dst, b)
		return nil
	}
	if err := m.cpuMemory.Download(src, dst); err != nil {
		return err
	}
	m.cache[src] = append([]byte(nil), dst...)
	return nil
}

func TestSuiteFailsAStorageWithStaleReads(t *testing.T) {
	rep := storageReport(t, func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		tg, d, err := cpuTarget(cfg, 1, 1)
		if err != nil {
			return tg, err
		}
		tg.Memory = &staleMemory{cpuMemory: cpuMemory{d}, cache: map[vkruntime.StorageHandle][]byte{}}
		return tg, nil
	}, "^storage/")
	if len(rep.Failed()) == 0 {
		t.Fatalf("a storage whose reads return the bytes of the first read of a range passed every storage check")
	}
}
