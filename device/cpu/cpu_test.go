package cpu_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

func newDevice(t *testing.T, opts ...cpu.Option) *cpu.Device {
	t.Helper()
	d, err := cpu.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func floatsOn(t *testing.T, d *cpu.Device, v []float32) vkruntime.StorageHandle {
	t.Helper()
	h, err := d.Storage().Alloc(max(4, uint64(4*len(v))))
	require.NoError(t, err)
	h.Size = uint64(4 * len(v))
	require.NoError(t, d.Upload(t.Context(), h, cpuref.Bytes(v)))
	return h
}

func read(t *testing.T, d *cpu.Device, h vkruntime.StorageHandle) []float32 {
	t.Helper()
	b := make([]byte, h.Size)
	require.NoError(t, d.Download(t.Context(), h, b))
	return cpuref.Floats(b)
}

func ramp(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * float32(i%17-8) / 8
	}
	return v
}

func run(t *testing.T, d *cpu.Device, l kernel.Launch, hs ...vkruntime.StorageHandle) {
	t.Helper()
	require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{l.With(hs...)}))
}

// Every kernel of the catalogue runs, and computes what its reference does.
func TestEveryKernelMatchesItsReference(t *testing.T) {
	d := newDevice(t)
	const rows, cols = 7, 300
	n := rows * cols
	x, y := ramp(n, 3), ramp(n, -2)
	xh, yh := floatsOn(t, d, x), floatsOn(t, d, y)
	out := func() vkruntime.StorageHandle { return floatsOn(t, d, make([]float32, n)) }
	elementwise := func(f func(a, b float32) float32) []float32 {
		want := make([]float32, n)
		for i := range want {
			want[i] = f(x[i], y[i])
		}
		return want
	}
	covered := map[string]bool{}
	check := func(l kernel.Launch, want []float32, tol float64, hs ...vkruntime.StorageHandle) {
		t.Helper()
		run(t, d, l, hs...)
		devtest.RequireClose(t, want, read(t, d, hs[len(hs)-1])[:len(want)], tol, l.Kernel.Name)
		covered[l.Kernel.Name] = true
	}
	check(kernel.Add(uint32(n)), elementwise(func(a, b float32) float32 { return a + b }), 0, xh, yh, out())
	check(kernel.Mul(uint32(n)), elementwise(func(a, b float32) float32 { return a * b }), 0, xh, yh, out())
	check(kernel.Scale(uint32(n), -2.5), cpuref.Scale(x, -2.5), 0, xh, out())
	check(kernel.ReLU(uint32(n)), cpuref.ReLU(x), 0, xh, out())
	check(kernel.GELU(uint32(n)), cpuref.GELU(x), 0, xh, out())
	check(kernel.Softmax(rows, cols), cpuref.Softmax(x, rows, cols), 0, xh, out())
	gamma, beta := ramp(cols, 1), ramp(cols, 0.5)
	check(kernel.LayerNorm(rows, cols, 1e-5), cpuref.LayerNorm(x, gamma, beta, rows, cols, 1e-5), 0,
		xh, floatsOn(t, d, gamma), floatsOn(t, d, beta), out())
	check(kernel.Transpose(rows, cols), cpuref.Transpose(x, rows, cols), 0, xh, out())
	check(kernel.MatMul(rows, rows, cols), cpuref.MatMul(x, cpuref.Transpose(y, rows, cols), rows, rows, cols), 0,
		xh, floatsOn(t, d, cpuref.Transpose(y, rows, cols)), out())
	check(kernel.CopyWords(uint32(n)), x, 0, xh, out())

	fill := kernel.FillWords(uint32(n), math.Float32bits(1.5))
	want := make([]float32, n)
	for i := range want {
		want[i] = 1.5
	}
	check(fill, want, 0, out())

	var total float64
	for _, v := range x {
		total += float64(v)
	}
	check(kernel.ReduceSum(uint32(n)), []float32{float32(total)}, 1e-6, xh, out())
	// A grid of three work groups leaves one partial sum per group: group g
	// sums the 256-element blocks b with b mod 3 == g.
	sums := out()
	partial := kernel.ReduceSum(uint32(n))
	require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{{Kernel: partial.Kernel, Grid: [3]uint32{3, 1, 1}, Bindings: []vkruntime.StorageHandle{xh, sums}, Push: partial.Push}}))
	var groups [3]float64
	for i, v := range x {
		groups[(i/256)%3] += float64(v)
	}
	devtest.RequireClose(t, []float32{float32(groups[0]), float32(groups[1]), float32(groups[2])}, read(t, d, sums)[:3], 1e-6, "partial sums")

	for _, k := range kernel.All() {
		require.True(t, covered[k.Name], "kernel %s has no check here", k.Name)
	}
}

// The storage keeps a running total against the heap and the limit: past
// them an allocation is a classified *OutOfMemoryError with the numbers,
// and the storage stays usable.
func TestStorageRefusesPastTheHeapAndTheLimit(t *testing.T) {
	d := newDevice(t, cpu.WithMemorySize(1<<20), cpu.WithAlignment(256))
	s := d.Storage()
	var hs []vkruntime.StorageHandle
	for range 4 {
		h, err := s.Alloc(256 << 10)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	_, err := s.Alloc(1)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(1<<20), oom.HeapSize)
	require.Equal(t, uint64(1<<20), oom.Usage)
	require.Equal(t, uint64(1<<20), s.Allocated(), "a refusal holds nothing")

	// A released page counts until flushed; a refusal flushes first.
	s.Dealloc(hs[0].ID)
	require.Equal(t, uint64(1<<20), s.Allocated())
	h, err := s.Alloc(1)
	require.NoError(t, err)
	require.Equal(t, uint64(3<<18+256), s.Allocated(), "one byte holds one 256 B alignment unit")
	require.NoError(t, d.Upload(t.Context(), h, []byte{7}))

	limited := newDevice(t, cpu.WithMemorySize(1<<20), cpu.WithMemoryLimit(1000))
	_, err = limited.Storage().Alloc(1024)
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(1000), oom.Limit)
	require.ErrorContains(t, err, "the 1000 B memory limit")
}

// A refused batch changes nothing; handles must name live pages and lie
// inside them.
func TestDispatchChecksEveryOpFirst(t *testing.T) {
	d := newDevice(t)
	const n = 64
	x := floatsOn(t, d, ramp(n, 1))
	out := floatsOn(t, d, make([]float32, n))
	err := d.Dispatch(t.Context(), []kernel.Op{kernel.ReLU(n).With(x, out), kernel.ReLU(n+1).With(x, out)})
	require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
	require.ErrorIs(t, err, device.ErrNothingRan, "refused before anything ran, and saying so")
	require.ErrorContains(t, err, "op 1 of 2")
	require.Equal(t, make([]float32, n), read(t, d, out), "the first op did not run")

	gone, err := d.Storage().Alloc(4 * n)
	require.NoError(t, err)
	d.Storage().Dealloc(gone.ID)
	err = d.Dispatch(t.Context(), []kernel.Op{kernel.ReLU(n).With(gone, out)})
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorIs(t, err, device.ErrNothingRan, "refused before anything ran, and saying so")
	err = d.Dispatch(t.Context(), []kernel.Op{kernel.ReLU(n).With(x, out), kernel.ReLU(n).With(gone, out)})
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorIs(t, err, device.ErrNothingRan)
	require.ErrorContains(t, err, "op 1 of 2")
	require.Equal(t, make([]float32, n), read(t, d, out), "the first op did not run")
	require.ErrorIs(t, d.Upload(t.Context(), gone, []byte{1}), vkruntime.ErrNotFound)
	past := vkruntime.StorageHandle{ID: out.ID, Offset: 256, Size: 4 * n}
	require.ErrorContains(t, d.Download(t.Context(), past, make([]byte, 4)), "outside its page")
	// Each is the range error kind, which callers classify.
	for what, err := range map[string]error{
		"download past the page":   d.Download(t.Context(), past, make([]byte, 4)),
		"upload past the page":     d.Upload(t.Context(), past, []byte{1}),
		"dispatch past the page":   d.Dispatch(t.Context(), []kernel.Op{kernel.ReLU(n).With(x, past)}),
		"upload past the handle":   d.Upload(t.Context(), vkruntime.StorageHandle{ID: out.ID, Size: 4}, make([]byte, 5)),
		"download past the handle": d.Download(t.Context(), vkruntime.StorageHandle{ID: out.ID, Size: 4}, make([]byte, 5)),
	} {
		require.ErrorIs(t, err, vkruntime.ErrOutOfRange, what)
	}
}

// A long kernel stops when its context ends, well before it would finish.
func TestDispatchStopsWhenTheContextEnds(t *testing.T) {
	d := newDevice(t)
	const m = 1024
	a := floatsOn(t, d, ramp(m*m, 1))
	c := floatsOn(t, d, make([]float32, m*m))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := d.Dispatch(ctx, []kernel.Op{kernel.MatMul(m, m, m).With(a, a, c)})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 2*time.Second, "a 1024³ product takes seconds; the wait stopped with the context")
}

func TestClosedDeviceRefusesWork(t *testing.T) {
	d, err := cpu.New()
	require.NoError(t, err)
	h, err := d.Storage().Alloc(64)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.ErrorContains(t, d.Upload(t.Context(), h, []byte{1}), "closed")
	_, err = d.Storage().Alloc(64)
	require.ErrorContains(t, err, "closed")
	require.Zero(t, d.Storage().Allocated())
}

// Every call of a closed device that can fail fails with an error matching
// runtime.ErrClosed, the class every backend's closed device answers with;
// the others do nothing, and a second Close is harmless.
func TestClosedDeviceErrorsAreClassified(t *testing.T) {
	d, err := cpu.New(cpu.WithSparseGranule(64 << 10))
	require.NoError(t, err)
	s := d.Storage().(*cpu.Storage)
	h, err := s.Alloc(256)
	require.NoError(t, err)
	v, err := s.ReserveVirtual(1 << 20)
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "twice")
	ctx := t.Context()
	_, err = s.Alloc(64)
	require.ErrorIs(t, err, vkruntime.ErrClosed)
	require.ErrorIs(t, d.Upload(ctx, h, []byte{1}), vkruntime.ErrClosed)
	require.ErrorIs(t, d.Upload(ctx, h, nil), vkruntime.ErrClosed)
	require.ErrorIs(t, d.Download(ctx, h, make([]byte, 4)), vkruntime.ErrClosed)
	require.ErrorIs(t, d.Dispatch(ctx, []kernel.Op{kernel.FillWords(64, 1).With(h)}), vkruntime.ErrClosed)
	require.ErrorIs(t, d.Dispatch(ctx, nil), vkruntime.ErrClosed)
	_, err = s.ReserveVirtual(1 << 20)
	require.ErrorIs(t, err, vkruntime.ErrClosed)
	require.ErrorIs(t, s.Bind(v.ID, []vkruntime.SparseBind{{Size: 64 << 10, Memory: h.ID}}), vkruntime.ErrClosed)
	require.NotErrorIs(t, err, vkruntime.ErrDeviceLost)
	require.ErrorContains(t, err, "cpu: device cpu")
	s.Dealloc(h.ID)
	s.ReleaseVirtual(v.ID)
	s.Flush()
	require.Zero(t, s.Allocated())
	require.Zero(t, s.Allocations())
}

func TestNewRefusesUnusableConfigurations(t *testing.T) {
	_, err := cpu.New(cpu.WithAlignment(48))
	require.ErrorContains(t, err, "not a power of two")
	_, err = cpu.New(cpu.WithMemorySize(16), cpu.WithAlignment(256))
	require.ErrorContains(t, err, "holds no 256 B slice")
	_, err = cpu.New(cpu.WithMaxPageSize(1000))
	require.ErrorContains(t, err, "not a multiple")
	// Each is an argument wrong in itself, as callers classify it.
	for _, opts := range [][]cpu.Option{
		{cpu.WithAlignment(48)}, {cpu.WithAlignment(2)},
		{cpu.WithMemorySize(16), cpu.WithAlignment(256)},
		{cpu.WithMaxPageSize(1000)}, {cpu.WithMaxPageSize(1 << 33)},
		{cpu.WithSparseGranule(3000)},
	} {
		_, err := cpu.New(opts...)
		require.ErrorIs(t, err, vkruntime.ErrInvalidArgument)
	}
	for _, index := range []int{-1, 1} {
		_, err := cpu.Open(t.Context(), device.Config{Index: index})
		require.ErrorContains(t, err, fmt.Sprintf("no device %d", index))
		require.ErrorIs(t, err, vkruntime.ErrInvalidArgument)
	}
	d := newDevice(t, cpu.WithMemorySize(1<<20))
	require.Equal(t, uint64(1<<20), d.Properties().MemorySize)
	require.Equal(t, uint64(1<<20), d.Storage().MaxAllocationSize())
	require.NoError(t, d.Properties().Validate())
}

// With sparse residency, granules of a virtual range alias the page memory
// bound under them: transfers and kernels through the range reach it,
// unbound granules read zeros and drop writes, and a refused bind changes
// nothing: one that names a granule twice among them.
func TestSparseGranulesAliasPageMemory(t *testing.T) {
	const g = 4096
	d := newDevice(t, cpu.WithSparseGranule(g))
	s := d.Storage().(vkruntime.SparseStorage)
	require.Equal(t, uint64(g), s.SparseGranule())
	v, err := s.ReserveVirtual(4 * g)
	require.NoError(t, err)
	require.Zero(t, d.Storage().Allocated(), "a virtual range holds no memory")
	m, err := d.Storage().Alloc(2 * g)
	require.NoError(t, err)
	require.NoError(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: g, Memory: m.ID}, {Offset: 2 * g, Size: g, Memory: m.ID, MemoryOffset: g}}))

	n := g / 4
	x := ramp(n, 3)
	first, third := vkruntime.StorageHandle{ID: v.ID, Size: g}, vkruntime.StorageHandle{ID: v.ID, Offset: 2 * g, Size: g}
	require.NoError(t, d.Upload(t.Context(), first, cpuref.Bytes(x)))
	require.NoError(t, d.Upload(t.Context(), third, cpuref.Bytes(x)))
	run(t, d, kernel.ReLU(uint32(n)), third, third)
	require.Equal(t, x, read(t, d, vkruntime.StorageHandle{ID: m.ID, Size: g}), "granule 0 is the page's first")
	require.Equal(t, cpuref.ReLU(x), read(t, d, vkruntime.StorageHandle{ID: m.ID, Offset: g, Size: g}), "granule 2 its second, where the kernel wrote")

	// A transfer across bound and unbound granules: the unbound ones read
	// zeros and drop what is written to them.
	across := vkruntime.StorageHandle{ID: v.ID, Offset: g / 2, Size: 2 * g}
	require.NoError(t, d.Upload(t.Context(), across, cpuref.Bytes(ramp(int(across.Size/4), 1))))
	got := read(t, d, across)
	require.Equal(t, ramp(int(across.Size/4), 1)[:n/2], got[:n/2], "the bound half of granule 0")
	require.Equal(t, make([]float32, n), got[n/2:n/2+n], "granule 1 is unbound")

	// Binds not on whole granules are arguments wrong in themselves.
	for _, b := range []vkruntime.SparseBind{{Offset: 1, Size: g, Memory: m.ID}, {Size: g / 2, Memory: m.ID}, {Size: g, Memory: m.ID, MemoryOffset: 4}, {Memory: m.ID}} {
		err := s.Bind(v.ID, []vkruntime.SparseBind{b})
		require.ErrorIs(t, err, vkruntime.ErrInvalidArgument, "%+v", b)
		require.ErrorContains(t, err, "multiples of the")
	}
	require.ErrorContains(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 3 * g, Size: g, Memory: m.ID, MemoryOffset: 2 * g}}), "holds")
	// Past the page's memory or past the range: the range error kind.
	require.ErrorIs(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 3 * g, Size: g, Memory: m.ID, MemoryOffset: 2 * g}}), vkruntime.ErrOutOfRange)
	require.ErrorIs(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 4 * g, Size: g, Memory: m.ID}}), vkruntime.ErrOutOfRange)
	require.ErrorIs(t, s.Bind(m.ID, []vkruntime.SparseBind{{Size: g, Memory: m.ID}}), vkruntime.ErrNotFound)
	// One submission naming a granule twice, as Vulkan forbids: here an
	// unbind and a bind of granule 2, which a GPU may apply either way.
	before := read(t, d, vkruntime.StorageHandle{ID: v.ID, Size: 3 * g})
	err = s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: 3 * g}, {Offset: 2 * g, Size: g, Memory: m.ID}})
	require.ErrorIs(t, err, vkruntime.ErrOverlappingBinds)
	var overlap *vkruntime.OverlappingBindsError
	require.ErrorAs(t, err, &overlap)
	require.Equal(t, [2]int{0, 1}, [2]int{overlap.First, overlap.Second}, "the binds named")
	require.Equal(t, before, read(t, d, vkruntime.StorageHandle{ID: v.ID, Size: 3 * g}), "the refused submission bound and unbound nothing")
	require.NoError(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: g}, {Offset: 2 * g, Size: g}}))
	require.Equal(t, make([]float32, n), read(t, d, first), "unbound again")
	s.ReleaseVirtual(v.ID)
	require.ErrorIs(t, d.Upload(t.Context(), first, []byte{1}), vkruntime.ErrNotFound)
	require.Equal(t, 1, d.Storage().Allocations(), "only the page is an allocation")

	none := newDevice(t)
	_, err = none.Storage().(vkruntime.SparseStorage).ReserveVirtual(g)
	require.ErrorContains(t, err, "no sparse residency")
	_, err = cpu.New(cpu.WithSparseGranule(3000))
	require.ErrorContains(t, err, "sparse granule 3000")
}

// Virtual ranges share the sparse address space: past what the live ones
// leave, ReserveVirtual is out of device memory, and a range gives its
// space back however it is released.
func TestVirtualRangesShareTheAddressSpace(t *testing.T) {
	d := newDevice(t, cpu.WithSparseGranule(64<<10))
	s := d.Storage().(vkruntime.SparseStorage)
	for _, release := range []func(vkruntime.StorageID){s.ReleaseVirtual, s.Dealloc} {
		devtest.RangesShareTheAddressSpace(t, s, release, s.Flush)
	}
}

// A batch runs the ops as they were checked: changing the caller's
// bindings and push constants once Dispatch has checked them changes
// nothing of what it runs. It read them again to run them, so a binding
// moved after the check was written unchecked.
func TestDispatchRunsWhatItChecked(t *testing.T) {
	d := newDevice(t)
	page, err := d.Storage().Alloc(1024)
	require.NoError(t, err)
	checked := vkruntime.StorageHandle{ID: page.ID, Size: 64}
	ops := []kernel.Op{kernel.FillWords(16, 7).With(checked)}
	cpu.SetAfterCheck(t, func() {
		ops[0].Bindings[0] = vkruntime.StorageHandle{ID: page.ID, Offset: 512, Size: 64}
		copy(ops[0].Push, kernel.FillWords(8, 9).Push)
	})
	require.NoError(t, d.Dispatch(t.Context(), ops))
	want := make([]byte, 1024)
	for i := range 16 {
		want[4*i] = 7
	}
	got := make([]byte, 1024)
	require.NoError(t, d.Download(t.Context(), page, got))
	require.Equal(t, want, got)
}

// A sparse bind binds what it checked: changing the caller's binds once
// Bind has checked them changes nothing of what it binds. It read them
// again to apply them, so a bind changed then was applied unchecked (past
// its page's memory, had its memory offset been moved there).
func TestBindAppliesWhatItChecked(t *testing.T) {
	const g = 4096
	d := newDevice(t, cpu.WithSparseGranule(g))
	s := d.Storage().(vkruntime.SparseStorage)
	v, err := s.ReserveVirtual(2 * g)
	require.NoError(t, err)
	m, err := s.Alloc(g)
	require.NoError(t, err)
	binds := []vkruntime.SparseBind{{Offset: 0, Size: g, Memory: m.ID}}
	cpu.SetAfterBindCheck(t, func() { binds[0].Offset = g })
	require.NoError(t, s.Bind(v.ID, binds))
	require.NoError(t, d.Upload(t.Context(), vkruntime.StorageHandle{ID: v.ID, Size: 2 * g}, cpuref.Bytes(ramp(2*g/4, 1))))
	require.Equal(t, ramp(g/4, 1), read(t, d, m), "the page backs granule 0, as checked")
}

// A virtual range takes whole granules of the sparse address space, as on
// a GPU, since each can bind its last granule whole: ranges of a byte took
// a byte each, so the space held far more ranges than it has granules.
func TestVirtualRangesTakeWholeGranules(t *testing.T) {
	const g = 1 << 30 // the 1 TiB space holds 1024 of them
	d := newDevice(t, cpu.WithSparseGranule(g))
	s := d.Storage().(*cpu.Storage)
	space := s.MaxVirtualSize()
	v, err := s.ReserveVirtual(1)
	require.NoError(t, err)
	require.Equal(t, space-g, s.VirtualSpaceLeft())
	for range space/g - 1 {
		_, err := s.ReserveVirtual(1)
		require.NoError(t, err)
	}
	_, err = s.ReserveVirtual(1)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "every granule is taken")
	s.ReleaseVirtual(v.ID)
	require.Equal(t, uint64(g), s.VirtualSpaceLeft(), "a released range gives its granule back")
	_, err = s.ReserveVirtual(g)
	require.NoError(t, err)
}

// A batch runs on the pages its check found: one released once the batch
// was checked is still read and written, as vk's pinned pages are. Looked
// up again to run, it failed the batch with ErrNotFound (not marked as one
// that ran nothing, though none of it had) where vk ran it.
func TestDispatchRunsOnPagesReleasedAfterItsCheck(t *testing.T) {
	d := newDevice(t)
	const n = 16
	tmp, err := d.Storage().Alloc(4 * n)
	require.NoError(t, err)
	out, err := d.Storage().Alloc(4 * n)
	require.NoError(t, err)
	cpu.SetAfterCheck(t, func() {
		d.Storage().Dealloc(tmp.ID)
		d.Storage().Flush()
	})
	err = d.Dispatch(t.Context(), []kernel.Op{kernel.FillWords(n, 7).With(tmp), kernel.CopyWords(n).With(tmp, out)})
	require.NoError(t, err)
	want := make([]byte, 4*n)
	for i := range n {
		want[4*i] = 7
	}
	got := make([]byte, 4*n)
	require.NoError(t, d.Download(t.Context(), out, got))
	require.Equal(t, want, got, "the copy read what the fill wrote into the released page")
	require.ErrorIs(t, d.Upload(t.Context(), tmp, []byte{1}), vkruntime.ErrNotFound, "released all the same")
}
