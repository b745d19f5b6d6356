package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// faultMode says what a faulty device's call does: run, panic, or fail.
type faultMode int

const (
	runs faultMode = iota
	panics
	fails
)

var errFaulty = fmt.Errorf("faulty device: %w", vkruntime.ErrOutOfDeviceMemory)

// faults says, per device call, what it does.
type faults struct {
	mu  sync.Mutex
	at  map[string]faultMode
	hit map[string]int
}

func (f *faults) check(call string) error {
	f.mu.Lock()
	m := f.at[call]
	if m != runs {
		f.hit[call]++
	}
	f.mu.Unlock()
	switch m {
	case panics:
		panic("faulty device: " + call + " panics")
	case fails:
		return errFaulty
	}
	return nil
}

func (f *faults) set(call string, m faultMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m == runs {
		delete(f.at, call)
	} else {
		f.at[call] = m
	}
}

type faultyDevice struct {
	*cpu.Device
	f *faults
	s device.Storage
}

func (d *faultyDevice) Storage() device.Storage { return d.s }
func (d *faultyDevice) Upload(ctx context.Context, dst vkruntime.StorageHandle, src []byte) error {
	if err := d.f.check("Upload"); err != nil {
		return err
	}
	return d.Device.Upload(ctx, dst, src)
}
func (d *faultyDevice) Download(ctx context.Context, src vkruntime.StorageHandle, dst []byte) error {
	if err := d.f.check("Download"); err != nil {
		return err
	}
	return d.Device.Download(ctx, src, dst)
}
func (d *faultyDevice) Dispatch(ctx context.Context, ops []kernel.Op) error {
	if err := d.f.check("Dispatch"); err != nil {
		return err
	}
	return d.Device.Dispatch(ctx, ops)
}

type faultyStorage struct {
	*cpu.Storage
	f *faults
}

func (s *faultyStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	if err := s.f.check("Alloc"); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	return s.Storage.Alloc(size)
}
func (s *faultyStorage) Dealloc(id vkruntime.StorageID) {
	_ = s.f.check("Dealloc")
	s.Storage.Dealloc(id)
}
func (s *faultyStorage) Flush() {
	_ = s.f.check("Flush")
	s.Storage.Flush()
}
func (s *faultyStorage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	if err := s.f.check("ReserveVirtual"); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	return s.Storage.ReserveVirtual(size)
}
func (s *faultyStorage) Bind(v vkruntime.StorageID, b []vkruntime.SparseBind) error {
	if err := s.f.check("Bind"); err != nil {
		return err
	}
	return s.Storage.Bind(v, b)
}

func openFaulty(t *testing.T, sparse bool) (*Client, *faults) {
	var opts []cpu.Option
	if sparse {
		opts = append(opts, cpu.WithSparseGranule(64<<10))
	}
	d, err := cpu.New(opts...)
	require.NoError(t, err)
	f := &faults{at: map[string]faultMode{}, hit: map[string]int{}}
	fd := &faultyDevice{Device: d, f: f, s: &faultyStorage{Storage: d.Storage().(*cpu.Storage), f: f}}
	c, err := Open(context.Background(), WithBackend(fd), WithMemoryLimit(64<<20))
	require.NoError(t, err)
	return c, f
}

type snapshot struct {
	usage          memory.Usage
	report         memory.Report
	live           int
	held, released uint64
	sizes          int
	bytes          uint64
	allocs         int
}

func snap(c *Client) snapshot {
	s := c.def
	s.mu.Lock()
	live := len(s.live)
	s.mu.Unlock()
	st := c.StorageStats()
	c.storage.mu.Lock()
	defer c.storage.mu.Unlock()
	return snapshot{usage: c.MemoryUsage(context.Background()), report: c.MemoryReport(context.Background()), live: live,
		held: c.storage.held, released: c.storage.released, sizes: len(c.storage.sizes), bytes: st.Bytes, allocs: st.Allocations}
}

func TestHostileDevice(t *testing.T) {
	ctx := context.Background()
	type step struct {
		name, call string
		sparse     bool
		op         func(c *Client, bs []*Buffer) error
	}
	steps := []step{
		{"Empty", "Alloc", false, func(c *Client, _ []*Buffer) error { _, err := c.Empty(ctx, 8<<20); return err }},
		{"EmptySmall", "Alloc", false, func(c *Client, _ []*Buffer) error { _, err := c.Empty(ctx, 4096); return err }},
		{"Create", "Upload", false, func(c *Client, _ []*Buffer) error { _, err := c.Create(ctx, make([]byte, 4096)); return err }},
		{"CreateBig", "Upload", false, func(c *Client, _ []*Buffer) error { _, err := c.Create(ctx, make([]byte, 8<<20)); return err }},
		{"Write", "Upload", false, func(c *Client, bs []*Buffer) error { return bs[0].Write(ctx, 0, make([]byte, 16)) }},
		{"WriteFresh", "Dispatch", false, func(c *Client, bs []*Buffer) error { return bs[1].Write(ctx, 4, make([]byte, 16)) }},
		{"Read", "Download", false, func(c *Client, bs []*Buffer) error { _, err := bs[0].Read(ctx); return err }},
		{"Run", "Dispatch", false, func(c *Client, bs []*Buffer) error { return c.Run(ctx, kernel.CopyWords(1024), bs[0], bs[2]) }},
		{"RunFreshAlloc", "Alloc", false, func(c *Client, bs []*Buffer) error {
			return c.Run(ctx, kernel.CopyWords(1024), bs[0], bs[3])
		}},
		{"FreeCleanupDealloc", "Dealloc", false, func(c *Client, bs []*Buffer) error {
			if err := bs[3].Free(); err != nil {
				return err
			}
			c.MemoryCleanup(ctx)
			return nil
		}},
		{"DryThenRun", "Alloc", false, func(c *Client, bs []*Buffer) error {
			b, err := c.Empty(dryrun.With(ctx), 8<<20)
			if err != nil {
				return err
			}
			return c.Run(ctx, kernel.CopyWords(1024), bs[0], b)
		}},
		{"DryThenRunSparse", "Bind", true, func(c *Client, bs []*Buffer) error {
			b, err := c.Empty(dryrun.With(ctx), 8<<20)
			if err != nil {
				return err
			}
			return c.Run(ctx, kernel.CopyWords(1024), bs[0], b)
		}},
		{"SparseFreeCleanupBind", "Bind", true, func(c *Client, bs []*Buffer) error {
			if err := bs[3].Free(); err != nil {
				return err
			}
			c.MemoryCleanup(ctx)
			return nil
		}},
		{"StreamReserveVirtual", "ReserveVirtual", true, func(c *Client, _ []*Buffer) error {
			s, err := c.NewStream()
			if err != nil {
				return err
			}
			_, err = s.Empty(ctx, 4096)
			return err
		}},
		{"CleanupFlush", "Flush", false, func(c *Client, bs []*Buffer) error { c.MemoryCleanup(ctx); return nil }},
		{"SparseEmpty", "Bind", true, func(c *Client, _ []*Buffer) error { _, err := c.Empty(ctx, 8<<20); return err }},
		{"SparseEmptyAlloc", "Alloc", true, func(c *Client, _ []*Buffer) error { _, err := c.Empty(ctx, 8<<20); return err }},
		{"SparseNewStream", "ReserveVirtual", true, func(c *Client, _ []*Buffer) error { _, err := c.NewStream(); return err }},
	}
	for _, st := range steps {
		for _, m := range []faultMode{panics, fails} {
			t.Run(fmt.Sprintf("%s/%s/%v", st.name, st.call, m), func(t *testing.T) {
				c, f := openFaulty(t, st.sparse)
				var bs []*Buffer
				for i := range 3 {
					b, err := c.Create(ctx, make([]byte, 4096))
					require.NoError(t, err)
					if i == 1 {
						// a fresh buffer, zero pending
						require.NoError(t, b.Free())
						b, err = c.Empty(ctx, 4096)
						require.NoError(t, err)
					}
					bs = append(bs, b)
				}
				lazy, err := c.Empty(ctx, 16<<20)
				require.NoError(t, err)
				_ = lazy
				bs = append(bs, lazy)
				c.MemoryCleanup(ctx)
				before := snap(c)
				f.set(st.call, m)
				var opErr error
				panicked := func() (p bool) {
					defer func() { p = recover() != nil }()
					opErr = st.op(c, bs)
					return false
				}()
				f.set(st.call, runs)
				if f.hit[st.call] == 0 {
					t.Skip("not reached")
				}
				c.MemoryCleanup(ctx)
				after := snap(c)
				if !panicked && m == panics {
					t.Fatalf("the device's %s panicked and the call returned %v", st.call, opErr)
				}
				switch st.name {
				case "FreeCleanupDealloc", "SparseFreeCleanupBind", "DryThenRun", "DryThenRunSparse":
					// These free or make a buffer whatever the device does.
				default:
					require.Equal(t, before.live, after.live, "live buffers")
					require.Equal(t, before.usage.NumberAllocs, after.usage.NumberAllocs, "live allocations")
					require.Equal(t, before.usage.BytesInUse, after.usage.BytesInUse, "bytes in use")
				}
				var inUse uint64
				c.def.mu.Lock()
				for _, b := range c.def.live {
					inUse += b.size
				}
				c.def.mu.Unlock()
				if after.usage.NumberAllocs != uint64(after.live) || after.usage.BytesInUse != inUse || after.held != after.bytes || after.sizes != after.allocs || after.released != 0 {
					t.Errorf("inconsistent: in use by live buffers %d\nbefore %+v\nafter  %+v", inUse, before, after)
				}

				// the next call works
				_, err = c.Create(ctx, make([]byte, 4096))
				require.NoError(t, err)
				_, err = bs[0].Read(ctx)
				require.NoError(t, err)
				done := make(chan struct{})
				go func() { _ = c.Close(); close(done) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("Close hangs")
				}
			})
		}
	}
}

// A memory limit below the device's alignment, which not even a buffer of
// 1 B fits under, is refused by Open with the numbers, on a device handed
// with WithBackend (the client holds it to the limit) and on the default
// one (it holds itself): Open succeeded, and every allocation failed. The
// least cap that allows a buffer, the alignment, opens and allocates.
func TestAMemoryLimitNoBufferFitsUnderIsRefused(t *testing.T) {
	ctx := context.Background()
	for _, backend := range []bool{true, false} {
		open := func(limit uint64) (*Client, error) {
			if !backend {
				return Open(ctx, WithMemoryLimit(limit))
			}
			d, err := cpu.New()
			require.NoError(t, err)
			return Open(ctx, WithMemoryLimit(limit), WithBackend(d))
		}
		probe, err := open(0)
		if !backend {
			devtest.SkipUnavailable(t, err)
		}
		require.NoError(t, err)
		align := probe.Properties().Alignment
		require.NoError(t, probe.Close())
		for _, limit := range []uint64{1, align / 2, align - 1} {
			c, err := open(limit)
			require.ErrorIs(t, err, ErrInvalidOption, "limit %d", limit)
			require.Nil(t, c)
			var le *MemoryLimitError
			require.ErrorAs(t, err, &le)
			require.Equal(t, limit, le.Limit)
			require.Equal(t, align, le.Alignment)
			require.ErrorContains(t, err, fmt.Sprintf("WithMemoryLimit(%d)", limit))
			require.ErrorContains(t, err, fmt.Sprintf("give at least %d B", align))
		}
		c, err := open(align)
		require.NoError(t, err)
		b, err := c.Create(ctx, []byte{1, 2, 3, 4})
		require.NoError(t, err, "backend %v", backend)
		got, err := b.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, []byte{1, 2, 3, 4}, got)
		require.NoError(t, c.Close())
	}
}
