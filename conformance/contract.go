package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// The checks below call the device itself (cl.Device()), not the client:
// the client validates launches, sizes every transfer to its range and
// never batches more than zero fills ahead of its kernels, so a device
// that leans on it for those would pass every check made through it.

func contractChecks(open OpenClient) []Check {
	return []Check{
		{
			Name: "device/transfer-partial-range",
			Rule: "Upload writes its bytes to the start of its range and Download reads the start of its range, fewer bytes than the range holds allowed; more is refused with an error matching runtime.ErrOutOfRange; no other byte changes",
			run:  withClient(open, checkPartialTransfers),
		},
		{
			Name: "device/dispatch-checked-first",
			Rule: "Dispatch checks every op (kernel.Validate, then that its bindings lie in live allocations) before any runs: an invalid op (a binding smaller than the push constants call for, push constants of another size than the kernel takes, a grid past the device's work-group counts, a written binding sharing bytes with another, an offset plus size past 2^64) is an error matching kernel.ErrInvalidDispatch, a binding of a released allocation one matching runtime.ErrNotFound, one past the end of its allocation one matching runtime.ErrOutOfRange; the error of a refused batch also matches device.ErrNothingRan, and the batch changes no byte, inside its bindings or past them",
			run:  withClient(open, checkDispatchCheckedFirst),
		},
		{
			Name: "device/dispatch-batch-order",
			Rule: "Dispatch runs a batch's ops in order, each one's writes visible to the next and, once it returns, to every read, of bytes read before it too",
			run:  withClient(open, checkDispatchBatchOrder),
		},
		{
			Name: "device/dispatch-grid",
			Rule: "A dispatch runs the grid it is given, as Vulkan's vkCmdDispatch does: no work group where a dimension is 0, and x·y work groups otherwise, reduce_sum's group y·X+x writing its grid-strided share to out[y·X+x]",
			run:  withClient(open, checkDispatchGrid),
		},
		{
			Name: "device/dispatch-empty",
			Rule: "Every kernel alike: a launch with nothing to compute (n = 0; rows or cols 0; matmul's M or N 0) succeeds on any grid within the limits and writes no byte (reduce_sum writes 0, the sum of no element, to each work group's out), and a grid that runs no work group (a dimension 0) for a launch with work is refused with an error matching kernel.ErrInvalidDispatch, writing no byte",
			run:  withClient(open, checkDispatchEmpty),
		},
		{
			Name: "device/dispatch-cancel",
			Rule: "Dispatch under an ended context returns ctx.Err(), and under a context ended before the call runs no op, writing no byte; an error it marks device.ErrNothingRan leaves every byte as it was; the work a cancelled dispatch left on the device is ordered before later calls, so a write after it is never overwritten by it",
			run:  withClient(open, checkDispatchCancel),
		},
		{
			Name: "device/closed-classified",
			Rule: "After Close, every call of the device and its storage that can fail (Upload, Download, Dispatch, Alloc, and a sparse storage's ReserveVirtual and Bind) fails with an error matching runtime.ErrClosed, on allocations made before Close too, and Alloc whatever memory released before Close it could reuse; the calls that cannot fail do not panic, and a second Close returns nil or an error matching runtime.ErrClosed",
			run:  func(c *checkState) { checkClosedClassified(c, open) },
		},
		{
			Name: "device/largest-binding",
			Rule: "A kernel binding as much as the device says one binding may hold (its storage-buffer range and largest allocation, up to 64 MiB here) writes every word of it, and transfers deep into that allocation move exactly their bytes",
			run:  withClient(open, checkLargestBinding),
		},
		{
			Name: "device/storage-figures",
			Rule: "Allocations counts device allocations as Allocated counts bytes (one more per Alloc, a released one until it is flushed, back where it started once all are flushed); under a memory limit Limit reports it, Allocated never passes it and only an allocation that would pass it is refused",
			run:  func(c *checkState) { checkStorageFigures(c, open) },
		},
	}
}

// rawAlloc makes an allocation of the device's storage for a check that
// drives the device itself; it is released when the check ends.
func rawAlloc(c *checkState, s device.Storage, size uint64) vkruntime.StorageHandle {
	h, err := s.Alloc(size)
	if err != nil {
		c.Fatalf("the device's storage: Alloc(%d): %v", size, err)
	}
	c.Cleanup(func() { s.Dealloc(h.ID); s.Flush() })
	return vkruntime.StorageHandle{ID: h.ID, Offset: h.Offset, Size: size}
}

// deviceBytes reads a whole allocation back through the device.
func deviceBytes(c *checkState, d device.Device, h vkruntime.StorageHandle) ([]byte, bool) {
	got := make([]byte, h.Size)
	if err := d.Download(context.Background(), h, got); err != nil {
		c.Errorf("reading %v back: %v", h, err)
		return nil, false
	}
	return got, true
}

func expectBytes(c *checkState, d device.Device, h vkruntime.StorageHandle, want []byte, what string) {
	if got, ok := deviceBytes(c, d, h); ok {
		compareBytes(c, want, got, what)
	}
}

func sub(h vkruntime.StorageHandle, off, size uint64) vkruntime.StorageHandle {
	return vkruntime.StorageHandle{ID: h.ID, Offset: h.Offset + off, Size: size}
}

func checkPartialTransfers(c *checkState, cl *client.Client) {
	d, ctx := cl.Device(), c.Context()
	const size = 4096
	h := rawAlloc(c, d.Storage(), size)
	mirror := pattern(1700, size)
	if err := d.Upload(ctx, h, mirror); err != nil {
		c.Fatalf("Upload(%v): %v", h, err)
	}
	for i, r := range []struct{ off, size, n uint64 }{{100, 300, 77}, {5, 1000, 1}, {4000, 96, 95}, {0, size, size - 1}, {2049, 13, 0}} {
		rng := sub(h, r.off, r.size)
		data := pattern(uint64(1710+i), r.n)
		if err := d.Upload(ctx, rng, data); err != nil {
			c.Errorf("Upload of %d B into %v: %v", r.n, rng, err)
			continue
		}
		copy(mirror[r.off:], data)
		got := make([]byte, r.n)
		if err := d.Download(ctx, rng, got); err != nil {
			c.Errorf("Download of %d B from %v: %v", r.n, rng, err)
			continue
		}
		compareBytes(c, data, got, fmt.Sprintf("the first %d B of %v read back", r.n, rng))
	}
	expectBytes(c, d, h, mirror, "the allocation after uploads of fewer bytes than their ranges")
	for _, r := range []struct{ off, n uint64 }{{10, 20}, {1000, 1}, {2048, 0}} {
		rng := sub(h, r.off, r.n)
		switch err := d.Upload(ctx, rng, pattern(1720, r.n+1)); {
		case err == nil:
			c.Errorf("an Upload of %d B into %v, a range of %d B, succeeded", r.n+1, rng, r.n)
		case !errors.Is(err, vkruntime.ErrOutOfRange):
			c.Errorf("an Upload of %d B into %v, a range of %d B: %v (%T), which does not match runtime.ErrOutOfRange", r.n+1, rng, r.n, err, err)
		}
		switch err := d.Download(ctx, rng, make([]byte, r.n+1)); {
		case err == nil:
			c.Errorf("a Download of %d B from %v, a range of %d B, succeeded", r.n+1, rng, r.n)
		case !errors.Is(err, vkruntime.ErrOutOfRange):
			c.Errorf("a Download of %d B from %v, a range of %d B: %v (%T), which does not match runtime.ErrOutOfRange", r.n+1, rng, r.n, err, err)
		}
	}
	expectBytes(c, d, h, mirror, "the allocation after refused uploads of more bytes than their ranges")
}

// largestBindingCap bounds the binding checkLargestBinding makes: a
// device's storage-buffer range may be gigabytes.
const largestBindingCap = 64 << 20

// checkLargestBinding fills the largest binding the device claims (up to
// largestBindingCap) and reads every word back, then writes and reads odd
// ranges deep into it: a device that honours less than its limits say, or
// moves bytes wrongly past the first few megabytes, passed every other
// check, whose bindings are small.
func checkLargestBinding(c *checkState, cl *client.Client) {
	d, ctx := cl.Device(), c.Context()
	size := uint64(largestBindingCap)
	if r := d.Limits().MaxStorageBufferRange; r != 0 {
		size = min(size, r)
	}
	size = upToLargestPage(cl.Properties(), size) &^ 3
	h := rawAlloc(c, d.Storage(), size)
	const value = 0x5eed1234
	fill := kernel.FillWords(uint32(size/4), value)
	if err := d.Dispatch(ctx, []kernel.Op{fill.With(h)}); err != nil {
		c.Fatalf("a fill of %d B, one binding: %v", size, err)
	}
	expectBytes(c, d, h, bytes.Repeat(binary.LittleEndian.AppendUint32(nil, value), int(size/4)), fmt.Sprintf("a fill of %d B in one binding", size))
	if size < 1<<20 {
		return // the transfer checks reach as deep into a small binding
	}
	for i, r := range []struct{ off, n uint64 }{{size - 4099, 4099}, {size/2 + 1, 1000}, {size - 1, 1}, {size * 3 / 4, 65536}} {
		rng := sub(h, r.off, r.n)
		data := pattern(uint64(1800+i), r.n)[:r.n]
		if err := d.Upload(ctx, rng, data); err != nil {
			c.Errorf("Upload of %d B at byte %d of %d: %v", r.n, r.off, size, err)
			continue
		}
		back := make([]byte, r.n)
		if err := d.Download(ctx, rng, back); err != nil {
			c.Errorf("Download of %d B at byte %d of %d: %v", r.n, r.off, size, err)
			continue
		}
		compareBytes(c, data, back, fmt.Sprintf("%d B at byte %d of an allocation of %d B read back", r.n, r.off, size))
	}
}

// bindAlign is the offset alignment bindings need on the device.
func bindAlign(d device.Device) uint64 {
	return max(d.Limits().Alignment, d.Properties().Alignment, 4)
}

func fillOp(h vkruntime.StorageHandle, words, value uint32) kernel.Op {
	return kernel.FillWords(words, value).With(h)
}

func checkDispatchCheckedFirst(c *checkState, cl *client.Client) {
	d, ctx := cl.Device(), c.Context()
	align := bindAlign(d)
	size := 4 * align
	a := rawAlloc(c, d.Storage(), size)
	want := pattern(1800, size)
	if err := d.Upload(ctx, a, want); err != nil {
		c.Fatalf("Upload(%v): %v", a, err)
	}
	gone, err := d.Storage().Alloc(align)
	if err != nil {
		c.Fatalf("Alloc(%d): %v", align, err)
	}
	d.Storage().Dealloc(gone.ID)
	d.Storage().Flush()
	gone.Size = align
	words := uint32(align / 4)
	good := fillOp(sub(a, 0, align), words, 0xA5A5A5A5)
	// A binding of half the bytes the push constants call for, the rest
	// of the allocation right behind it: a device that leaves the check
	// to the driver writes past the binding.
	small := fillOp(sub(a, align, align/2), words, 0x5A5A5A5A)
	// A binding that passes the end of its allocation.
	past := fillOp(sub(a, size-align, 2*align), 2*words, 0x5A5A5A5A)
	// Push constants a word longer than the kernel takes: a device that
	// reads only the words it knows runs a launch its caller got wrong.
	longPush := fillOp(sub(a, 0, align), words, 0x5A5A5A5A)
	longPush.Push = append(append([]byte(nil), longPush.Push...), 0, 0, 0, 0)
	// A copy whose output overlaps its source at another offset: its work
	// groups race, and a device that copies as memmove does hides that.
	overlapping := kernel.CopyWords(2*words).With(sub(a, 0, 2*align), sub(a, align, 2*align))
	// A binding whose offset plus size wraps past 2^64 to a small end.
	wraps := fillOp(vkruntime.StorageHandle{ID: a.ID, Offset: math.MaxUint64 &^ (align - 1), Size: 2 * align}, words, 0x5A5A5A5A)
	type refused struct {
		what string
		ops  []kernel.Op
		is   error
	}
	cases := []refused{
		{"a binding smaller than its push constants call for", []kernel.Op{small}, kernel.ErrInvalidDispatch},
		{"a batch of a valid fill and then an invalid op", []kernel.Op{good, small}, kernel.ErrInvalidDispatch},
		{"a batch of a valid fill and then a fill of a released allocation", []kernel.Op{good, fillOp(gone, words, 1)}, vkruntime.ErrNotFound},
		{"a batch of a valid fill and then a binding past the end of its allocation", []kernel.Op{good, past}, vkruntime.ErrOutOfRange},
		{"a batch of a valid fill and then a fill with push constants 4 B longer than the kernel takes", []kernel.Op{good, longPush}, kernel.ErrInvalidDispatch},
		{"a batch of a valid fill and then a copy whose output overlaps its source at another offset", []kernel.Op{good, overlapping}, kernel.ErrInvalidDispatch},
		{"a batch of a valid fill and then a binding whose offset plus size wraps past 2^64", []kernel.Op{good, wraps}, kernel.ErrInvalidDispatch},
	}
	if most := d.Limits().MaxComputeWorkGroupCount[0]; most < math.MaxUint32 {
		// One work group past the device's count in x: a device that
		// clamps the grid runs a launch Vulkan forbids.
		tooMany := fillOp(sub(a, 0, align), words, 0x5A5A5A5A)
		tooMany.Grid = [3]uint32{most + 1, 1, 1}
		cases = append(cases, refused{fmt.Sprintf("a batch of a valid fill and then a fill on a grid of %d work groups in x, past the device's %d", most+1, most), []kernel.Op{good, tooMany}, kernel.ErrInvalidDispatch})
	}
	for i, x := range cases {
		// Each case starts from the same bytes: one that changed them is
		// reported on its own, not again under every case after it.
		if i > 0 {
			if err := d.Upload(ctx, a, want); err != nil {
				c.Fatalf("Upload(%v): %v", a, err)
			}
		}
		err := d.Dispatch(ctx, x.ops)
		switch {
		case err == nil:
			c.Errorf("%s: dispatched", x.what)
		case !errors.Is(err, x.is):
			c.Errorf("%s: %v (%T), which does not match %v", x.what, err, err, x.is)
		case !errors.Is(err, device.ErrNothingRan):
			// Unmarked, the client takes the batch for one that may have
			// run in part, and never runs it again once what it lacked is
			// cured.
			c.Errorf("%s: %v (%T), which does not match device.ErrNothingRan though the batch was refused before any op ran", x.what, err, err)
		}
		expectBytes(c, d, a, want, fmt.Sprintf("the allocation after %s, which must be refused", x.what))
	}
}

func words32(b []byte) []uint32 {
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

// expectWords reports the words of h that are not value.
func expectWords(c *checkState, d device.Device, h vkruntime.StorageHandle, value uint32, what string) {
	got, ok := deviceBytes(c, d, h)
	if !ok {
		return
	}
	bad, first := 0, -1
	for i, w := range words32(got) {
		if w != value {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		c.Errorf("%s: %d of %d words are not %#x, the first at word %d (%#x)", what, bad, len(got)/4, value, first, words32(got)[first])
	}
}

func checkDispatchBatchOrder(c *checkState, cl *client.Client) {
	d, ctx := cl.Device(), c.Context()
	const n = 1024
	x, y, z := rawAlloc(c, d.Storage(), 4*n), rawAlloc(c, d.Storage(), 4*n), rawAlloc(c, d.Storage(), 4*n)
	batch := []kernel.Op{
		fillOp(x, n, 0x11111111),
		kernel.CopyWords(n).With(x, y),
		fillOp(x, n, 0x22222222),
		kernel.CopyWords(n).With(y, z),
		fillOp(y, n, 0x33333333),
	}
	if err := d.Dispatch(ctx, batch); err != nil {
		c.Fatalf("a batch of fills and copies: %v", err)
	}
	what := "a batch of fill x=1, copy x→y, fill x=2, copy y→z, fill y=3"
	expectWords(c, d, x, 0x22222222, what+": x")
	expectWords(c, d, y, 0x33333333, what+": y")
	expectWords(c, d, z, 0x11111111, what+": z")
	// Read once already, the bytes are read again after a batch writes
	// them: a device whose reads keep what they saw (a stale staging copy,
	// mapped memory never invalidated) read the first batch's bytes, and
	// no check read a buffer twice around a dispatch.
	batch = []kernel.Op{kernel.CopyWords(n).With(z, x), fillOp(z, n, 0x44444444)}
	if err := d.Dispatch(ctx, batch); err != nil {
		c.Fatalf("a second batch of a copy and a fill: %v", err)
	}
	what = "after them, read, then a batch of copy z→x, fill z=4"
	expectWords(c, d, x, 0x11111111, what+": x")
	expectWords(c, d, z, 0x44444444, what+": z")
}

func checkDispatchGrid(c *checkState, cl *client.Client) {
	d, ctx := cl.Device(), c.Context()
	const n = 1024
	x := rawAlloc(c, d.Storage(), 4*n)
	if err := d.Dispatch(ctx, []kernel.Op{fillOp(x, n, 0x0D0D0D0D)}); err != nil {
		c.Fatalf("fill: %v", err)
	}
	// A grid of no work group is valid for a launch of nothing (one with
	// work is refused: device/dispatch-empty). Over a grid that runs work
	// groups, reduce_sum of no element writes each group's sum, 0, to x:
	// over these it writes nothing.
	nothing := rawAlloc(c, d.Storage(), 16)
	for _, grid := range [][3]uint32{{4, 1, 0}, {0, 1, 1}, {4, 0, 1}} {
		op := kernel.ReduceSum(0).With(nothing, x)
		op.Grid = grid
		if err := d.Dispatch(ctx, []kernel.Op{op}); err != nil {
			c.Errorf("reduce_sum of no element over grid %v: %v", grid, err)
			continue
		}
		expectWords(c, d, x, 0x0D0D0D0D, fmt.Sprintf("a reduce_sum of no element over grid %v, which runs no work group", grid))
	}
	// reduce_sum over a two-dimensional grid of 6 work groups, each with
	// elements to sum: out[g] is the share of group g.
	grid := [3]uint32{2, 3, 1}
	const groups, elems = 6, 11*256 + 77
	in := floats(elems, 1900)
	want := make([]float64, groups)
	mag := make([]float64, groups)
	for i, v := range in {
		want[(i/256)%groups] += float64(v)
		mag[(i/256)%groups] += math.Abs(float64(v))
	}
	xs := rawAlloc(c, d.Storage(), 4*elems)
	out := rawAlloc(c, d.Storage(), 4*groups)
	if err := d.Upload(ctx, xs, bytesOf(in)); err != nil {
		c.Fatalf("Upload: %v", err)
	}
	l := kernel.ReduceSum(elems)
	l.Grid = grid
	if err := d.Dispatch(ctx, []kernel.Op{l.With(xs, out)}); err != nil {
		c.Fatalf("reduce_sum over grid %v: %v", grid, err)
	}
	got, ok := deviceBytes(c, d, out)
	if !ok {
		return
	}
	for g, v := range floatsOf(got) {
		if math.Abs(float64(v)-want[g]) > 1e-5*max(mag[g], 1) {
			c.Errorf("reduce_sum of %d floats over grid %v: out[%d] = %g, work group %d's share sums to %g", elems, grid, g, v, g, want[g])
		}
	}
}

// emptyAndBusyLaunches are, for each kernel of the catalogue, a launch with
// nothing to compute and one with work, on bindings of at most 4 KiB.
var emptyAndBusyLaunches = map[string][2]kernel.Launch{
	"fill":       {kernel.FillWords(0, 7), kernel.FillWords(64, 7)},
	"copy":       {kernel.CopyWords(0), kernel.CopyWords(64)},
	"add":        {kernel.Add(0), kernel.Add(64)},
	"mul":        {kernel.Mul(0), kernel.Mul(64)},
	"scale":      {kernel.Scale(0, 2), kernel.Scale(64, 2)},
	"relu":       {kernel.ReLU(0), kernel.ReLU(64)},
	"gelu":       {kernel.GELU(0), kernel.GELU(64)},
	"softmax":    {kernel.Softmax(4, 0), kernel.Softmax(4, 16)},
	"layernorm":  {kernel.LayerNorm(0, 16, 1e-5), kernel.LayerNorm(4, 16, 1e-5)},
	"reduce_sum": {kernel.ReduceSum(0), kernel.ReduceSum(64)},
	"matmul":     {kernel.MatMul(4, 0, 4), kernel.MatMul(4, 4, 0)},
	"transpose":  {kernel.Transpose(0, 16), kernel.Transpose(4, 16)},
}

func checkDispatchEmpty(c *checkState, cl *client.Client) {
	d, ctx := cl.Device(), c.Context()
	const size = 4096
	for i, k := range kernel.All() {
		launches, ok := emptyAndBusyLaunches[k.Name]
		if !ok {
			c.Errorf("kernel %s: the suite has no empty launch of it to check", k.Name)
			continue
		}
		empty, busy := launches[0], launches[1]
		hs := make([]vkruntime.StorageHandle, len(k.Bindings))
		want := make([][]byte, len(hs))
		for j := range hs {
			hs[j] = rawAlloc(c, d.Storage(), size)
			want[j] = pattern(uint64(1900+10*i+j), size)
			if err := d.Upload(ctx, hs[j], want[j]); err != nil {
				c.Fatalf("Upload(%v): %v", hs[j], err)
			}
		}
		for _, grid := range [][3]uint32{empty.Grid, {1, 1, 1}, {3, 2, 1}, {0, 1, 1}} {
			op := empty.With(hs...)
			op.Grid = grid
			if err := d.Dispatch(ctx, []kernel.Op{op}); err != nil {
				c.Errorf("%s of nothing (push constants %x) over grid %v: %v", k.Name, empty.Push, grid, err)
				continue
			}
			if k.Name == "reduce_sum" {
				clear(want[1][:4*grid[0]*grid[1]*min(grid[2], 1)]) // each work group's sum of nothing
			}
		}
		for _, grid := range [][3]uint32{{0, 1, 1}, {2, 0, 1}, {2, 2, 0}} {
			op := busy.With(hs...)
			op.Grid = grid
			switch err := d.Dispatch(ctx, []kernel.Op{op}); {
			case err == nil:
				c.Errorf("%s with work (push constants %x) over grid %v, which runs no work group: dispatched, its output left unwritten", k.Name, busy.Push, grid)
			case !errors.Is(err, kernel.ErrInvalidDispatch):
				c.Errorf("%s with work (push constants %x) over grid %v, which runs no work group: %v (%T), which does not match kernel.ErrInvalidDispatch",
					k.Name, busy.Push, grid, err, err)
			}
		}
		for j, h := range hs {
			expectBytes(c, d, h, want[j], fmt.Sprintf("%s's binding %d (%s) after launches of nothing and refused ones", k.Name, j, k.Bindings[j].Name))
		}
	}
}

// cancelSide is the side of the largest square matrix of floats one
// binding of rangeBytes bytes holds, at least 1.
func cancelSide(rangeBytes uint64) uint32 {
	side := uint32(math.Sqrt(float64(rangeBytes / 4)))
	for side > 1 && uint64(side)*uint64(side)*4 > rangeBytes {
		side--
	}
	return max(side, 1)
}

func checkDispatchCancel(c *checkState, cl *client.Client) {
	d := cl.Device()
	x := rawAlloc(c, d.Storage(), 4096)
	before := pattern(1940, x.Size)
	if err := d.Upload(c.Context(), x, before); err != nil {
		c.Fatalf("Upload(%v): %v", x, err)
	}
	ended, cancel := context.WithCancel(c.Context())
	cancel()
	if err := d.Dispatch(ended, []kernel.Op{fillOp(x, 1024, 7)}); !errors.Is(err, context.Canceled) {
		c.Errorf("a dispatch under a cancelled context: %v, want ctx.Err() (context.Canceled)", err)
	}
	// Read back through the device, so a fill it had started would be
	// ordered before the read: none may have started.
	expectBytes(c, d, x, before, "a buffer that a dispatch under a context cancelled before the call would have filled")
	// A context that ends the moment the device has looked at it once: a
	// device that checks it on entry and never again runs the batch past
	// its end, and returned nil where it must return ctx.Err(). One that
	// never asks Err (watching Done only) never sees it end, and may run
	// the batch to its end.
	look := newEndsAtFirstLook(c.Context())
	lookErr := d.Dispatch(look, []kernel.Op{fillOp(x, 1024, 3), fillOp(x, 1024, 4), fillOp(x, 1024, 5)})
	look.cancel()
	switch {
	case lookErr != nil && !errors.Is(lookErr, context.Canceled):
		c.Errorf("a dispatch whose context ended after the device first looked at it: %v, want ctx.Err() (context.Canceled)", lookErr)
	case lookErr == nil && look.ended():
		c.Errorf("a dispatch whose context ended after the device first looked at it returned nil: it checked the context on entry only, and ran the batch past its end")
	}
	if errors.Is(lookErr, device.ErrNothingRan) {
		expectBytes(c, d, x, before, "a buffer that a dispatch said ran nothing of its batch ("+lookErr.Error()+") would have filled")
	}
	// A product long enough to be cancelled while it runs on a slow
	// device; on a fast one it finishes first, which the rule allows, and
	// the product is tried again eight times larger, so that a cancel that
	// came late (a busy host's timer) still lands while work runs.
	var (
		m         uint32
		out       vkruntime.StorageHandle
		outBefore []byte
		err       error
	)
	for _, m = range []uint32{384, 768} {
		// Each operand is one binding: on a device whose storage-buffer
		// range is less than 4m² B the product is as large as it allows.
		if r := d.Limits().MaxStorageBufferRange; r != 0 {
			m = min(m, cancelSide(r))
		}
		a, b := rawAlloc(c, d.Storage(), 4*uint64(m)*uint64(m)), rawAlloc(c, d.Storage(), 4*uint64(m)*uint64(m))
		out = rawAlloc(c, d.Storage(), 4*uint64(m)*uint64(m))
		// out holds bytes of its own, which a dispatch saying it ran
		// nothing (device.ErrNothingRan) must leave: the client may run
		// such a batch again, and ops that had run would run twice.
		outBefore = pattern(1955, out.Size)
		for i, h := range []vkruntime.StorageHandle{a, b, out} {
			data := outBefore
			if h != out {
				data = bytesOf(floats(m*m, uint64(1950+i)))
			}
			if err := d.Upload(c.Context(), h, data); err != nil {
				c.Fatalf("Upload: %v", err)
			}
		}
		ctx, cancel := context.WithCancel(c.Context())
		stop := time.AfterFunc(5*time.Millisecond, cancel)
		mm := kernel.MatMul(m, m, m)
		err = d.Dispatch(ctx, []kernel.Op{mm.With(a, b, out), mm.With(b, a, out)})
		stop.Stop()
		cancel()
		if err != nil {
			break
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		c.Errorf("a dispatch whose context was cancelled while it ran: %v, want nil or ctx.Err() (context.Canceled)", err)
	}
	if errors.Is(err, device.ErrNothingRan) {
		// Read through the device: what of the product still ran is
		// ordered before the read.
		expectBytes(c, d, out, outBefore, "the output of a product whose cancelled dispatch said it ran nothing of its batch ("+err.Error()+")")
	}
	// Written after the dispatch returned, then a later dispatch waited
	// for: whatever of the product still ran came before the write.
	want := pattern(1960, 4*uint64(m)*uint64(m))
	if err := d.Upload(c.Context(), out, want); err != nil {
		c.Fatalf("Upload after the cancelled dispatch: %v", err)
	}
	if err := d.Dispatch(c.Context(), []kernel.Op{fillOp(x, 1024, 9)}); err != nil {
		c.Fatalf("a dispatch after the cancelled one: %v", err)
	}
	what := "the output of a cancelled product, written after the dispatch returned (" + errString(err) + ")"
	expectBytes(c, d, out, want, what)
}

// endsAtFirstLook is a context that ends just after its first Err, which
// says it has not ended: it ends while the device runs, at the device's
// own pace, with no timer to race a fast device.
type endsAtFirstLook struct {
	context.Context
	cancel context.CancelFunc
	looked atomic.Bool
}

func newEndsAtFirstLook(parent context.Context) *endsAtFirstLook {
	ctx, cancel := context.WithCancel(parent)
	return &endsAtFirstLook{Context: ctx, cancel: cancel}
}

func (c *endsAtFirstLook) Err() error {
	err := c.Context.Err()
	if c.looked.CompareAndSwap(false, true) {
		c.cancel()
	}
	return err
}

// ended says whether the device looked at the context, which then ended.
func (c *endsAtFirstLook) ended() bool { return c.looked.Load() }

func errString(err error) string {
	if err == nil {
		return "it returned nil"
	}
	return "it returned " + err.Error()
}

func checkStorageFigures(c *checkState, open OpenClient) {
	cl := openClient(c, open, DeviceConfig{})
	cl.MemoryCleanup(c.Context())
	s := cl.Device().Storage()
	bytes0, count0 := s.Allocated(), s.Allocations()
	var ids []vkruntime.StorageID
	for i, size := range []uint64{4096, 100, 65536} {
		h, err := s.Alloc(size)
		if err != nil {
			c.Fatalf("Alloc(%d): %v", size, err)
		}
		ids = append(ids, h.ID)
		if n := s.Allocations(); n != count0+i+1 {
			c.Errorf("%d allocations made: Allocations went from %d to %d", i+1, count0, n)
		}
	}
	bytes1, count1 := s.Allocated(), s.Allocations()
	s.Dealloc(ids[0])
	bytes2, count2 := s.Allocated(), s.Allocations()
	switch {
	case bytes2 == bytes1 && count2 != count1:
		c.Errorf("a released allocation not yet flushed: Allocated still counts it (%d B), Allocations went from %d to %d", bytes2, count1, count2)
	case bytes2 < bytes1 && count2 != count1-1:
		c.Errorf("a released allocation not yet flushed: Allocated went from %d B to %d B, Allocations from %d to %d", bytes1, bytes2, count1, count2)
	}
	for _, id := range ids[1:] {
		s.Dealloc(id)
	}
	s.Flush()
	if b, n := s.Allocated(), s.Allocations(); b != bytes0 || n != count0 {
		c.Errorf("every allocation released and flushed: %d B in %d allocations, %d B in %d before", b, n, bytes0, count0)
	}

	limited, err := open(c.Context(), DeviceConfig{MemoryLimit: deviceLimit})
	c.need(err, fmt.Sprintf("opening the device with a memory limit of %d B", deviceLimit))
	c.Cleanup(func() {
		if err := limited.Close(); err != nil {
			c.Errorf("closing the client: %v", err)
		}
	})
	ls := limited.Storage()
	limit := ls.Limit()
	if limit == 0 || limit > deviceLimit {
		c.Errorf("opened with a memory limit of %d B, the storage's Limit is %d B", uint64(deviceLimit), limit)
		if limit == 0 {
			limit = deviceLimit
		}
	}
	quarter := limit / 4 / limited.Properties().Alignment * limited.Properties().Alignment
	ids = ids[:0]
	defer func() {
		for _, id := range ids {
			ls.Dealloc(id)
		}
		ls.Flush()
	}()
	for range 8 {
		held := ls.Allocated()
		h, err := ls.Alloc(quarter)
		if err != nil {
			if held+quarter <= limit {
				c.Errorf("Alloc(%d) with %d B held under a limit of %d B was refused, though it would not pass the limit: %v", quarter, held, limit, err)
			}
			return
		}
		ids = append(ids, h.ID)
		if now := ls.Allocated(); now > limit {
			c.Errorf("Alloc(%d) succeeded and the storage holds %d B, past its limit of %d B", quarter, now, limit)
		}
	}
	c.Errorf("%d allocations of %d B under a limit of %d B all succeeded", len(ids), quarter, limit)
}

// checkClosedClassified closes a device that holds an allocation (and a
// virtual range, on a sparse storage) and calls every method of it and its
// storage with arguments that were valid before Close.
func checkClosedClassified(c *checkState, open OpenClient) {
	cl := openClient(c, open, DeviceConfig{})
	d := cl.Device()
	s := d.Storage()
	align := bindAlign(d)
	h, err := s.Alloc(align)
	if err != nil {
		c.Fatalf("the device's storage: Alloc(%d): %v", align, err)
	}
	h.Size = align
	sparse, _ := s.(vkruntime.SparseStorage)
	var granule uint64
	var virtual vkruntime.StorageHandle
	if sparse != nil {
		granule = sparse.SparseGranule()
	}
	if granule != 0 {
		if virtual, err = sparse.ReserveVirtual(granule); err != nil {
			c.Fatalf("the device's storage: ReserveVirtual(%d): %v", granule, err)
		}
	}
	// A page released and flushed before Close: a storage that keeps such
	// pages for reuse served one after Close, where a fresh storage was
	// refused.
	const released = 64 << 10
	if r, err := s.Alloc(released); err == nil {
		s.Dealloc(r.ID)
		s.Flush()
	}
	// The client closes the device after its own pools: what a program
	// does. The allocations made above are still live.
	if err := cl.Close(); err != nil {
		c.Fatalf("closing the client, and with it the device: %v", err)
	}
	ctx := c.Context()
	closed := func(what string, err error) {
		switch {
		case err == nil:
			c.Errorf("%s after Close succeeded", what)
		case !errors.Is(err, vkruntime.ErrClosed):
			c.Errorf("%s after Close: %v (%T), which does not match runtime.ErrClosed", what, err, err)
		}
	}
	closed(fmt.Sprintf("Upload of %d B into %v", align, h), d.Upload(ctx, h, make([]byte, align)))
	closed(fmt.Sprintf("Download of %d B from %v", align, h), d.Download(ctx, h, make([]byte, align)))
	closed(fmt.Sprintf("Dispatch of a fill of %v", h), d.Dispatch(ctx, []kernel.Op{fillOp(h, uint32(align/4), 1)}))
	_, err = s.Alloc(align)
	closed(fmt.Sprintf("Alloc(%d)", align), err)
	_, err = s.Alloc(released)
	closed(fmt.Sprintf("Alloc(%d), the size of a page released before Close", released), err)
	if granule != 0 {
		_, err = sparse.ReserveVirtual(granule)
		closed(fmt.Sprintf("ReserveVirtual(%d)", granule), err)
		closed(fmt.Sprintf("Bind of an unbinding of a granule of %v", virtual),
			sparse.Bind(virtual.ID, []vkruntime.SparseBind{{Offset: 0, Size: granule}}))
	}
	harmless := func(what string, f func()) {
		defer func() {
			if p := recover(); p != nil {
				c.Errorf("%s after Close panicked: %v", what, p)
			}
		}()
		f()
	}
	harmless("Name", func() { _ = d.Name() })
	harmless("Properties", func() { _ = d.Properties() })
	harmless("Limits", func() { _ = d.Limits() })
	harmless("Storage", func() { _ = d.Storage() })
	harmless("Allocated", func() { _ = s.Allocated() })
	harmless("Allocations", func() { _ = s.Allocations() })
	harmless("Limit", func() { _ = s.Limit() })
	harmless("MaxAllocationSize", func() { _ = s.MaxAllocationSize() })
	harmless(fmt.Sprintf("Dealloc(%d)", h.ID), func() { s.Dealloc(h.ID) })
	if granule != 0 {
		harmless(fmt.Sprintf("ReleaseVirtual(%d)", virtual.ID), func() { sparse.ReleaseVirtual(virtual.ID) })
	}
	harmless("Flush", s.Flush)
	if err := d.Close(); err != nil && !errors.Is(err, vkruntime.ErrClosed) {
		c.Errorf("a second Close: %v (%T), neither nil nor matching runtime.ErrClosed", err, err)
	}
}
