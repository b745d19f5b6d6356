package client

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// gate holds one call at a point until the test opens it.
type gate struct {
	once           sync.Once
	reached, opens chan struct{}
}

func newGate() *gate { return &gate{reached: make(chan struct{}), opens: make(chan struct{})} }

// wait holds the first call that reaches the gate; a nil gate holds none.
func (g *gate) wait() {
	if g == nil {
		return
	}
	g.once.Do(func() {
		close(g.reached)
		<-g.opens
	})
}

// gatedStorage is a cpu device's storage that can hold a call at the point
// where clientStorage must not be overtaken by a Flush: a Dealloc before it
// reaches the device, a Flush after the device flushed, and the reading of
// Allocated after an Alloc. It also records the most the device held right
// after any Alloc.
type gatedStorage struct {
	device.Storage
	beforeDealloc, afterFlush, beforeAllocated *gate
	most                                       atomic.Uint64
}

func (g *gatedStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	h, err := g.Storage.Alloc(size)
	if err == nil {
		n := g.Storage.Allocated()
		for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
		}
	}
	return h, err
}

func (g *gatedStorage) Dealloc(id vkruntime.StorageID) {
	g.beforeDealloc.wait()
	g.Storage.Dealloc(id)
}

func (g *gatedStorage) Flush() {
	g.Storage.Flush()
	g.afterFlush.wait()
}

func (g *gatedStorage) Allocated() uint64 {
	g.beforeAllocated.wait()
	return g.Storage.Allocated()
}

// unit is a whole number of the cpu device's alignment, so the device and
// the client count the same bytes.
const unit = 4 * cpu.DefaultAlignment

func newGatedStorage(t *testing.T, limit uint64) (*gatedStorage, *clientStorage) {
	t.Helper()
	d, err := cpu.New()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	g := &gatedStorage{Storage: d.Storage()}
	return g, newClientStorage(g, limit, d.Properties().MemorySize)
}

func goDone(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	return done
}

// settle gives a call the time to finish where nothing holds it back; a
// call the storage rightly holds back is let go on after a while.
func settle(done <-chan struct{}) {
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
	}
}

// A Flush between a Dealloc's counting and its reaching the device must not
// take the released bytes off the client's count: the device still holds
// them until a later Flush.
func TestFlushDuringDeallocKeepsTheMemoryLimit(t *testing.T) {
	g, s := newGatedStorage(t, 2*unit)
	a, err := s.Alloc(unit)
	require.NoError(t, err)
	_, err = s.Alloc(unit)
	require.NoError(t, err)

	g.beforeDealloc = newGate()
	deallocated := goDone(func() { s.Dealloc(a.ID) })
	<-g.beforeDealloc.reached
	flushed := goDone(s.Flush)
	settle(flushed)
	close(g.beforeDealloc.opens)
	<-deallocated
	<-flushed

	_, err = s.Alloc(unit)
	require.NoError(t, err, "the released unit is flushed to make room")
	require.LessOrEqual(t, g.Storage.Allocated(), uint64(2*unit), "the device holds no more than the client's limit")
	require.LessOrEqual(t, g.most.Load(), uint64(2*unit))
}

// A Dealloc between the device's Flush and the client's settling of its
// count must stay counted until the next Flush hands it to the device.
func TestDeallocDuringFlushKeepsTheMemoryLimit(t *testing.T) {
	g, s := newGatedStorage(t, 2*unit)
	a, err := s.Alloc(unit)
	require.NoError(t, err)
	_, err = s.Alloc(unit)
	require.NoError(t, err)

	g.afterFlush = newGate()
	flushed := goDone(s.Flush)
	<-g.afterFlush.reached
	deallocated := goDone(func() { s.Dealloc(a.ID) })
	settle(deallocated)
	close(g.afterFlush.opens)
	<-flushed
	<-deallocated

	_, err = s.Alloc(unit)
	require.NoError(t, err, "the released unit is flushed to make room")
	require.LessOrEqual(t, g.Storage.Allocated(), uint64(2*unit), "the device holds no more than the client's limit")
	require.LessOrEqual(t, g.most.Load(), uint64(2*unit))
}

// The peaks are the device's figures right after an allocation, not after
// a Flush that overtook their reading.
func TestStoragePeakIsReadBeforeAFlushLowersIt(t *testing.T) {
	g, s := newGatedStorage(t, 0)
	a, err := s.Alloc(unit)
	require.NoError(t, err)
	s.Dealloc(a.ID) // held by the device until the next Flush

	g.beforeAllocated = newGate()
	allocated := goDone(func() {
		if _, err := s.Alloc(unit); err != nil {
			t.Errorf("alloc: %v", err)
		}
	})
	<-g.beforeAllocated.reached
	flushed := goDone(s.Flush)
	settle(flushed)
	close(g.beforeAllocated.opens)
	<-allocated
	<-flushed

	st := s.statsNow()
	require.Equal(t, uint64(2*unit), st.BytesPeak, "both units were held at once")
	require.Equal(t, 2, st.AllocationsPeak)
	require.Equal(t, uint64(unit), st.Bytes)
	require.Equal(t, 1, st.Allocations)
}

// Under concurrent allocations, releases and flushes the device never holds
// more than the client's limit, and the peak is at least the most it held
// after any allocation.
func TestStorageLimitAndPeakHoldUnderConcurrency(t *testing.T) {
	const limit = 6 * unit
	g, s := newGatedStorage(t, limit)
	const workers, rounds = 4, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []vkruntime.StorageID
			for r := range rounds {
				h, err := s.Alloc(unit)
				if err != nil {
					var oom *vkruntime.OutOfMemoryError
					if !errors.As(err, &oom) {
						t.Errorf("alloc: %v", err)
						return
					}
				} else {
					held = append(held, h.ID)
				}
				if len(held) > 1 || r%3 == w%3 {
					for _, id := range held {
						s.Dealloc(id)
					}
					held = held[:0]
				}
				if r%5 == w {
					s.Flush()
				}
			}
			for _, id := range held {
				s.Dealloc(id)
			}
		}()
	}
	wg.Wait()
	st := s.statsNow()
	require.LessOrEqual(t, g.most.Load(), uint64(limit), "the device held more than the client's limit")
	require.GreaterOrEqual(t, st.BytesPeak, g.most.Load(), "the peak missed what the device held")
	require.LessOrEqual(t, st.BytesPeak, uint64(limit))
	require.Equal(t, st.Allocs, st.Deallocs)
}

// busyStorage is a cpu device's storage whose Flush keeps the released
// pages marked busy, as a device keeps pages that work in flight still
// uses, and says so through Deferred.
type busyStorage struct {
	device.Storage
	mu      sync.Mutex
	busy    map[vkruntime.StorageID]bool
	pending map[vkruntime.StorageID]uint64
	sizes   map[vkruntime.StorageID]uint64
}

func (b *busyStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	h, err := b.Storage.Alloc(size)
	if err == nil {
		b.mu.Lock()
		b.sizes[h.ID] = size
		b.mu.Unlock()
	}
	return h, err
}

func (b *busyStorage) Dealloc(id vkruntime.StorageID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending[id] = b.sizes[id]
}

func (b *busyStorage) Flush() {
	b.mu.Lock()
	for id := range b.pending {
		if !b.busy[id] {
			b.Storage.Dealloc(id)
			delete(b.pending, id)
		}
	}
	b.mu.Unlock()
	b.Storage.Flush()
}

func (b *busyStorage) Deferred() (bytes uint64, pages int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.pending {
		bytes += n
		pages++
	}
	return bytes, pages
}

// A page the device keeps past a Flush, because work in flight still uses
// it, stays in the client's count: the limit holds until a later Flush
// frees it.
func TestPagesTheDeviceKeepsStayCounted(t *testing.T) {
	d, err := cpu.New()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	b := &busyStorage{Storage: d.Storage(), busy: map[vkruntime.StorageID]bool{},
		pending: map[vkruntime.StorageID]uint64{}, sizes: map[vkruntime.StorageID]uint64{}}
	s := newClientStorage(b, 2*unit, d.Properties().MemorySize)
	a, err := s.Alloc(unit)
	require.NoError(t, err)
	_, err = s.Alloc(unit)
	require.NoError(t, err)
	b.mu.Lock()
	b.busy[a.ID] = true
	b.mu.Unlock()
	s.Dealloc(a.ID)

	_, err = s.Alloc(unit)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "the device still holds the released unit")
	require.Equal(t, uint64(2*unit), d.Storage().Allocated())

	b.mu.Lock()
	b.busy[a.ID] = false
	b.mu.Unlock()
	_, err = s.Alloc(unit)
	require.NoError(t, err, "the work ended: the next Flush frees the unit")
	require.Equal(t, uint64(2*unit), d.Storage().Allocated())
}

// Over a device storage with no sparse residency, the client's storage
// refuses a virtual range as the devices do, with runtime.ErrUnsupported,
// and a bind with runtime.ErrNotFound, as it names no range: both were
// errors of no kind.
func TestAStorageWithoutSparseResidencyRefusesAsTheDevicesDo(t *testing.T) {
	_, s := newGatedStorage(t, 0)
	require.Zero(t, s.SparseGranule())
	_, err := s.ReserveVirtual(unit)
	require.ErrorIs(t, err, vkruntime.ErrUnsupported)
	require.ErrorIs(t, s.Bind(1, []vkruntime.SparseBind{{Size: unit}}), vkruntime.ErrNotFound)
}
