//go:build cgo

package vk

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

func TestStorageAllocDeallocFlush(t *testing.T) {
	d := openTestDevice(t)
	s := d.storage
	require.Zero(t, s.Allocated())
	a := alloc(t, d, 1000)
	b := alloc(t, d, 4096)
	require.Equal(t, vkruntime.StorageHandle{ID: a.ID, Offset: 0, Size: 1000}, a)
	require.NotEqual(t, a.ID, b.ID)
	require.Equal(t, 2, s.Allocations())
	held := s.Allocated()
	require.GreaterOrEqual(t, held, uint64(5096))

	s.Dealloc(a.ID)
	require.Equal(t, 2, s.Allocations(), "the release waits for Flush")
	require.ErrorIs(t, d.Upload(t.Context(), a, []byte{1}), vkruntime.ErrNotFound, "a deallocated page is gone at once")
	s.Dealloc(a.ID) // twice: ignored
	s.Flush()
	require.Equal(t, 1, s.Allocations())
	require.Less(t, s.Allocated(), held)

	s.Dealloc(b.ID)
	s.Flush()
	require.Zero(t, s.Allocated())
	require.Zero(t, s.Allocations())
	s.Dealloc(12345) // unknown: ignored
	s.Flush()

	_, err := s.Alloc(0)
	require.ErrorContains(t, err, "0 B")
}

// Flush leaves a page alone while a transfer or dispatch still uses it.
func TestFlushWaitsForUsers(t *testing.T) {
	d := openTestDevice(t)
	s := d.storage
	h := alloc(t, d, 256)
	pins, err := s.pin(h)
	require.NoError(t, err)
	s.Dealloc(h.ID)
	s.Flush()
	require.Equal(t, 1, s.Allocations(), "pinned page survives Flush")
	s.unpin(pins)
	s.Flush()
	require.Zero(t, s.Allocations())
}

func TestMemoryLimit(t *testing.T) {
	const limit = 1 << 20
	d := openTestDevice(t, WithMemoryLimit(limit))
	s := d.storage
	a := alloc(t, d, 768<<10)
	_, err := s.Alloc(512 << 10)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(512<<10), oom.Size)
	require.Equal(t, uint64(limit), oom.Limit)
	require.GreaterOrEqual(t, oom.Usage, uint64(768<<10))
	require.Equal(t, d.Properties().MemorySize, oom.HeapSize)
	require.Contains(t, err.Error(), "memory limit")
	require.Equal(t, 1, s.Allocations(), "the refused allocation left nothing behind")

	// A deallocated page still counts until flushed, and an allocation
	// that needs its room flushes it.
	s.Dealloc(a.ID)
	b, err := s.Alloc(512 << 10)
	require.NoError(t, err)
	require.Equal(t, 1, s.Allocations())
	require.LessOrEqual(t, s.Allocated(), uint64(limit))
	s.Dealloc(b.ID)
	s.Flush()
}

func TestAllocationLargerThanTheHeap(t *testing.T) {
	d := openTestDevice(t)
	heap := d.Properties().MemorySize
	_, err := d.Storage().Alloc(heap + 1)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, heap+1, oom.Size)
	require.Equal(t, heap, oom.HeapSize)
	require.Contains(t, err.Error(), fmt.Sprintf("asked %d B, heap %d B", heap+1, heap))
	require.Zero(t, d.storage.Allocations())
}

// The storage keeps a running total of what it holds against the heap:
// lavapipe backs "device memory" with host memory and would hand out far
// more than its 2 GiB heap. Pages of 128 MiB are refused once the next one
// would pass the heap, with a classified error, and the storage stays
// usable.
func TestStorageRefusesPagesPastTheHeapInTotal(t *testing.T) {
	d := openTestDevice(t)
	s := d.storage
	heap := d.Properties().MemorySize
	const page = 128 << 20
	if heap >= 40*page {
		t.Skipf("the %d B heap holds 40 pages of 128 MiB: this is lavapipe's 2 GiB heap", heap)
	}
	var pages []vkruntime.StorageHandle
	var refused error
	for range 40 {
		h, err := s.Alloc(page)
		if err != nil {
			refused = err
			break
		}
		pages = append(pages, h)
	}
	require.Error(t, refused, "40 pages of 128 MiB on a heap of %d B", heap)
	require.ErrorIs(t, refused, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, refused, &oom)
	require.Equal(t, uint64(page), oom.Size)
	require.Equal(t, heap, oom.HeapSize)
	require.LessOrEqual(t, s.Allocated(), heap, "the storage never holds more than the heap")
	require.Greater(t, s.Allocated()+page, heap, "it was refused only for lack of room")
	require.Equal(t, len(pages), s.Allocations(), "the refusal left nothing behind")
	t.Logf("heap %d B: %d pages of 128 MiB, then %v", heap, len(pages), refused)

	// Still usable: a released page makes room for the next.
	s.Dealloc(pages[0].ID)
	h, err := s.Alloc(page)
	require.NoError(t, err)
	require.NoError(t, d.Upload(t.Context(), h, []byte{1, 2, 3}))
	for _, p := range append(pages[1:], h) {
		s.Dealloc(p.ID)
	}
	s.Flush()
	require.Zero(t, s.Allocated())
}

func TestStorageIsSafeForConcurrentUse(t *testing.T) {
	d := openTestDevice(t)
	s := d.storage
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 16 {
				h, err := s.Alloc(uint64(64 * (i + 1)))
				if err != nil {
					errs <- err
					return
				}
				data := bytes.Repeat([]byte{byte(g)}, int(h.Size))
				if err := d.Upload(t.Context(), h, data); err != nil {
					errs <- err
					return
				}
				got := make([]byte, h.Size)
				if err := d.Download(t.Context(), h, got); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(data, got) {
					errs <- errors.New("read back another writer's bytes")
					return
				}
				s.Dealloc(h.ID)
				if i%4 == 0 {
					s.Flush()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	s.Flush()
	require.Zero(t, s.Allocations())
	require.Zero(t, s.Allocated())
}

// Writes to one slice of a page never touch its neighbours: uploads, zero,
// fill, copies and kernels on the middle slice leave both sides as they were.
func TestSlicesLeaveTheirNeighboursAlone(t *testing.T) {
	transferModes(t, func(t *testing.T, d *Device) {
		const slice = 64
		page := alloc(t, d, 3*slice)
		before := bytes.Repeat([]byte{0xAB}, 3*slice)
		require.NoError(t, d.Upload(t.Context(), page, before))
		left := vkruntime.StorageHandle{ID: page.ID, Offset: 0, Size: slice}
		mid := vkruntime.StorageHandle{ID: page.ID, Offset: slice, Size: slice}
		right := vkruntime.StorageHandle{ID: page.ID, Offset: 2 * slice, Size: slice}
		check := func(what string, wantMid []byte) {
			t.Helper()
			got := make([]byte, 3*slice)
			require.NoError(t, d.Download(t.Context(), page, got))
			require.Equal(t, before[:slice], got[:slice], "%s: left neighbour", what)
			require.Equal(t, before[2*slice:], got[2*slice:], "%s: right neighbour", what)
			require.Equal(t, wantMid, got[slice:2*slice], "%s: the slice itself", what)
		}
		data := make([]byte, slice)
		for i := range data {
			data[i] = byte(i)
		}
		require.NoError(t, d.Upload(t.Context(), mid, data))
		check("upload", data)
		require.NoError(t, d.Zero(t.Context(), mid))
		check("zero", make([]byte, slice))
		require.NoError(t, d.Fill(t.Context(), mid, 0x01020304))
		check("fill", bytes.Repeat([]byte{4, 3, 2, 1}, slice/4))
		odd := vkruntime.StorageHandle{ID: page.ID, Offset: slice, Size: 7}
		require.NoError(t, d.Zero(t.Context(), odd))
		check("zero of 7 bytes", append(make([]byte, 7), bytes.Repeat([]byte{4, 3, 2, 1}, slice/4)[7:]...))
		require.NoError(t, d.Copy(t.Context(), mid, left))
		check("copy", before[:slice])
		require.NoError(t, run(t, d, kernel.FillWords(slice/4, 0x11111111), mid))
		check("fill kernel", bytes.Repeat([]byte{0x11}, slice))
		// A kernel told to write more than its slice holds is refused.
		err := run(t, d, kernel.FillWords(slice/4+1, 0), mid)
		require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
		check("refused kernel", bytes.Repeat([]byte{0x11}, slice))
		_ = right
	})
}

func TestTransfersAreBoundsChecked(t *testing.T) {
	transferModes(t, func(t *testing.T, d *Device) {
		page := alloc(t, d, 64)
		require.NoError(t, d.Upload(t.Context(), page, bytes.Repeat([]byte{7}, 64)))
		outside := vkruntime.StorageHandle{ID: page.ID, Offset: 48, Size: 32}
		require.ErrorContains(t, d.Upload(t.Context(), outside, make([]byte, 32)), "outside its page of 64 B")
		require.ErrorContains(t, d.Zero(t.Context(), outside), "outside its page")
		require.ErrorContains(t, d.Download(t.Context(), outside, make([]byte, 32)), "outside its page")
		require.ErrorContains(t, d.Upload(t.Context(), vkruntime.StorageHandle{ID: page.ID, Size: 8}, make([]byte, 9)), "upload of 9 B")
		require.ErrorContains(t, d.Download(t.Context(), vkruntime.StorageHandle{ID: page.ID, Size: 8}, make([]byte, 9)), "download of 9 B")
		// Each is the range error kind, which callers classify.
		for what, err := range map[string]error{
			"upload past the page":     d.Upload(t.Context(), outside, make([]byte, 32)),
			"zero past the page":       d.Zero(t.Context(), outside),
			"download past the page":   d.Download(t.Context(), outside, make([]byte, 32)),
			"upload past the handle":   d.Upload(t.Context(), vkruntime.StorageHandle{ID: page.ID, Size: 8}, make([]byte, 9)),
			"download past the handle": d.Download(t.Context(), vkruntime.StorageHandle{ID: page.ID, Size: 8}, make([]byte, 9)),
			"copy past the handle":     d.Copy(t.Context(), vkruntime.StorageHandle{ID: page.ID, Offset: 32, Size: 8}, vkruntime.StorageHandle{ID: page.ID, Size: 9}),
			"dispatch past the page":   d.Dispatch(t.Context(), []kernel.Op{kernel.FillWords(8, 1).With(outside)}),
		} {
			require.ErrorIs(t, err, vkruntime.ErrOutOfRange, what)
		}
		// Arguments wrong in themselves are their own kind.
		err := d.Fill(t.Context(), vkruntime.StorageHandle{ID: page.ID, Offset: 2, Size: 8}, 0)
		require.ErrorContains(t, err, "multiples of 4")
		require.ErrorIs(t, err, vkruntime.ErrInvalidArgument)
		err = d.Copy(t.Context(), vkruntime.StorageHandle{ID: page.ID, Offset: 8, Size: 16}, vkruntime.StorageHandle{ID: page.ID, Size: 16})
		require.ErrorContains(t, err, "overlap")
		require.ErrorIs(t, err, vkruntime.ErrInvalidArgument)
		require.ErrorIs(t, d.Upload(t.Context(), vkruntime.StorageHandle{ID: 999, Size: 4}, make([]byte, 4)), vkruntime.ErrNotFound)
		got := make([]byte, 64)
		require.NoError(t, d.Download(t.Context(), page, got))
		require.Equal(t, bytes.Repeat([]byte{7}, 64), got, "refused transfers changed nothing")
	})
}

// Transfers larger than the staging buffer go in chunks; a partial upload
// leaves the rest of the range alone.
func TestLargeAndPartialTransfers(t *testing.T) {
	transferModes(t, func(t *testing.T, d *Device) {
		size := uint64(stagingSize + stagingSize/2 + 12)
		h := alloc(t, d, size)
		require.NoError(t, d.Zero(t.Context(), h))
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		require.NoError(t, d.Upload(t.Context(), h, data))
		got := make([]byte, size)
		require.NoError(t, d.Download(t.Context(), h, got))
		require.True(t, bytes.Equal(data, got), "round trip of %d B", size)

		require.NoError(t, d.Upload(t.Context(), h, []byte{1, 2, 3}))
		head := make([]byte, 8)
		require.NoError(t, d.Download(t.Context(), h, head))
		require.Equal(t, append([]byte{1, 2, 3}, data[3:8]...), head)
		require.NoError(t, d.Zero(t.Context(), h))
		require.NoError(t, d.Download(t.Context(), h, got))
		require.True(t, bytes.Equal(make([]byte, size), got), "zeroed")
	})
}
