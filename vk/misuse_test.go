//go:build cgo

package vk

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// vk.ErrClosed is the contract's class itself, not a look-alike: code
// testing either name sees the other's errors.
func TestErrClosedIsTheContractsClass(t *testing.T) {
	require.ErrorIs(t, ErrClosed, vkruntime.ErrClosed)
	require.ErrorIs(t, vkruntime.ErrClosed, ErrClosed)
	err := fmt.Errorf("vk: device 0 (x): %w", ErrClosed)
	require.ErrorIs(t, err, vkruntime.ErrClosed)
}

// openToClose opens device 0 like openTestDevice, for a test that closes
// it itself.
func openToClose(t *testing.T, opts ...Option) *Device {
	t.Helper()
	d, err := Open(0, append([]Option{WithValidation(validationWanted())}, opts...)...)
	devtest.SkipUnavailable(t, err)
	return d
}

// A zero-length transfer still names its handle: a freed or unknown one is
// ErrNotFound, as for any other length, never a silent success. An empty
// handle (Size 0) names no page, as in a dispatch's bindings.
func TestZeroLengthTransfersCheckTheirHandle(t *testing.T) {
	transferModes(t, func(t *testing.T, d *Device) {
		h := alloc(t, d, 64)
		other := alloc(t, d, 64)
		require.NoError(t, d.Upload(t.Context(), h, nil), "live handle")
		require.NoError(t, d.Download(t.Context(), h, nil), "live handle")
		require.NoError(t, d.Copy(t.Context(), h, handle(other.ID, 0, 0)), "live handle")
		d.storage.Dealloc(h.ID)
		require.ErrorIs(t, d.Upload(t.Context(), h, nil), vkruntime.ErrNotFound)
		require.ErrorIs(t, d.Download(t.Context(), h, []byte{}), vkruntime.ErrNotFound)
		require.ErrorIs(t, d.Zero(t.Context(), h), vkruntime.ErrNotFound)
		require.ErrorIs(t, d.Fill(t.Context(), h, 0), vkruntime.ErrNotFound)
		require.ErrorIs(t, d.Copy(t.Context(), h, handle(other.ID, 0, 0)), vkruntime.ErrNotFound)
		require.ErrorIs(t, d.Copy(t.Context(), other, h), vkruntime.ErrNotFound)
		// A released page is not found, though the ranges named would
		// overlap or not fit were it live.
		require.ErrorIs(t, d.Copy(t.Context(), handle(h.ID, 8, 16), handle(h.ID, 0, 16)), vkruntime.ErrNotFound)
		require.ErrorIs(t, d.Copy(t.Context(), handle(h.ID, 0, 8), handle(h.ID, 32, 16)), vkruntime.ErrNotFound)
		err := d.CopyBatch(t.Context(), []CopyPair{{Dst: handle(other.ID, 0, 8), Src: handle(other.ID, 8, 8)}, {Dst: handle(h.ID, 8, 16), Src: handle(h.ID, 0, 16)}})
		require.ErrorIs(t, err, vkruntime.ErrNotFound)
		require.NotErrorIs(t, err, vkruntime.ErrInvalidArgument)
		// Empty handles name nothing, freed or not.
		for _, empty := range []vkruntime.StorageHandle{{}, handle(h.ID, 0, 0), handle(other.ID, 0, 0)} {
			require.NoError(t, d.Upload(t.Context(), empty, nil))
			require.NoError(t, d.Download(t.Context(), empty, nil))
			require.NoError(t, d.Zero(t.Context(), empty))
			require.NoError(t, d.Copy(t.Context(), empty, empty))
		}
		// Out of its page, even with nothing or less to move.
		require.Error(t, d.Upload(t.Context(), handle(other.ID, 60, 8), nil))
		require.Error(t, d.Download(t.Context(), handle(other.ID, 60, 8), nil))
		require.Error(t, d.Copy(t.Context(), handle(other.ID, 32, 64), handle(other.ID, 0, 8)), "the destination runs past its page")
		require.Error(t, d.Copy(t.Context(), handle(other.ID, 60, 8), handle(other.ID, 0, 0)))
	})
}

// Transfers whose ranges run past the page, or whose offset plus size
// overflows, are refused and change nothing.
func TestTransfersWithOverflowingRangesAreRefused(t *testing.T) {
	transferModes(t, func(t *testing.T, d *Device) {
		h := alloc(t, d, 64)
		big := vkruntime.StorageHandle{ID: h.ID, Offset: math.MaxUint64 - 3, Size: 8}
		require.Error(t, d.Upload(t.Context(), big, make([]byte, 8)))
		require.Error(t, d.Download(t.Context(), big, make([]byte, 8)))
		require.Error(t, d.Zero(t.Context(), big))
		require.Error(t, d.Fill(t.Context(), vkruntime.StorageHandle{ID: h.ID, Offset: math.MaxUint64 - 3, Size: 8}, 1))
		require.Error(t, d.Copy(t.Context(), vkruntime.StorageHandle{ID: h.ID, Offset: 0, Size: 8}, big))
		require.Error(t, d.Copy(t.Context(), big, vkruntime.StorageHandle{ID: h.ID, Offset: 0, Size: 8}))
		require.Error(t, d.Copy(t.Context(), vkruntime.StorageHandle{ID: h.ID, Offset: math.MaxUint64, Size: 8}, vkruntime.StorageHandle{ID: h.ID, Offset: 0, Size: 8}))
		huge := vkruntime.StorageHandle{ID: h.ID, Offset: 8, Size: math.MaxUint64}
		require.Error(t, d.Upload(t.Context(), huge, make([]byte, 8)))
		require.Error(t, d.Download(t.Context(), huge, make([]byte, 8)))
		require.Error(t, run(t, d, kernel.FillWords(2, 0), big))
		_, err := d.storage.Alloc(math.MaxUint64)
		require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
		require.Equal(t, 1, d.storage.Allocations())
	})
}

// A handle of one device names nothing on another: using it there is
// ErrNotFound and releasing it there releases nothing.
func TestHandlesOfAnotherDeviceAreNotFound(t *testing.T) {
	a, b := openTestDevice(t), openTestDevice(t)
	ha := alloc(t, a, 64)
	hb := alloc(t, b, 64)
	require.NoError(t, b.Upload(t.Context(), hb, make([]byte, 64)))
	require.ErrorIs(t, b.Upload(t.Context(), ha, []byte{1}), vkruntime.ErrNotFound)
	require.ErrorIs(t, b.Download(t.Context(), ha, make([]byte, 1)), vkruntime.ErrNotFound)
	require.ErrorIs(t, b.Dispatch(t.Context(), []kernel.Op{kernel.FillWords(1, 0).With(ha)}), vkruntime.ErrNotFound)
	b.storage.Dealloc(ha.ID)
	b.storage.Flush()
	require.Equal(t, 1, b.storage.Allocations(), "another device's id released nothing")
	got := make([]byte, 64)
	require.NoError(t, b.Download(t.Context(), hb, got))
	require.Equal(t, make([]byte, 64), got)
	require.NoError(t, a.Upload(t.Context(), ha, []byte{1}))
}

// A handle that outlived its device names nothing on the next one.
func TestHandlesOfAClosedDeviceAreNotFoundOnTheNext(t *testing.T) {
	a := openToClose(t)
	ha, err := a.storage.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	b := openTestDevice(t)
	hb := alloc(t, b, 64)
	require.ErrorIs(t, b.Upload(t.Context(), ha, []byte{1}), vkruntime.ErrNotFound)
	b.storage.Dealloc(ha.ID)
	b.storage.Flush()
	require.Equal(t, 1, b.storage.Allocations())
	require.NoError(t, b.Upload(t.Context(), hb, []byte{1}))
}

// Every method of a closed device fails with ErrClosed or does nothing; none
// reaches the destroyed Vulkan objects. ErrClosed is the contract's
// runtime.ErrClosed, so each refusal matches both names.
func TestClosedDeviceRefusesEveryCall(t *testing.T) {
	d := openToClose(t)
	s := d.storage
	h, err := s.Alloc(64)
	require.NoError(t, err)
	dead, err := s.Alloc(64)
	require.NoError(t, err)
	s.Dealloc(dead.ID)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "twice")
	ctx := t.Context()
	closed := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, err, vkruntime.ErrClosed)
		require.NotErrorIs(t, err, vkruntime.ErrDeviceLost)
	}
	_, err = s.Alloc(64)
	closed(err)
	closed(d.Upload(ctx, h, []byte{1}))
	closed(d.Upload(ctx, h, nil))
	closed(d.Download(ctx, h, []byte{1}))
	closed(d.Zero(ctx, h))
	closed(d.Fill(ctx, h, 0))
	closed(d.Copy(ctx, handle(h.ID, 32, 32), handle(h.ID, 0, 32)))
	closed(d.CopyBatch(ctx, []CopyPair{{Dst: handle(h.ID, 32, 32), Src: handle(h.ID, 0, 32)}}))
	closed(d.Dispatch(ctx, []kernel.Op{kernel.FillWords(1, 0).With(h)}))
	closed(d.Dispatch(ctx, nil))
	_, err = s.ReserveVirtual(1 << 16)
	closed(err)
	closed(s.Bind(h.ID, []vkruntime.SparseBind{{Size: 1}}))
	s.Dealloc(h.ID)
	s.ReleaseVirtual(h.ID)
	s.Flush()
	require.Zero(t, s.Allocated())
	require.Zero(t, s.Allocations())
	_, _, ok := d.Budget()
	require.False(t, ok)
}

// Close while transfers and dispatches run on other goroutines: it waits
// for them (or they fail with ErrClosed), and nothing touches a destroyed
// object.
func TestCloseWhileWorkRuns(t *testing.T) {
	for _, staged := range []bool{false, true} {
		name := "mapped"
		if staged {
			name = "staged"
		}
		t.Run(name, func(t *testing.T) {
			var opts []Option
			if staged {
				opts = append(opts, WithStagedTransfers())
			}
			d := openToClose(t, opts...)
			s := d.storage
			const size = 32 << 20
			h, err := s.Alloc(size)
			require.NoError(t, err)
			small, err := s.Alloc(16)
			require.NoError(t, err)
			data := make([]byte, size)
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			start := make(chan struct{})
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := 0; ; i++ {
						var err error
						switch (g + i) % 4 {
						case 0:
							err = d.Upload(context.Background(), h, data)
						case 1:
							err = d.Download(context.Background(), h, make([]byte, size))
						case 2:
							err = d.Dispatch(context.Background(), []kernel.Op{slowOp(small, 2)})
						case 3:
							var nh vkruntime.StorageHandle
							nh, err = s.Alloc(4096)
							if err == nil {
								s.Dealloc(nh.ID)
								s.Flush()
							}
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			close(start)
			time.Sleep(300 * time.Millisecond)
			require.NoError(t, d.Close())
			wg.Wait()
			close(errs)
			for err := range errs {
				require.ErrorIs(t, err, ErrClosed)
			}
		})
	}
}

// Transfers and dispatches racing Dealloc and Flush on other goroutines:
// each either finishes or fails with ErrNotFound, and once everything is
// released and flushed the storage holds nothing.
func TestTransfersRaceDeallocAndFlush(t *testing.T) {
	transferModes(t, func(t *testing.T, d *Device) {
		s := d.storage
		for range 20 {
			h := alloc(t, d, 1<<16)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					switch g {
					case 0:
						err = d.Upload(t.Context(), h, make([]byte, 1<<16))
					case 1:
						err = d.Download(t.Context(), h, make([]byte, 1<<16))
					case 2:
						err = d.Dispatch(t.Context(), []kernel.Op{kernel.FillWords(1<<14, 1).With(h)})
					case 3:
						err = d.Zero(t.Context(), h)
					}
					if err != nil {
						errs <- err
					}
				}()
			}
			wg.Add(1)
			go func() { defer wg.Done(); s.Dealloc(h.ID); s.Dealloc(h.ID); s.Flush() }()
			wg.Add(1)
			go func() { defer wg.Done(); s.Flush() }()
			wg.Wait()
			close(errs)
			for err := range errs {
				require.ErrorIs(t, err, vkruntime.ErrNotFound)
			}
		}
		s.Flush()
		require.Zero(t, s.Allocations())
		require.Zero(t, s.Allocated())
	})
}

// Canceling a staged transfer's context stops it between chunks; the page
// it used goes at the next Flush, and the figures follow.
func TestCanceledTransfersLeaveNoPins(t *testing.T) {
	transferModes(t, func(t *testing.T, d *Device) {
		s := d.storage
		h := alloc(t, d, 3*stagingSize)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if err := d.Upload(ctx, h, make([]byte, h.Size)); err != nil {
					require.ErrorIs(t, err, context.Canceled)
					return
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		cancel()
		wg.Wait()
		s.Dealloc(h.ID)
		s.Flush()
		require.Zero(t, s.Allocations())
		require.Zero(t, s.Allocated())
	})
}

// An allocation past the device's largest allocation (maxMemoryAllocationSize)
// is refused before the driver is asked, as out of device memory, and the
// pools are told not to ask for such pages. lavapipe's limit is its whole
// heap, so the test lowers the figure the device read.
func TestAllocationPastTheLargestAllocationIsRefused(t *testing.T) {
	d := openTestDevice(t)
	if d.Info().APIVersion >= "1.1" {
		require.NotZero(t, d.Info().Limits.MaxMemoryAllocationSize, "a Vulkan 1.1 device reports its largest allocation")
	}
	const largest = 1 << 20
	d.info.Limits.MaxMemoryAllocationSize = largest
	require.LessOrEqual(t, d.Properties().MaxPageSize, uint64(largest))
	require.Equal(t, uint64(largest), d.storage.MaxAllocationSize())
	s := d.storage
	_, err := s.Alloc(largest + 1)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(largest+1), oom.Size)
	require.Contains(t, err.Error(), "maxMemoryAllocationSize")
	require.Zero(t, s.Allocations())
	require.Zero(t, s.Allocated())
	h := alloc(t, d, largest)
	require.NoError(t, d.Upload(t.Context(), h, []byte{1}))
}

// Deferred says which released bytes a Flush kept because work in flight
// still uses them, so a count kept above the storage (a client's memory
// limit) takes as freed only what was; Allocated and Allocations count the
// kept pages until a later Flush frees them, and a refused allocation in
// the meantime changes nothing.
func TestFlushWithWorkInFlightKeepsTheFiguresTrue(t *testing.T) {
	d := openTestDevice(t, WithMemoryLimit(1<<20))
	s := d.storage
	a := alloc(t, d, 600<<10)
	b := alloc(t, d, 100<<10)
	held := s.Allocated()
	inFlight, err := s.pinOne(a) // a transfer or dispatch still using a
	require.NoError(t, err)
	s.Dealloc(a.ID)
	s.Dealloc(b.ID)
	bytes, pages := s.Deferred()
	require.Equal(t, uint64(700<<10), bytes)
	require.Equal(t, 2, pages)
	s.Flush()
	bytes, pages = s.Deferred()
	require.Equal(t, uint64(600<<10), bytes, "only b was freed")
	require.Equal(t, 1, pages)
	require.Equal(t, 1, s.Allocations())
	require.Less(t, s.Allocated(), held)
	require.GreaterOrEqual(t, s.Allocated(), uint64(600<<10))

	_, err = s.Alloc(600 << 10)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "a still holds its memory")
	require.Equal(t, 1, s.Allocations(), "the refusal changed nothing")
	bytes, _ = s.Deferred()
	require.Equal(t, uint64(600<<10), bytes)

	s.unpinOne(inFlight)
	c := alloc(t, d, 600<<10) // the refusal's retry flushes a now
	bytes, pages = s.Deferred()
	require.Zero(t, bytes)
	require.Zero(t, pages)
	require.Equal(t, 1, s.Allocations())
	s.Dealloc(c.ID)
	s.Flush()
	require.Zero(t, s.Allocated())
	require.Zero(t, s.Allocations())
}

// Two devices misused at once: each one's handles are refused by the other,
// closing one while both work leaves the other working, and neither's
// figures drift.
func TestTwoDevicesMisusedAtOnce(t *testing.T) {
	a := openTestDevice(t)
	b := openToClose(t, WithStagedTransfers())
	devs := []*Device{a, b}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, other := devs[g%2], devs[1-g%2]
			for i := range 30 {
				h, err := d.storage.Alloc(4096)
				if err != nil {
					errs <- err
					return
				}
				if err := other.Upload(context.Background(), h, []byte{1}); err == nil {
					errs <- errors.New("a handle of another device was accepted")
				}
				other.storage.Dealloc(h.ID) // names nothing there
				if err := d.Upload(context.Background(), h, make([]byte, 4096)); err != nil {
					errs <- err
					return
				}
				d.storage.Dealloc(h.ID)
				if i%3 == 0 {
					d.storage.Flush()
					other.storage.Flush()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, d := range devs {
		d.storage.Flush()
		require.Zero(t, d.storage.Allocations())
		require.Zero(t, d.storage.Allocated())
	}

	// Closing b while a and b work: b's calls end in ErrClosed, a's go on.
	h := alloc(t, a, 1<<20)
	stop := make(chan struct{})
	var aErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if aErr = a.Upload(context.Background(), h, make([]byte, 1<<20)); aErr != nil {
				return
			}
		}
	}()
	hb, err := b.storage.Alloc(1 << 20)
	require.NoError(t, err)
	bDone := make(chan error, 1)
	go func() {
		for {
			if err := b.Download(context.Background(), hb, make([]byte, 1<<20)); err != nil {
				bDone <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, b.Close())
	require.ErrorIs(t, <-bDone, ErrClosed)
	close(stop)
	wg.Wait()
	require.NoError(t, aErr)
	require.NoError(t, a.Download(t.Context(), h, make([]byte, 1<<20)))
}

// Zero of a range that starts off a 4-byte boundary and is larger than the
// staging buffer clears every byte, and only those, on both paths.
func TestZeroOfALargeUnalignedRange(t *testing.T) {
	transferModes(t, func(t *testing.T, d *Device) {
		size := uint64(stagingSize + stagingSize/2 + 12)
		h := alloc(t, d, size)
		for _, r := range []vkruntime.StorageHandle{handle(h.ID, 3, size-8), handle(h.ID, 1, 2), handle(h.ID, 5, 7), handle(h.ID, 2, 2), handle(h.ID, 7, 1)} {
			require.NoError(t, d.Fill(t.Context(), h, 0xFFFFFFFF))
			require.NoError(t, d.Zero(t.Context(), r))
			got := make([]byte, size)
			require.NoError(t, d.Download(t.Context(), h, got))
			for i, b := range got {
				want := byte(0)
				if uint64(i) < r.Offset || uint64(i) >= r.End() {
					want = 0xFF
				}
				if b != want {
					t.Fatalf("zero of %v: byte %d of %d is %#x, want %#x", r, i, size, b, want)
				}
			}
		}
	})
}
