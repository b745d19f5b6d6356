package client

import (
	"fmt"
	"sync"

	"github.com/vkrt/vkrt/device"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// limitedStorage holds a device's storage to the client's memory limit,
// for a device the client did not open itself (WithBackend) and so could
// not ask to enforce it. It counts the bytes it handed out: released ones
// until the next Flush, as the device does.
type limitedStorage struct {
	device.Storage
	limit, heap uint64

	mu       sync.Mutex
	sizes    map[vkruntime.StorageID]uint64
	held     uint64
	released uint64 // part of held, deallocated but not yet flushed
}

func newLimitedStorage(s device.Storage, limit, heap uint64) *limitedStorage {
	if inner := s.Limit(); inner != 0 && inner < limit {
		limit = inner
	}
	return &limitedStorage{Storage: s, limit: limit, heap: heap, sizes: map[vkruntime.StorageID]uint64{}}
}

// Alloc refuses an allocation that would take the storage past the limit
// (after a Flush) with a *runtime.OutOfMemoryError, and otherwise asks the
// device.
func (s *limitedStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	if !s.room(size) {
		s.Flush()
		if !s.room(size) {
			s.mu.Lock()
			held := s.held
			s.mu.Unlock()
			return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{
				Size: size, HeapSize: s.heap, Usage: held, Limit: s.limit,
				Detail: fmt.Sprintf("the client's memory limit: %d B held, %d B free", held, s.limit-min(s.limit, held)),
			}
		}
	}
	h, err := s.Storage.Alloc(size)
	if err != nil {
		s.mu.Lock()
		s.held -= size
		s.mu.Unlock()
		return h, err
	}
	s.mu.Lock()
	s.sizes[h.ID] = size
	s.mu.Unlock()
	return h, nil
}

// room reserves size bytes if they fit under the limit.
func (s *limitedStorage) room(size uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if total := s.held + size; total < size || total > s.limit {
		return false
	}
	s.held += size
	return true
}

func (s *limitedStorage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	if size, ok := s.sizes[id]; ok {
		delete(s.sizes, id)
		s.released += size
	}
	s.mu.Unlock()
	s.Storage.Dealloc(id)
}

func (s *limitedStorage) Flush() {
	s.Storage.Flush()
	s.mu.Lock()
	s.held -= s.released
	s.released = 0
	s.mu.Unlock()
}

// Limit is the smaller of the client's limit and the device's.
func (s *limitedStorage) Limit() uint64 { return s.limit }
