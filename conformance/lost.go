package conformance

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// losable is the device under test with a switch: once lost, every
// transfer and dispatch answers runtime.ErrDeviceLost, which is how a
// check stages a device failure to see what the client makes of it.
type losable struct {
	device.Device
	lost atomic.Bool
}

func (d *losable) failure(op string) error {
	if d.lost.Load() {
		return fmt.Errorf("%s on %s: %w", op, d.Name(), vkruntime.ErrDeviceLost)
	}
	return nil
}

func (d *losable) Upload(ctx context.Context, dst vkruntime.StorageHandle, src []byte) error {
	if err := d.failure("upload"); err != nil {
		return err
	}
	return d.Device.Upload(ctx, dst, src)
}

func (d *losable) Download(ctx context.Context, src vkruntime.StorageHandle, dst []byte) error {
	if err := d.failure("download"); err != nil {
		return err
	}
	return d.Device.Download(ctx, src, dst)
}

func (d *losable) Dispatch(ctx context.Context, ops []kernel.Op) error {
	if err := d.failure("dispatch"); err != nil {
		return err
	}
	return d.Device.Dispatch(ctx, ops)
}

// openLosable opens a client whose device can be lost on demand.
func openLosable(c *checkState, open OpenClient) (*client.Client, *losable) {
	var dev *losable
	cl := openClient(c, open, DeviceConfig{Wrap: func(d device.Device) device.Device {
		dev = &losable{Device: d}
		return dev
	}})
	if dev == nil {
		c.NotSupportedf("the factory did not apply DeviceConfig.Wrap, so no failure can be staged")
	}
	return cl, dev
}

func lostChecks(open OpenClient) []Check {
	return []Check{
		{
			Name: "device/lost-stream-error-state",
			Rule: "A device lost under a stream puts that stream in an error state: its operations fail with runtime.ErrDeviceLost from then on, and Err says why",
			run: func(c *checkState) {
				cl, dev := openLosable(c, open)
				ctx := c.Context()
				b, err := cl.Create(ctx, pattern(1600, 1024))
				if err != nil {
					c.Fatalf("Create before the loss: %v", err)
				}
				dev.lost.Store(true)
				if err := cl.Run(ctx, kernel.FillWords(256, 7), b); !errors.Is(err, vkruntime.ErrDeviceLost) {
					c.Errorf("a launch on a lost device: %v, want ErrDeviceLost", err)
				}
				if err := cl.DefaultStream().Err(); !errors.Is(err, vkruntime.ErrDeviceLost) {
					c.Errorf("the stream's Err after the loss: %v, want ErrDeviceLost", err)
				}
				if _, err := cl.Create(ctx, []byte{1, 2, 3, 4}); !errors.Is(err, vkruntime.ErrDeviceLost) {
					c.Errorf("Create on the failed stream: %v, want ErrDeviceLost", err)
				}
				if _, err := b.Read(ctx); !errors.Is(err, vkruntime.ErrDeviceLost) {
					c.Errorf("Read on the failed stream: %v, want ErrDeviceLost", err)
				}
			},
		},
		{
			Name: "install/stream-unavailable",
			Rule: "Installing on a stream in an error state is an *memory.InstallError of kind StreamUnavailable, and the layout still applies to streams created afterwards",
			run: func(c *checkState) {
				cl, dev := openLosable(c, open)
				ctx := c.Context()
				b, err := cl.Create(ctx, pattern(1601, 1024))
				if err != nil {
					c.Fatalf("Create before the loss: %v", err)
				}
				dev.lost.Store(true)
				_ = cl.Run(ctx, kernel.FillWords(256, 7), b)
				if cl.DefaultStream().Err() == nil {
					c.Fatalf("the stream is not in an error state after a launch on a lost device")
				}
				l := memory.DirectLayout()
				err = cl.InstallMemoryPools(ctx, l)
				var ie *memory.InstallError
				switch {
				case err == nil:
					c.Errorf("installed %v on a stream in an error state", l)
				case !errors.As(err, &ie):
					c.Errorf("%v (%T) is not an *memory.InstallError", err, err)
				case ie.Kind != memory.StreamUnavailable:
					c.Errorf("%v is of kind %v, not StreamUnavailable", err, ie.Kind)
				}
				dev.lost.Store(false)
				s, err := cl.NewStream()
				if err != nil {
					c.Fatalf("NewStream: %v", err)
				}
				defer s.Close()
				if got := s.Layout(); !got.Equal(l) {
					c.Errorf("a stream created after the refused install has layout %v, want %v", got, l)
				}
			},
		},
		{
			Name: "device/storage-concurrent-use",
			Rule: "A device's storage is safe for concurrent use: allocations and releases from many goroutines get distinct ids, and the holdings return to where they started",
			run:  withClient(open, checkStorageConcurrentUse),
		},
		{
			Name: "device/alignment-binds",
			Rule: "The alignment the pools use is a multiple of the one kernel bindings need, so every buffer, whatever the sizes before it, binds to a kernel, which reads and writes it where it lies in its allocation",
			run: func(c *checkState) {
				cl := openClient(c, open, DeviceConfig{})
				p, l := cl.Properties(), cl.Device().Limits()
				if l.Alignment != 0 && p.Alignment%l.Alignment != 0 {
					c.Errorf("the pools align to %d B, bindings need %d B", p.Alignment, l.Alignment)
				}
				ctx := c.Context()
				var bufs []*client.Buffer
				defer func() { freeAll(c, bufs) }()
				for i, size := range []uint64{4, 12, 20, 100, 4, 1028, 8, 36} {
					b, err := cl.Empty(ctx, size)
					if err != nil {
						c.Fatalf("Empty(%d): %v", size, err)
					}
					bufs = append(bufs, b)
					if err := cl.Run(ctx, kernel.FillWords(uint32(size/4), uint32(i+1)), b); err != nil {
						c.Errorf("buffer %d (%d B) does not bind: %v", i, size, err)
					}
				}
				// The buffers lie side by side, all but the first past the
				// start of their allocation: each is read back, and copied
				// as a kernel's input (binding 0) into a buffer of its own.
				// Only the errors were looked at, and a device that bound
				// its first binding at the start of the allocation passed.
				dst, err := cl.Empty(ctx, 1028)
				if err != nil {
					c.Fatalf("Empty(1028): %v", err)
				}
				bufs = append(bufs, dst)
				for i, b := range bufs[:len(bufs)-1] {
					want := make([]byte, b.Size())
					for j := 0; j+4 <= len(want); j += 4 {
						binary.LittleEndian.PutUint32(want[j:], uint32(i+1))
					}
					if got, err := b.Read(ctx); err != nil {
						c.Errorf("reading buffer %d (%d B): %v", i, b.Size(), err)
					} else {
						compareBytes(c, want, got, fmt.Sprintf("buffer %d (%d B) filled with %d", i, b.Size(), i+1))
					}
					if err := cl.Run(ctx, kernel.CopyWords(uint32(b.Size()/4)), b, dst); err != nil {
						c.Errorf("copying buffer %d (%d B): %v", i, b.Size(), err)
					} else if got, err := dst.Stream().ReadAt(ctx, dst, 0, b.Size()); err != nil {
						c.Errorf("reading the copy of buffer %d: %v", i, err)
					} else {
						compareBytes(c, want, got, fmt.Sprintf("a kernel's copy of buffer %d (%d B), filled with %d", i, b.Size(), i+1))
					}
				}
			},
		},
	}
}

func checkStorageConcurrentUse(c *checkState, cl *client.Client) {
	s := cl.Device().Storage()
	cl.MemoryCleanup(c.Context())
	start := s.Allocated()
	const workers, rounds = 4, 32
	var mu sync.Mutex
	live := map[vkruntime.StorageID]int{}
	var wg sync.WaitGroup
	for w := range workers {
		c.Go(&wg, func() {
			var mine []vkruntime.StorageID
			for r := range rounds {
				h, err := s.Alloc(uint64(4096 * (1 + (w+r)%5)))
				if err != nil {
					c.Errorf("worker %d: Alloc: %v", w, err)
					return
				}
				mu.Lock()
				if other, dup := live[h.ID]; dup {
					c.Errorf("worker %d got id %d, which worker %d holds", w, h.ID, other)
				}
				live[h.ID] = w
				mu.Unlock()
				mine = append(mine, h.ID)
				if r%3 == 2 {
					id := mine[0]
					mine = mine[1:]
					mu.Lock()
					delete(live, id)
					mu.Unlock()
					s.Dealloc(id)
					s.Flush()
				}
			}
			for _, id := range mine {
				mu.Lock()
				delete(live, id)
				mu.Unlock()
				s.Dealloc(id)
			}
			s.Flush()
		})
	}
	wg.Wait()
	s.Flush()
	if end := s.Allocated(); end != start {
		c.Errorf("after %d goroutines allocated and released %d times each, the storage holds %d B, %d B before", workers, rounds, end, start)
	}
}
