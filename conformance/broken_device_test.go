package conformance_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// brokenDevice is the pure-Go device with one flaw; its storage hands out
// ids of its own, each naming a range of one of the cpu device's pages, so
// the overlapping flaw can place two allocations on the same bytes.
type brokenDevice struct {
	device.Device
	flaw    deviceFlaw
	storage *brokenStorage
	// memoryAccess serialises the wrapped device's transfers and launches:
	// a device handing out overlapping memory lets concurrent streams touch
	// the same bytes, which the suite must report as corruption, not trip
	// the race detector inside the test double.
	memoryAccess sync.Mutex
}

type deviceFlaw int

const (
	notZeroed            deviceFlaw = iota // drops the zero fills that clear new buffers
	overlappingMemory                      // an allocation may take the second half of the one before
	misalignedPools                        // the pools are told 4 B when bindings need 256 B
	genericOOMDevice                       // out of memory reported as a plain error
	leakingDevice                          // released allocations stay held
	corruptsAfterUse                       // past 150 reads, every read flips a byte
	runsPastItsContext                     // runs a batch whose context has ended, then reports it ended
	leaksOnRefusal                         // a refused Alloc keeps a page it took on the way
	alignedOOMSize                         // an out-of-memory error gives the size aligned up, not the size asked
	ignoresGridY                           // the element kernels leave the work of the grid's rows past the first undone
	servesAfterClose                       // keeps released pages for reuse, and serves them after Close
	checksContextOnEntry                   // looks at the context once, on entry, and runs the whole batch
	laxDispatch                            // checks only the bindings: drops extra push constants, clamps the grid, copies overlapping ranges as memmove does
)

func (f deviceFlaw) String() string {
	return [...]string{"not zero-initialised", "overlapping memory", "ignores alignment", "generic out-of-memory error", "leaks", "corrupts a byte after churn", "runs past its context",
		"leaks on a refusal", "out-of-memory size aligned", "ignores the grid's y", "serves after Close", "checks its context on entry only", "lax dispatch checks"}[f]
}

type brokenStorage struct {
	device.Storage
	flaw deviceFlaw

	mu     sync.Mutex
	next   vkruntime.StorageID
	ranges map[vkruntime.StorageID]vkruntime.StorageHandle // our id -> a range of an inner page
	owners map[vkruntime.StorageID]int                     // inner page -> our ids on it
	last   vkruntime.StorageHandle                         // the last range made, for the overlap
	allocs int
	reads  int
	cache  []vkruntime.StorageHandle // servesAfterClose: released inner pages kept for reuse
}

func (s *brokenStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocs++
	var r vkruntime.StorageHandle
	if s.flaw == overlappingMemory && s.last.Size >= 2*size && s.allocs%2 == 0 {
		if _, live := s.owners[s.last.ID]; live {
			r = vkruntime.StorageHandle{ID: s.last.ID, Offset: s.last.Offset + s.last.Size/2, Size: size}
		}
	}
	if s.flaw == servesAfterClose {
		for i, c := range s.cache {
			if c.Size >= size {
				r = vkruntime.StorageHandle{ID: c.ID, Size: size}
				s.cache = append(s.cache[:i], s.cache[i+1:]...)
				break
			}
		}
	}
	if r.ID == 0 {
		h, err := s.Storage.Alloc(size)
		if err != nil {
			var oom *vkruntime.OutOfMemoryError
			switch {
			case s.flaw == genericOOMDevice:
				return vkruntime.StorageHandle{}, errors.New("broken device: allocation failed")
			case s.flaw == leaksOnRefusal:
				_, _ = s.Storage.Alloc(256) // a staging page, never given back
			case s.flaw == alignedOOMSize && errors.As(err, &oom):
				aligned := *oom
				aligned.Size = (oom.Size + 255) &^ 255
				return vkruntime.StorageHandle{}, &aligned
			}
			return vkruntime.StorageHandle{}, err
		}
		r = h
	}
	s.next++
	s.ranges[s.next] = r
	s.owners[r.ID]++
	s.last = r
	return vkruntime.StorageHandle{ID: s.next, Size: size}, nil
}

func (s *brokenStorage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.ranges[id]
	if !ok {
		return
	}
	delete(s.ranges, id)
	if s.owners[r.ID]--; s.owners[r.ID] == 0 {
		delete(s.owners, r.ID)
		switch s.flaw {
		case leakingDevice:
		case servesAfterClose:
			if r.Offset == 0 {
				s.cache = append(s.cache, vkruntime.StorageHandle{ID: r.ID, Size: r.Size})
			}
		default:
			s.Storage.Dealloc(r.ID)
		}
	}
}

// inner is h as a range of an inner page; unknown ids stay unknown.
func (s *brokenStorage) inner(h vkruntime.StorageHandle) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.ranges[h.ID]
	if !ok {
		return vkruntime.StorageHandle{}, vkruntime.ErrNotFound
	}
	if h.Offset > r.Size || h.Size > r.Size-h.Offset {
		return vkruntime.StorageHandle{}, fmt.Errorf("broken device: %v lies outside its allocation of %d B: %w", h, r.Size, vkruntime.ErrOutOfRange)
	}
	return vkruntime.StorageHandle{ID: r.ID, Offset: r.Offset + h.Offset, Size: h.Size}, nil
}

func (d *brokenDevice) Storage() device.Storage { return d.storage }

func (d *brokenDevice) Properties() vkruntime.DeviceProperties {
	p := d.Device.Properties()
	if d.flaw == misalignedPools {
		p.Alignment = 4
	}
	return p
}

func (d *brokenDevice) Upload(ctx context.Context, dst vkruntime.StorageHandle, src []byte) error {
	h, err := d.storage.inner(dst)
	if err != nil {
		return err
	}
	d.memoryAccess.Lock()
	defer d.memoryAccess.Unlock()
	return d.Device.Upload(ctx, h, src)
}

func (d *brokenDevice) Download(ctx context.Context, src vkruntime.StorageHandle, dst []byte) error {
	h, err := d.storage.inner(src)
	if err != nil {
		return err
	}
	d.memoryAccess.Lock()
	err = d.Device.Download(ctx, h, dst)
	d.memoryAccess.Unlock()
	if err != nil {
		return err
	}
	d.storage.mu.Lock()
	d.storage.reads++
	churned := d.storage.reads > 150
	d.storage.mu.Unlock()
	if d.flaw == corruptsAfterUse && churned && len(dst) > 0 {
		dst[len(dst)/2] ^= 0x10
	}
	return nil
}

func (d *brokenDevice) Dispatch(ctx context.Context, ops []kernel.Op) error {
	if d.flaw == laxDispatch {
		return d.dispatchLax(ctx, ops)
	}
	// Checked as the device's own handles first, as a device does: the
	// wrapper's look-up below refuses what is past its ranges otherwise.
	for i, op := range ops {
		if err := kernel.Validate(op.Kernel, op.Grid, op.Bindings, op.Push, d.Limits()); err != nil {
			return device.NothingRan(fmt.Errorf("op %d of %d: %w", i, len(ops), err))
		}
	}
	var kept []kernel.Op
	for _, op := range ops {
		if d.flaw == notZeroed && op.Kernel.Name == "fill" && len(op.Push) >= 8 && op.Push[4]|op.Push[5]|op.Push[6]|op.Push[7] == 0 {
			continue
		}
		if err := d.resolveBindings(&op); err != nil {
			return err
		}
		kept = append(kept, op)
	}
	d.memoryAccess.Lock()
	defer d.memoryAccess.Unlock()
	if d.flaw == ignoresGridY {
		for _, op := range kept {
			if err := d.dispatchIgnoringY(ctx, op); err != nil {
				return err
			}
		}
		return nil
	}
	if d.flaw == checksContextOnEntry {
		if err := ctx.Err(); err != nil {
			return err
		}
		return d.Device.Dispatch(context.WithoutCancel(ctx), kept)
	}
	if d.flaw == runsPastItsContext {
		if err := d.Device.Dispatch(context.WithoutCancel(ctx), kept); err != nil {
			return err
		}
		return ctx.Err()
	}
	return d.Device.Dispatch(ctx, kept)
}

// resolveBindings points op's bindings at the inner device's allocations;
// one the wrapper does not hold refuses the batch before any op ran.
func (d *brokenDevice) resolveBindings(op *kernel.Op) error {
	bindings := make([]vkruntime.StorageHandle, len(op.Bindings))
	for i, b := range op.Bindings {
		h, err := d.storage.inner(b)
		if err != nil {
			return device.NothingRan(err)
		}
		bindings[i] = h
	}
	op.Bindings = bindings
	return nil
}

// dispatchLax runs ops as a device that checks all of them first, but
// leniently: push constants past the kernel's are dropped, the grid is
// clamped to the device's limits, and a copy whose output overlaps its
// source is moved as memmove moves it.
func (d *brokenDevice) dispatchLax(ctx context.Context, ops []kernel.Op) error {
	lax := make([]kernel.Op, len(ops))
	for j, op := range ops {
		if size := int(op.Kernel.PushSize()); len(op.Push) > size {
			op.Push = op.Push[:size]
		}
		limits := d.Limits().MaxComputeWorkGroupCount
		for i := range op.Grid {
			op.Grid[i] = min(op.Grid[i], limits[i])
		}
		checked := slices.Clone(op.Bindings)
		if op.Kernel.Name == "copy" && len(checked) == 2 {
			checked[1].ID = 1 << 62 // overlaps are not looked for
		}
		if err := kernel.Validate(op.Kernel, op.Grid, checked, op.Push, d.Limits()); err != nil {
			return device.NothingRan(err)
		}
		if err := d.resolveBindings(&op); err != nil {
			return err
		}
		lax[j] = op
	}
	for _, op := range lax {
		bindings := op.Bindings
		d.memoryAccess.Lock()
		var err error
		if op.Kernel.Name == "copy" && len(bindings) == 2 && bindings[0].ID == bindings[1].ID {
			n := 4 * uint64(binary.LittleEndian.Uint32(op.Push))
			buf := make([]byte, n)
			if err = d.Device.Download(ctx, vkruntime.StorageHandle{ID: bindings[0].ID, Offset: bindings[0].Offset, Size: n}, buf); err == nil {
				err = d.Device.Upload(ctx, vkruntime.StorageHandle{ID: bindings[1].ID, Offset: bindings[1].Offset, Size: n}, buf)
			}
		} else {
			err = d.Device.Dispatch(ctx, []kernel.Op{op})
		}
		d.memoryAccess.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// elementKernels are the kernels of one invocation an element, striding
// over their grid.
var elementKernels = []string{"fill", "copy", "add", "mul", "scale", "relu", "gelu"}

// dispatchIgnoringY runs op as a kernel that took its element index from
// the grid's x alone would: over a grid of several rows, the elements of
// the work groups past the first row are left as they were. The caller
// holds memoryAccess.
func (d *brokenDevice) dispatchIgnoringY(ctx context.Context, op kernel.Op) error {
	rows, cols := op.Grid[1], op.Grid[0]
	if rows <= 1 || !slices.Contains(elementKernels, op.Kernel.Name) {
		return d.Device.Dispatch(ctx, []kernel.Op{op})
	}
	out := op.Bindings[len(op.Bindings)-1]
	before := make([]byte, out.Size)
	if err := d.Device.Download(ctx, out, before); err != nil {
		return err
	}
	if err := d.Device.Dispatch(ctx, []kernel.Op{op}); err != nil {
		return err
	}
	after := make([]byte, out.Size)
	if err := d.Device.Download(ctx, out, after); err != nil {
		return err
	}
	groups := uint64(rows) * uint64(cols)
	for i := uint64(0); i < out.Size/4; i++ {
		if (i/256)%groups >= uint64(cols) {
			copy(after[4*i:4*i+4], before[4*i:4*i+4])
		}
	}
	return d.Device.Upload(ctx, out, after)
}

func brokenOpener(f deviceFlaw) device.Opener {
	return func(ctx context.Context, cfg device.Config) (device.Device, error) {
		d, err := cpu.Open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		s := &brokenStorage{Storage: d.Storage(), flaw: f, ranges: map[vkruntime.StorageID]vkruntime.StorageHandle{}, owners: map[vkruntime.StorageID]int{}}
		return &brokenDevice{Device: d, flaw: f, storage: s}, nil
	}
}

// Each broken device is caught by the checks whose rules it breaks, by the
// runner and through a testing.TB.
func TestBrokenDevicesAreCaught(t *testing.T) {
	for i, tc := range []struct {
		flaw   deviceFlaw
		caught []string
	}{
		{notZeroed, []string{"device/zero-initialised"}},
		{overlappingMemory, []string{"storage/pages-disjoint", "device/churn-integrity"}},
		{misalignedPools, []string{"device/alignment-binds"}},
		{genericOOMDevice, []string{"storage/oom-classified", "device/oom-classified"}},
		{leakingDevice, []string{"storage/size-accounting", "device/cleanup-returns-memory"}},
		{corruptsAfterUse, []string{"storage/churn-integrity", "device/churn-integrity"}},
		{runsPastItsContext, []string{"device/dispatch-cancel"}},
		{leaksOnRefusal, []string{"storage/usable-after-oom"}},
		{alignedOOMSize, []string{"storage/oom-typed"}},
		{ignoresGridY, []string{"kernel/fill", "kernel/copy", "kernel/add", "kernel/mul", "kernel/scale", "kernel/relu", "kernel/gelu"}},
		{servesAfterClose, []string{"device/closed-classified"}},
		{checksContextOnEntry, []string{"device/dispatch-cancel"}},
		{laxDispatch, []string{"device/dispatch-checked-first"}},
	} {
		t.Run(tc.flaw.String(), func(t *testing.T) {
			open := conformance.OnDevice(brokenOpener(tc.flaw))
			rep := conformance.RunDevice(context.Background(), open, conformance.Options{})
			requireCaught(t, rep, tc.caught, i == 0, func(tb testing.TB) { conformance.TestDevice(tb, open) })
		})
	}
}

// A device whose dispatch checks are lax is caught on each launch it
// should have refused, each named once: the bytes it changed are not
// blamed again on the launches after it, which it refused.
func TestLaxDispatchChecksAreEachReported(t *testing.T) {
	open := conformance.OnDevice(brokenOpener(laxDispatch))
	rep := conformance.RunDevice(context.Background(), open, conformance.Options{Run: regexp.MustCompile("^device/dispatch-checked-first$")})
	r, ok := rep.Result("device/dispatch-checked-first")
	require.True(t, ok)
	require.Equal(t, conformance.Fail, r.Status)
	evidence := strings.Join(r.Evidence, "\n")
	for _, what := range []string{"push constants 4 B longer than the kernel takes", "a copy whose output overlaps its source at another offset", "past the device's 65535"} {
		require.Contains(t, evidence, what+": dispatched")
	}
	require.NotContains(t, evidence, "wraps past 2^64", "refused, it changed no byte")
	require.NotContains(t, evidence, "smaller than its push constants call for", "refused, it changed no byte")
	require.Len(t, r.Evidence, 6, "each of the three launches dispatched, and the bytes it changed")
}

// The wrapper itself keeps the contract when it has no flaw to show: what
// the checks catch is the flaw, not the wrapping.
func TestBrokenDeviceWrapperIsSoundWithoutItsFlaw(t *testing.T) {
	const none deviceFlaw = -1
	open := conformance.OnDevice(func(ctx context.Context, cfg device.Config) (device.Device, error) {
		d, err := brokenOpener(none)(ctx, cfg)
		return d, err
	})
	rep := conformance.RunDevice(context.Background(), open, conformance.Options{})
	require.Empty(t, rep.Failed())
}
