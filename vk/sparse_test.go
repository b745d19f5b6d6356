//go:build cgo

package vk

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// openSparseDevice is a test device with sparse residency, or a skip that
// says what the device lacks (lavapipe lacks all of it).
func openSparseDevice(t *testing.T) *Device {
	t.Helper()
	d := openTestDevice(t)
	if d.storage.SparseGranule() == 0 {
		t.Skipf("device %s has no sparse residency for its storage (sparseBinding and sparseResidencyBuffer: %v, sparse address space %d B): the Virtual layout falls back to SubSlices here",
			d.Name(), d.info.SparseResidency, d.info.Limits.SparseAddressSpaceSize)
	}
	return d
}

// Without sparse residency the storage says so: a granule of 0 and no
// virtual range.
func TestStorageWithoutSparseResidencyReservesNothing(t *testing.T) {
	d := openTestDevice(t)
	if d.storage.SparseGranule() != 0 {
		t.Skipf("device %s has sparse residency", d.Name())
	}
	_, err := d.storage.ReserveVirtual(1 << 20)
	require.ErrorContains(t, err, "has no sparse residency")
	require.Zero(t, d.storage.MaxVirtualSize())
}

// A submission of no binds names its range all the same: one the storage
// does not hold, or a page, is not found, as on the cpu device; the call
// returned nil. A submission of binds into a page is not found either (it
// matched no error kind).
func TestBindingNothingNamesItsRange(t *testing.T) {
	d := openTestDevice(t)
	page := alloc(t, d, 64)
	require.ErrorIs(t, d.storage.Bind(page.ID+1000, nil), vkruntime.ErrNotFound)
	require.ErrorIs(t, d.storage.Bind(page.ID, nil), vkruntime.ErrNotFound)
	err := d.storage.Bind(page.ID, []vkruntime.SparseBind{{Size: 4096}})
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorContains(t, err, "which is a page")
	if d.storage.SparseGranule() != 0 {
		v, err := d.storage.ReserveVirtual(d.storage.SparseGranule())
		require.NoError(t, err)
		require.NoError(t, d.storage.Bind(v.ID, nil))
		d.storage.ReleaseVirtual(v.ID)
	}
}

// Granules of a virtual range bound to a page's memory alias it: what is
// written through the range is in the page, kernels run on the range, and
// unbinding and releasing leave the storage as it was.
func TestSparseBindingAliasesPageMemory(t *testing.T) {
	d := openSparseDevice(t)
	s, ctx := d.storage, t.Context()
	g := s.SparseGranule()
	held := s.Allocated()
	v, err := s.ReserveVirtual(4 * g)
	require.NoError(t, err)
	require.Equal(t, held, s.Allocated(), "a virtual range holds no memory")
	m := alloc(t, d, 2*g)
	require.NoError(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: g, Memory: m.ID}, {Offset: 2 * g, Size: g, Memory: m.ID, MemoryOffset: g}}))

	words := int(g / 4)
	x := pseudoRandom(words, 3, 2)
	first, third := handle(v.ID, 0, g), handle(v.ID, 2*g, g)
	require.NoError(t, d.Upload(ctx, first, cpuref.Bytes(x)))
	require.NoError(t, d.Upload(ctx, third, cpuref.Bytes(x)))
	require.NoError(t, run(t, d, kernel.ReLU(uint32(words)), third, third))
	require.Equal(t, x, readFloats(t, d, first))
	require.Equal(t, x, readFloats(t, d, handle(m.ID, 0, g)), "granule 0 of the range is the page's first granule")
	require.Equal(t, cpuref.ReLU(x), readFloats(t, d, handle(m.ID, g, g)), "granule 2 is its second, where the kernel wrote")

	err = s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 1, Size: g, Memory: m.ID}})
	require.ErrorContains(t, err, "multiples of the")
	err = s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 4 * g, Size: g, Memory: m.ID}})
	require.ErrorContains(t, err, "outside the")
	require.ErrorIs(t, err, vkruntime.ErrOutOfRange)
	err = s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 3 * g, Size: g, Memory: m.ID, MemoryOffset: 64 * g}}) // past what the driver may round the page to
	require.ErrorContains(t, err, "holds")
	require.ErrorIs(t, err, vkruntime.ErrOutOfRange)
	err = s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 3 * g, Size: g, Memory: v.ID}})
	require.ErrorContains(t, err, "holds no memory")
	require.NotErrorIs(t, err, vkruntime.ErrOutOfRange)
	err = s.Bind(m.ID, []vkruntime.SparseBind{{Offset: 0, Size: g, Memory: m.ID}})
	require.ErrorContains(t, err, "not a virtual range")

	require.NoError(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 0, Size: g}, {Offset: 2 * g, Size: g}}))
	s.ReleaseVirtual(v.ID)
	s.Dealloc(m.ID)
	s.Flush()
	require.Equal(t, held, s.Allocated())
}

// The Virtual layout end to end on the device: the client's pool reserves a
// virtual range, binds memory under live buffers only, and kernels and
// transfers through it compute what the CPU does.
func TestVirtualLayoutRunsOnTheDevice(t *testing.T) {
	d := openSparseDevice(t)
	ctx := context.Background()
	c, err := client.Open(ctx, client.WithBackend(d), client.WithLayout(memory.VirtualLayout(memory.VirtualPlan{})))
	require.NoError(t, err)
	defer c.Close()
	for round := range 3 {
		var bufs []*client.Buffer
		for i, n := range []int{1000, 300_000, 2_000_000} {
			x, y := pseudoRandom(n, uint32(round*10+i), 3), pseudoRandom(n, uint32(round*10+i+5), 2)
			a, err := c.Create(ctx, cpuref.Bytes(x))
			require.NoError(t, err)
			b, err := c.Create(ctx, cpuref.Bytes(y))
			require.NoError(t, err)
			out, err := c.Empty(ctx, uint64(4*n))
			require.NoError(t, err)
			require.NoError(t, c.Run(ctx, kernel.Add(uint32(n)), a, b, out))
			got, err := out.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, cpuref.Add(x, y), cpuref.Floats(got), fmt.Sprintf("round %d, %d floats", round, n))
			bufs = append(bufs, a, b, out)
		}
		r := c.MemoryReport(ctx)
		kind, ok := r.Dynamic[0].Kind.(memory.VirtualKind)
		require.True(t, ok, "the first pool is virtual: %v", r.Dynamic[0].Kind)
		require.Equal(t, d.storage.SparseGranule(), kind.GranuleSize)
		for _, b := range bufs {
			require.NoError(t, b.Free())
		}
	}
	t.Logf("granule %d B; the pools: %+v", d.storage.SparseGranule(), c.MemoryReport(ctx).Dynamic[0])
}

// A released range holds its share of the sparse address space until Flush
// destroys its buffer, as the driver counts it: two ranges taking what is
// left leave no room for a third, releasing one makes none before Flush,
// and after it the third fits. The device's space is taken as 8 GiB here:
// the H200's driver refuses a second range of half its reported 1 TiB
// itself, before the storage's own account is full.
func TestReleasedRangeHoldsItsAddressSpaceUntilFlush(t *testing.T) {
	d := openSparseDevice(t)
	s := d.storage
	s.mu.Lock()
	require.Zero(t, s.virtualBytes)
	s.mu.Unlock()
	d.sparseSpace = 8 << 30
	half := d.sparseSpace / 2
	a, err := s.ReserveVirtual(half)
	require.NoError(t, err)
	b, err := s.ReserveVirtual(half)
	require.NoError(t, err)
	_, err = s.ReserveVirtual(half)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	s.ReleaseVirtual(a.ID)
	_, err = s.ReserveVirtual(half)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "before Flush the released range's buffer still exists")
	s.Flush()
	c, err := s.ReserveVirtual(half)
	require.NoError(t, err, "after Flush its address space is free again")
	s.ReleaseVirtual(b.ID)
	s.ReleaseVirtual(c.ID)
	s.Flush()
}

// A stream whose buffers outgrow its first virtual range takes more ranges
// (the first is a fourth of the heap, here a 256 MiB memory limit): buffers
// in every range compute what the CPU does, and memory freed in one range
// is bound again in another, by submissions that unbind in one sparse
// buffer and bind in another.
func TestVirtualLayoutSpreadsOverRangesOnTheDevice(t *testing.T) {
	d := openSparseDevice(t)
	ctx := context.Background()
	c, err := client.Open(ctx, client.WithBackend(d), client.WithMemoryLimit(256<<20),
		client.WithLayout(memory.VirtualLayout(memory.VirtualPlan{})))
	require.NoError(t, err)
	defer c.Close()
	const n = 2 << 20 // 8 MiB of floats a buffer
	virtualBytes := func() uint64 {
		d.storage.mu.Lock()
		defer d.storage.mu.Unlock()
		return d.storage.virtualBytes
	}
	type triple struct {
		a, b, out *client.Buffer
		x, y      []float32
	}
	create := func(seed uint32) triple {
		x, y := pseudoRandom(n, seed, 3), pseudoRandom(n, seed+1, 2)
		a, err := c.Create(ctx, cpuref.Bytes(x))
		require.NoError(t, err)
		b, err := c.Create(ctx, cpuref.Bytes(y))
		require.NoError(t, err)
		out, err := c.Empty(ctx, 4*n)
		require.NoError(t, err)
		require.NoError(t, c.Run(ctx, kernel.Add(n), a, b, out))
		return triple{a, b, out, x, y}
	}
	check := func(tr triple, what string) {
		got, err := tr.out.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, cpuref.Add(tr.x, tr.y), cpuref.Floats(got), what)
	}
	var live []triple
	for i := range 7 { // 168 MiB
		live = append(live, create(uint32(10*i)))
	}
	require.Greater(t, virtualBytes(), uint64(64<<20)+uint64(64<<20), "more than one range of 64 MiB")
	for i, tr := range live {
		check(tr, fmt.Sprintf("triple %d", i))
	}
	// Free the first ranges' buffers; new ones take their memory wherever
	// TLSF places them.
	for _, tr := range live[:3] {
		for _, b := range []*client.Buffer{tr.a, tr.b, tr.out} {
			require.NoError(t, b.Free())
		}
	}
	live = live[3:]
	for i := range 3 {
		live = append(live, create(uint32(100+10*i)))
	}
	for i, tr := range live {
		check(tr, fmt.Sprintf("after rebinding, triple %d", i))
	}
	r := c.MemoryReport(ctx)
	require.LessOrEqual(t, r.Usage().BytesReserved, uint64(256<<20), "within the limit")
	t.Logf("virtual ranges %d B; the pools: %+v", virtualBytes(), r.Dynamic[0])
}
