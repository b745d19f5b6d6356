package memory

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// fakeStorage is a test double for a device: it hands out ids, remembers
// live allocations and their sizes, counts driver calls and can refuse.
type fakeStorage struct {
	next      vkruntime.StorageID
	live      map[vkruntime.StorageID]uint64
	allocs    int
	deallocs  int
	flushes   int
	pending   int    // deallocations not flushed yet
	failAfter int    // refuse once this many more Allocs succeeded; -1 never
	limit     uint64 // MaxAllocationSize when non-zero (see limitedStorage)
}

func newFakeStorage() *fakeStorage {
	return &fakeStorage{live: map[vkruntime.StorageID]uint64{}, failAfter: -1}
}

func (s *fakeStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	if size == 0 {
		// A device may refuse it with an error of no kind (vk does): the
		// pools never ask it, a reservation of 0 B taking one alignment
		// unit.
		return vkruntime.StorageHandle{}, misuse("fake storage: an allocation of 0 B")
	}
	if s.failAfter == 0 {
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Detail: "test storage refuses"}
	}
	if s.failAfter > 0 {
		s.failAfter--
	}
	s.next++
	s.allocs++
	s.live[s.next] = size
	return vkruntime.StorageHandle{ID: s.next, Size: size}, nil
}

// misuses counts what the pools asked the test storages that no device
// grants (an allocation of 0 B, a virtual range or a bind not of whole
// granules), wherever a test swallowed the refusal; TestMain fails the
// run on any. firstMisuse is the first one's message.
var (
	misuses     atomic.Int64
	firstMisuse atomic.Value
)

// misuse counts one and is the error a storage refuses it with.
func misuse(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if misuses.Add(1) == 1 {
		firstMisuse.Store(err.Error())
	}
	return err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if n := misuses.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "the pools asked the test storages %d things no device grants, the first: %v\n", n, firstMisuse.Load())
		code = 1
	}
	os.Exit(code)
}

func (s *fakeStorage) Dealloc(id vkruntime.StorageID) {
	if _, ok := s.live[id]; !ok {
		panic(fmt.Sprintf("fake storage: dealloc of unknown id %d", id))
	}
	delete(s.live, id)
	s.deallocs++
	s.pending++
}

func (s *fakeStorage) Flush() { s.flushes++; s.pending = 0 }

func (s *fakeStorage) liveBytes() uint64 {
	var n uint64
	for _, size := range s.live {
		n += size
	}
	return n
}

// limitedStorage is a fakeStorage that cannot allocate past a size.
type limitedStorage struct{ *fakeStorage }

func (s limitedStorage) MaxAllocationSize() uint64 { return s.limit }

var testProps = vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 64 << 20, MemorySize: 0}

func u64(v uint64) *uint64 { return &v }

func newTestManager(t testing.TB, l Layout) (*Manager, *fakeStorage) {
	t.Helper()
	s := newFakeStorage()
	m, err := NewManager(s, testProps, l)
	require.NoError(t, err)
	return m, s
}

func mustReserve(t testing.TB, m *Manager, size uint64, mapping Mapping) Handle {
	t.Helper()
	h, err := m.Reserve(size, mapping)
	require.NoError(t, err)
	return h
}

// where is a reservation's (pool index in the report, page, offset, size).
type where struct {
	pool         int
	page         int
	offset, size uint64
}

func locate(t testing.TB, m *Manager, h Handle) where {
	t.Helper()
	r, err := m.lookup(h, "locate")
	require.NoError(t, err)
	page, off, size := m.poolOf(r).locate(r.ref)
	return where{pool: reportIndex(m, int(r.pool)), page: page, offset: off, size: size}
}

// reportIndex maps an index of Manager.all to the reservation's entry in
// Report.Dynamic, or -1 for the persistent pool.
func reportIndex(m *Manager, pool int) int {
	switch {
	case pool == poolPersistent:
		return -1
	case pool == poolArena:
		return 0
	case m.arena != nil:
		return pool - firstDynamic + 1
	}
	return pool - firstDynamic
}
