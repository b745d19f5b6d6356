package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// panickingStorage is a cpu device's storage whose Alloc, or whose
// Allocated, panics when told to, as a flawed device's may.
type panickingStorage struct {
	device.Storage
	inAlloc, inAllocated bool
}

func (p *panickingStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	if p.inAlloc {
		panic("the device's Alloc panics")
	}
	return p.Storage.Alloc(size)
}

func (p *panickingStorage) Allocated() uint64 {
	if p.inAllocated {
		panic("the device's Allocated panics")
	}
	return p.Storage.Allocated()
}

type panickingDevice struct {
	*cpu.Device
	storage *panickingStorage
}

func (d *panickingDevice) Storage() device.Storage { return d.storage }

// A device call that panics under the client's storage lock releases it as
// the panic leaves: a Flush after it (closing the client) waited for ever.
func TestADevicePanicLeavesTheStorageUnlocked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(*panickingStorage)
		panic func(*Client)
	}{
		{"Alloc", func(p *panickingStorage) { p.inAlloc = true }, func(c *Client) { _, _ = c.Empty(context.Background(), 4096) }},
		{"Allocated", func(p *panickingStorage) { p.inAllocated = true }, func(c *Client) { c.StorageStats() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := cpu.New()
			require.NoError(t, err)
			p := &panickingStorage{Storage: d.Storage()}
			c, err := Open(context.Background(), WithBackend(&panickingDevice{Device: d, storage: p}))
			require.NoError(t, err)
			tc.set(p)
			require.Panics(t, func() { tc.panic(c) })
			*p = panickingStorage{Storage: d.Storage()}
			closed := goDone(func() { require.NoError(t, c.Close()) })
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("closing the client after the device panicked did not return: the storage's lock is still held")
			}
		})
	}
}

// A device Alloc that panics, or its Allocated after it, gives the bytes
// reserved for it back to the client's memory limit, and the device the
// allocation it made: each such request shrank the limit for good, so a
// buffer the limit holds was refused after a few.
func TestADevicePanicInAllocKeepsNothingOfTheLimit(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range []struct {
		name string
		set  func(*panickingStorage, bool)
	}{
		{"Alloc", func(p *panickingStorage, on bool) { p.inAlloc = on }},
		{"Allocated", func(p *panickingStorage, on bool) { p.inAllocated = on }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := cpu.New()
			require.NoError(t, err)
			p := &panickingStorage{Storage: d.Storage()}
			c, err := Open(context.Background(), WithBackend(&panickingDevice{Device: d, storage: p}), WithMemoryLimit(limit))
			require.NoError(t, err)
			defer c.Close()
			tc.set(p, true)
			for range 4 {
				require.Panics(t, func() { _, _ = c.Empty(context.Background(), limit/2) })
			}
			tc.set(p, false)
			b, err := c.Empty(context.Background(), limit/2)
			require.NoError(t, err, "the limit still counts the bytes of the requests that panicked")
			require.NoError(t, b.Free())
			c.MemoryCleanup(context.Background())
			st := c.StorageStats()
			require.Zero(t, st.Bytes, "device memory held once every buffer is freed and its pages returned")
			require.Equal(t, st.Allocs, st.Deallocs)
			c.storage.mu.Lock()
			defer c.storage.mu.Unlock()
			require.Zero(t, c.storage.held, "bytes counted against the limit once every buffer is freed and its pages returned")
		})
	}
}

// panickingUploadDevice is a cpu device whose Upload panics when told to.
type panickingUploadDevice struct {
	*cpu.Device
	panics bool
}

func (d *panickingUploadDevice) Upload(ctx context.Context, dst vkruntime.StorageHandle, src []byte) error {
	if d.panics {
		panic("the device's Upload panics")
	}
	return d.Device.Upload(ctx, dst, src)
}

// A Create whose upload panics leaves the pools as they were: its
// reservation stayed counted in the usage, a live allocation no buffer
// held, and its page stayed held after a cleanup.
func TestAPanickedCreateLeavesNoReservation(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{4096, 8 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			d, err := cpu.New()
			require.NoError(t, err)
			pd := &panickingUploadDevice{Device: d}
			c, err := Open(ctx, WithBackend(pd))
			require.NoError(t, err)
			defer c.Close()
			kept, err := c.Create(ctx, make([]byte, 4096))
			require.NoError(t, err)
			c.MemoryCleanup(ctx)
			usage, stats := c.MemoryUsage(ctx), c.StorageStats()
			pd.panics = true
			require.Panics(t, func() { _, _ = c.Create(ctx, make([]byte, size)) })
			pd.panics = false
			c.MemoryCleanup(ctx)
			require.Equal(t, usage, c.MemoryUsage(ctx))
			require.Equal(t, stats.Bytes, c.StorageStats().Bytes)
			_, err = kept.Read(ctx)
			require.NoError(t, err)
		})
	}
}

// flushPanickingDevice is a cpu device whose storage's Flush panics when
// told to.
type flushPanickingDevice struct {
	*cpu.Device
	storage *flushPanickingStorage
}

func (d *flushPanickingDevice) Storage() device.Storage { return d.storage }

type flushPanickingStorage struct {
	device.Storage
	panics bool
}

func (s *flushPanickingStorage) Flush() {
	if s.panics {
		panic("the device's Flush panics")
	}
	s.Storage.Flush()
}

// A Close in which the device's Flush panics still closes the device: it
// stayed open, taking allocations, and a second Close said nil.
func TestAPanicInCloseStillClosesTheDevice(t *testing.T) {
	d, err := cpu.New()
	require.NoError(t, err)
	fd := &flushPanickingDevice{Device: d, storage: &flushPanickingStorage{Storage: d.Storage()}}
	c, err := Open(context.Background(), WithBackend(fd))
	require.NoError(t, err)
	_, err = c.Empty(context.Background(), 4096)
	require.NoError(t, err)
	fd.storage.panics = true
	require.Panics(t, func() { _ = c.Close() })
	_, err = d.Storage().Alloc(4096)
	require.ErrorIs(t, err, vkruntime.ErrClosed, "the device is still open")
}
