package cpu_test

import (
	"context"
	"math"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Rows of no columns (and no rows) are an empty launch: Validate accepts
// it, and every device writes nothing, not even past the empty output.
func TestEmptyRowsWriteNothing(t *testing.T) {
	onDevices(t, func(t *testing.T, d device.Device) {
		sentinel := []float32{7, 7, 7, 7}
		for _, l := range []kernel.Launch{
			kernel.Softmax(3, 0), kernel.Softmax(0, 4),
			kernel.LayerNorm(3, 0, 1e-5), kernel.LayerNorm(0, 4, 1e-5),
			kernel.Transpose(3, 0), kernel.Transpose(0, 4),
		} {
			hs := make([]vkruntime.StorageHandle, len(l.Kernel.Bindings))
			for i := range hs {
				hs[i] = put(t, d, sentinel)
			}
			require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{l.With(hs...)}), "%s %x", l.Kernel.Name, l.Push)
			for i, h := range hs {
				require.Equal(t, sentinel, get(t, d, h), "%s %x: binding %d", l.Kernel.Name, l.Push, i)
			}
		}
	})
}

// The cpu device returns at once from rows of no columns, however many:
// it walked all 2^32 - 1 of them, 44 s for a softmax and 72 s for a layer
// norm (2 s for a transpose) over bindings of 0 B, with nothing to write.
func TestManyEmptyRowsReturnAtOnce(t *testing.T) {
	d := newDevice(t)
	for _, l := range []kernel.Launch{
		kernel.Softmax(math.MaxUint32, 0), kernel.LayerNorm(math.MaxUint32, 0, 1e-5), kernel.Transpose(math.MaxUint32, 0),
	} {
		l.Grid = [3]uint32{1, 1, 1}
		hs := make([]vkruntime.StorageHandle, len(l.Kernel.Bindings)) // 0 B each: all the launch needs
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := d.Dispatch(ctx, []kernel.Op{l.With(hs...)})
		cancel()
		require.NoError(t, err, "%s of %d x 0", l.Kernel.Name, uint32(math.MaxUint32))
	}
}

// A transfer through a handle of a virtual range copies only the bytes it
// moves: a download of 4 B through a handle of a whole 1 GiB range gathered
// (and allocated) all of it first, and the upload scattered it all back.
func TestTransfersThroughLargeVirtualHandlesCopyWhatTheyMove(t *testing.T) {
	d, v, _ := largeRangeOverOnePage(t)

	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	require.NoError(t, d.Upload(t.Context(), v, []byte{1, 2, 3, 4}))
	got := make([]byte, 4)
	require.NoError(t, d.Download(t.Context(), v, got))
	goruntime.ReadMemStats(&after)
	require.Equal(t, []byte{1, 2, 3, 4}, got)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated for 8 B of transfers")

	// The whole handle must still lie in the range.
	past := vkruntime.StorageHandle{ID: v.ID, Offset: 1 << 30, Size: 4}
	require.ErrorContains(t, d.Download(t.Context(), past, nil), "outside its page")
}

// A page past what Go can address, on a heap set larger still, is out of
// device memory and holds nothing: Alloc panicked in make, with the size
// already counted against the heap.
func TestPagesPastHostMemoryAreOutOfMemory(t *testing.T) {
	d := newDevice(t, cpu.WithMemorySize(1<<62))
	s := d.Storage()
	for _, size := range []uint64{1 << 61, 1<<62 - 4096} {
		_, err := s.Alloc(size)
		require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "%d B", size)
		var oom *vkruntime.OutOfMemoryError
		require.ErrorAs(t, err, &oom)
		require.Equal(t, size, oom.Size)
		require.Zero(t, s.Allocated(), "a refused page holds nothing")
	}
	h, err := s.Alloc(4)
	require.NoError(t, err)
	require.NoError(t, d.Upload(t.Context(), h, []byte{1, 2, 3, 4}))
}

// A kernel on a handle of a virtual range copies only the bytes it
// touches: filling one word through a handle of a 1 GiB range copied the
// whole handle out and back, 1 GiB of host memory for 4 B.
func TestKernelsOnLargeVirtualHandlesCopyWhatTheyTouch(t *testing.T) {
	d, v, m := largeRangeOverOnePage(t)
	require.NoError(t, d.Upload(t.Context(), m, []byte{9, 9, 9, 9, 9, 9, 9, 9}))

	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{kernel.FillWords(1, 0x01020304).With(v)}))
	goruntime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated to fill one word")
	got := make([]byte, 8)
	require.NoError(t, d.Download(t.Context(), m, got))
	require.Equal(t, []byte{4, 3, 2, 1, 9, 9, 9, 9}, got, "the word filled, the next one as it was")
}

// largeRangeOverOnePage is a device with a 1 GiB virtual range whose first
// granule is bound to a page m of one granule.
func largeRangeOverOnePage(t *testing.T) (d *cpu.Device, v, m vkruntime.StorageHandle) {
	t.Helper()
	const g = 64 << 10
	d = newDevice(t, cpu.WithSparseGranule(g))
	s := d.Storage().(*cpu.Storage)
	v, err := s.ReserveVirtual(1 << 30)
	require.NoError(t, err)
	m, err = s.Alloc(g)
	require.NoError(t, err)
	require.NoError(t, s.Bind(v.ID, []vkruntime.SparseBind{{Size: g, Memory: m.ID}}))
	return d, v, m
}

// A virtual range is no allocation however it is released: one released
// by Dealloc counted as a page until the next Flush (Allocations went from
// 1 to 2 while the storage held the one page), as none does on vk.
func TestVirtualRangesReleasedByDeallocAreNoAllocations(t *testing.T) {
	const g = 64 << 10
	d := newDevice(t, cpu.WithSparseGranule(g))
	s := d.Storage().(*cpu.Storage)
	m, err := s.Alloc(g)
	require.NoError(t, err)
	v, err := s.ReserveVirtual(1 << 20)
	require.NoError(t, err)
	require.Equal(t, 1, s.Allocations())
	s.Dealloc(v.ID)
	require.Equal(t, 1, s.Allocations(), "the page alone")
	require.EqualValues(t, g, s.Allocated())
	s.Dealloc(m.ID)
	require.Equal(t, 1, s.Allocations(), "the page, released, until the Flush")
	s.Flush()
	require.Zero(t, s.Allocations())
}

// A transpose looks at its context as it goes, as the other kernels do: a
// 4096 x 4096 one ran to its end over 300 ms and more past a 20 ms
// deadline and returned nil, its output written whole. The context ends at
// a chosen look, not a time, so a fast host cannot beat the deadline.
func TestTransposeStopsWhenTheContextEnds(t *testing.T) {
	d := newDevice(t)
	const rows, cols = 4096, 4096
	x, err := d.Storage().Alloc(4 * rows * cols)
	require.NoError(t, err)
	out, err := d.Storage().Alloc(4 * rows * cols)
	require.NoError(t, err)
	op := []kernel.Op{kernel.Transpose(rows, cols).With(x, out)}
	whole := &lookCtx{Context: t.Context()}
	require.NoError(t, d.Dispatch(whole, op))
	looks := whole.looks.Load()
	require.Greater(t, looks, int64(64), "a transpose of 2^24 words looked at its context %d times", looks)
	ending := endingAt(t, 3)
	require.ErrorIs(t, d.Dispatch(ending, op), context.DeadlineExceeded)
	require.Equal(t, int64(3), ending.looks.Load(), "the transpose went on looking after its context ended")
}

// A matmul with no output (N = 0, or M = 0) returns at once: one of
// (2^32 - 1) x 0 by K = 0, over bindings of 0 B, walked every row of
// nothing for 25 s.
func TestEmptyMatMulsReturnAtOnce(t *testing.T) {
	d := newDevice(t)
	for _, l := range []kernel.Launch{kernel.MatMul(math.MaxUint32, 0, 0), kernel.MatMul(0, math.MaxUint32, 0)} {
		l.Grid = [3]uint32{1, 1, 1}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := d.Dispatch(ctx, []kernel.Op{l.With(make([]vkruntime.StorageHandle, 3)...)})
		cancel()
		require.NoError(t, err, "matmul %x", l.Push)
	}
}

// A long row stops when its context ends, not only the rows before it: a
// softmax of one row of 2^24 columns ran its 0.6 s whole past a deadline
// a tenth of that and returned nil, a layer norm of it and a matmul of one
// row by K x N = 2^13 x 2^12 ran theirs whole before they returned
// DeadlineExceeded. The context here ends at a chosen look rather than at a
// time, so the test does not hang on how fast the host runs the row: timed,
// a run slowed by fresh pages set a deadline the next run beat.
func TestLongRowsStopWhenTheContextEnds(t *testing.T) {
	d := newDevice(t)
	alloc := func(n uint64) vkruntime.StorageHandle {
		h, err := d.Storage().Alloc(max(n, 4))
		require.NoError(t, err)
		t.Cleanup(func() { d.Storage().Dealloc(h.ID) })
		return h
	}
	for _, l := range []kernel.Launch{kernel.Softmax(1, 1<<24), kernel.LayerNorm(1, 1<<24, 1e-5), kernel.MatMul(1, 1<<12, 1<<13)} {
		sizes := kernel.BindingSizes(l.Kernel, l.Grid, l.Push)
		hs := make([]vkruntime.StorageHandle, len(sizes))
		for i, n := range sizes {
			hs[i] = alloc(n)
		}
		whole := &lookCtx{Context: t.Context()}
		require.NoError(t, d.Dispatch(whole, []kernel.Op{l.With(hs...)}), l.Kernel.Name)
		looks := whole.looks.Load()
		// One row of 2^24 elements (or multiply-adds past 2^25) is hundreds
		// of chunks; a kernel that looked only between rows looked twice.
		require.Greater(t, looks, int64(64), "%s looked at its context %d times in one row", l.Kernel.Name, looks)

		ending := endingAt(t, looks/2)
		err := d.Dispatch(ending, []kernel.Op{l.With(hs...)})
		require.ErrorIs(t, err, context.DeadlineExceeded, l.Kernel.Name)
		require.Equal(t, looks/2, ending.looks.Load(), "%s went on looking after its context ended", l.Kernel.Name)
	}

	// Paced, they still compute the reference's results bit for bit, in
	// rows longer than the stretch between looks at the context.
	const rows, cols = 3, 70001
	x, gamma, beta := ramp(rows*cols, 3), ramp(cols, 1), ramp(cols, 0.5)
	for i := range x {
		x[i] += float32(i%1001) / 1001
	}
	xh := put(t, d, x)
	out := func(n int) vkruntime.StorageHandle { return put(t, d, make([]float32, n)) }
	sm, ln, mm := out(rows*cols), out(rows*cols), out(rows*300)
	require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{
		kernel.Softmax(rows, cols).With(xh, sm),
		kernel.LayerNorm(rows, cols, 1e-5).With(xh, put(t, d, gamma), put(t, d, beta), ln),
		kernel.MatMul(rows, 300, 300).With(vkruntime.StorageHandle{ID: xh.ID, Size: 4 * rows * 300}, vkruntime.StorageHandle{ID: xh.ID, Size: 4 * 300 * 300}, mm),
	}))
	require.Equal(t, cpuref.Softmax(x, rows, cols), get(t, d, sm), "softmax")
	require.Equal(t, cpuref.LayerNorm(x, gamma, beta, rows, cols, float64(float32(1e-5))), get(t, d, ln), "layernorm (eps as its f32 push constant)")
	require.Equal(t, cpuref.MatMul(x[:rows*300], x[:300*300], rows, 300, 300), get(t, d, mm), "matmul")
}

// An alignment of 4 GiB or more leaves no page a binding may cover (each
// is below 4 GiB and a multiple of the alignment): New made such a device,
// with a max page size of 0, that every memory manager then refused.
func TestNewRefusesAlignmentsThatLeaveNoPage(t *testing.T) {
	for _, align := range []uint64{1 << 32, 1 << 40} {
		_, err := cpu.New(cpu.WithAlignment(align), cpu.WithMemorySize(4*align))
		require.ErrorContains(t, err, "no page", "alignment %d", align)
	}
	d := newDevice(t, cpu.WithAlignment(1<<31), cpu.WithMemorySize(1<<33))
	require.EqualValues(t, 1<<31, d.Properties().MaxPageSize)
	require.NoError(t, d.Properties().Validate())
}

// endingAt is a context whose deadline has passed from the device's look
// at number n on, whenever that comes.
func endingAt(t *testing.T, n int64) *lookCtx {
	return &lookCtx{Context: t.Context(), onLook: func(k int64) error {
		if k >= n {
			return context.DeadlineExceeded
		}
		return nil
	}}
}

// A handle of another cpu device names nothing here, as vk's do: each
// storage counted its ids from 1, so a handle of the first page of one
// device wrote the first page of another, and a dispatch ran on it.
func TestHandleOfAnotherDeviceIsNotFound(t *testing.T) {
	a, b := newDevice(t), newDevice(t)
	ha, err := a.Storage().Alloc(16)
	require.NoError(t, err)
	hb, err := b.Storage().Alloc(16)
	require.NoError(t, err)
	require.NotEqual(t, ha.ID, hb.ID, "two devices' pages share an id")
	require.ErrorIs(t, b.Upload(t.Context(), ha, []byte{1, 2, 3, 4}), vkruntime.ErrNotFound)
	require.ErrorIs(t, b.Download(t.Context(), ha, make([]byte, 4)), vkruntime.ErrNotFound)
	require.ErrorIs(t, b.Dispatch(t.Context(), []kernel.Op{kernel.FillWords(4, 1).With(ha)}), vkruntime.ErrNotFound)
	got := make([]byte, 16)
	require.NoError(t, b.Download(t.Context(), hb, got))
	require.Equal(t, make([]byte, 16), got, "another device's handle wrote this device's page")
}

// A handle of a Vulkan device names nothing on a cpu device, nor one of a
// cpu device on a Vulkan device: each backend counted its ids apart, so
// the two devices' pages of the same id answered for each other. The
// lower counter is brought up to the other's id first, as a program that
// has made as many pages on both would have it.
func TestHandleOfAnotherBackendIsNotFound(t *testing.T) {
	if openVulkan == nil {
		t.Skip("no Vulkan backend linked in (built without cgo)")
	}
	c, v := newDevice(t), openVulkan(t)
	alloc := func(d device.Device) vkruntime.StorageHandle {
		h, err := d.Storage().Alloc(16)
		require.NoError(t, err)
		return h
	}
	hc, hv := alloc(c), alloc(v)
	for hc.ID < hv.ID {
		c.Storage().Dealloc(hc.ID)
		c.Storage().Flush()
		hc = alloc(c)
	}
	for hv.ID < hc.ID {
		v.Storage().Dealloc(hv.ID)
		v.Storage().Flush()
		hv = alloc(v)
	}
	buf := make([]byte, 16)
	require.ErrorIs(t, c.Download(t.Context(), hv, buf), vkruntime.ErrNotFound, "a Vulkan handle read a cpu page")
	require.ErrorIs(t, v.Download(t.Context(), hc, buf), vkruntime.ErrNotFound, "a cpu handle read a Vulkan page")
	require.ErrorIs(t, c.Upload(t.Context(), hv, buf), vkruntime.ErrNotFound)
	require.ErrorIs(t, v.Upload(t.Context(), hc, buf), vkruntime.ErrNotFound)
}

// Unbinding most of a large range looks only at the granules bound in it,
// and unbinds those in the range and no other: it stepped over every
// granule named, 2^32 of them for 1 TiB of 256 B granules, holding the
// storage's lock all along.
func TestUnbindingALargeRangeReturnsAtOnce(t *testing.T) {
	const g = cpu.DefaultAlignment
	d := newDevice(t, cpu.WithSparseGranule(g))
	s := d.Storage().(*cpu.Storage)
	v, err := s.ReserveVirtual(s.MaxVirtualSize())
	require.NoError(t, err)
	m, err := s.Alloc(2 * g)
	require.NoError(t, err)
	require.NoError(t, d.Upload(t.Context(), m, cpuref.Bytes([]float32{1, 2})))
	require.NoError(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: g, Memory: m.ID}, {Offset: 4 * g, Size: g, Memory: m.ID}}))

	unbound := make(chan error, 1)
	go func() {
		unbound <- s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 2 * g, Size: s.MaxVirtualSize() - 2*g}})
	}()
	select {
	case err := <-unbound:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("unbinding 2^32 granules, two of them bound, took over 5 s")
	}
	got := make([]byte, 8)
	require.NoError(t, d.Download(t.Context(), vkruntime.StorageHandle{ID: v.ID, Size: 8}, got))
	require.Equal(t, cpuref.Bytes([]float32{1, 2}), got, "granule 0, before the range unbound, is still bound")
	require.NoError(t, d.Download(t.Context(), vkruntime.StorageHandle{ID: v.ID, Offset: 4 * g, Size: 8}, got))
	require.Equal(t, make([]byte, 8), got, "granule 4 is unbound")
}

// A page deallocated while its memory backs granules of a live virtual
// range stays, counted, until they are unbound or the range released:
// the Flush after Dealloc handed its bytes back, though the range still
// read and wrote them, so the storage held more than it counted (and a
// GPU's driver may hand freed memory to the next allocation, which the
// range would then read).
func TestPagesBoundInARangeAreKeptUntilUnbound(t *testing.T) {
	const g = 4096
	d := newDevice(t, cpu.WithSparseGranule(g))
	s := d.Storage().(*cpu.Storage)
	for _, unbind := range []string{"unbound", "range released"} {
		v, err := s.ReserveVirtual(2 * g)
		require.NoError(t, err)
		m, err := s.Alloc(2 * g)
		require.NoError(t, err)
		require.NoError(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: g, Memory: m.ID, MemoryOffset: g}}))
		first := vkruntime.StorageHandle{ID: v.ID, Size: g}
		require.NoError(t, d.Upload(t.Context(), first, cpuref.Bytes(ramp(g/4, 1))))
		s.Dealloc(m.ID)
		s.Flush()
		require.EqualValues(t, 2*g, s.Allocated(), "%s: the page backs the range still", unbind)
		require.Equal(t, 1, s.Allocations(), unbind)
		got := make([]byte, g)
		require.NoError(t, d.Download(t.Context(), first, got))
		require.Equal(t, cpuref.Bytes(ramp(g/4, 1)), got, unbind)
		if unbind == "unbound" {
			require.NoError(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: 2 * g}}))
		} else {
			s.ReleaseVirtual(v.ID)
		}
		s.Flush()
		require.Zero(t, s.Allocated(), unbind)
		require.Zero(t, s.Allocations(), unbind)
		s.ReleaseVirtual(v.ID)
	}
}
