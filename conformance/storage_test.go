package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/dryrun/replay"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// heapStorage is a runtime.Storage over host memory that keeps the
// contract: the baseline the broken storages below are made from, each by
// one flaw.
type heapStorage struct {
	limit uint64
	flaw  flaw

	mu       sync.Mutex
	next     vkruntime.StorageID
	pages    map[vkruntime.StorageID]*heapPage
	deferred []*heapPage
	held     uint64
	arena    []byte // the backing of every page, for the flaws that share one
	arenaEnd uint64
	allocs   int
	virtual  map[vkruntime.StorageID][]granuleBinding // per granule of a virtual range
	// virtualBytes is the address space the live virtual ranges share.
	virtualBytes uint64
}

// granuleBinding is the memory behind one granule of a virtual range; a
// nil page is unbound.
type granuleBinding struct {
	page   *heapPage
	offset uint64
}

// heapGranule is the heap storage's sparse binding granularity.
const heapGranule = 64 << 10

type heapPage struct {
	id    vkruntime.StorageID
	base  uint64 // offset in the arena
	bytes []byte
}

// flaw is one way to break the contract.
type flaw int

const (
	noFlaw                    flaw = iota
	overlappingPages               // each page starts 8 B before the previous one ends
	ignoresAlignment               // pages packed in the arena at any byte, the offset in the handle
	genericOOM                     // out of memory reported as a plain error
	leaks                          // released pages are never given back
	corruptsAfterChurn             // past 64 allocations, each one flips a byte of a live page
	sparseMisbinds                 // a sparse bind lands one granule further into the memory than asked
	sparseAppliesOverlaps          // a sparse submission naming a granule twice is applied in order
	sparseSpaceUnshared            // every virtual range gets the whole address space, however many are live
	sparseGenericSpaceError        // a virtual range past the address space is refused with a plain error
	sparseReleaseKeepsRange        // ReleaseVirtual forgets nothing: the range and its bindings stay usable
	sparseUnbindIgnored            // a bind of Memory 0 leaves the granule bound
	sparseBindsAsItChecks          // each bind of a submission applies once checked, before the next is
	allocatesZero                  // Alloc(0) and ReserveVirtual(0) make an allocation and a range of 0 B
	genericZeroSize                // Alloc(0) and ReserveVirtual(0) fail with plain errors
	sparseGenericGranuleError      // a sparse bind not on whole granules is refused with a plain error
)

func (f flaw) String() string {
	return [...]string{"none", "overlapping pages", "ignores alignment", "generic out-of-memory error", "leaks", "corrupts a byte after churn", "binds the wrong granules", "applies overlapping binds",
		"unshared address space", "generic address-space error", "release keeps the range", "ignores unbinds", "binds as it checks",
		"allocates 0 B", "generic zero-size error", "generic granule error"}[f]
}

const heapAlignment = 16

func newHeapStorage(limit uint64, f flaw) *heapStorage {
	s := &heapStorage{limit: limit, flaw: f, pages: map[vkruntime.StorageID]*heapPage{}, virtual: map[vkruntime.StorageID][]granuleBinding{}}
	if f == overlappingPages || f == ignoresAlignment {
		s.arena = make([]byte, 32<<20)
	}
	return s
}

func (s *heapStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if size == 0 && s.flaw != allocatesZero {
		if s.flaw == genericZeroSize {
			return vkruntime.StorageHandle{}, errors.New("heap storage: an allocation of 0 B")
		}
		return vkruntime.StorageHandle{}, fmt.Errorf("heap storage: an allocation of 0 B: %w", vkruntime.ErrZeroSize)
	}
	if s.limit != 0 && (size > s.limit || s.held > s.limit-size) {
		if s.flaw == genericOOM {
			return vkruntime.StorageHandle{}, errors.New("heap storage: allocation failed")
		}
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Limit: s.limit, Usage: s.held}
	}
	s.next++
	p := &heapPage{id: s.next}
	switch s.flaw {
	case overlappingPages, ignoresAlignment:
		base := s.arenaEnd
		if s.flaw == overlappingPages && base >= 8 {
			base -= 8
		}
		if base+size > uint64(len(s.arena)) {
			base = 0 // wrap: the arena is only for the flaws' sake
		}
		p.base, p.bytes = base, s.arena[base:base+size:base+size]
		s.arenaEnd = base + size
		if s.flaw == overlappingPages {
			s.arenaEnd = (s.arenaEnd + heapAlignment - 1) &^ (heapAlignment - 1)
		}
	default:
		p.bytes = make([]byte, size)
	}
	s.pages[p.id] = p
	s.held += size
	s.allocs++
	if s.flaw == corruptsAfterChurn && s.allocs > 64 {
		for _, id := range slices.Sorted(mapsKeys(s.pages)) {
			if q := s.pages[id]; q != p {
				q.bytes[len(q.bytes)/2] ^= 0x40
				break
			}
		}
	}
	h := vkruntime.StorageHandle{ID: p.id, Size: size}
	if s.flaw == ignoresAlignment {
		h.Offset = p.base
	}
	return h, nil
}

func mapsKeys(m map[vkruntime.StorageID]*heapPage) func(func(vkruntime.StorageID) bool) {
	return func(yield func(vkruntime.StorageID) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (s *heapStorage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pages[id]; ok {
		delete(s.pages, id)
		s.deferred = append(s.deferred, p)
	}
}

func (s *heapStorage) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flaw != leaks {
		for _, p := range s.deferred {
			s.held -= uint64(len(p.bytes))
		}
	}
	s.deferred = nil
}

func (s *heapStorage) Allocated() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// span calls f on every stretch of bytes h covers, in order: one for a
// page, one per granule of a virtual range.
func (s *heapStorage) span(h vkruntime.StorageHandle, f func(b []byte, at uint64)) error {
	if p, ok := s.pages[h.ID]; ok {
		size := uint64(len(p.bytes))
		if h.Offset > size || h.Size > size-h.Offset {
			return fmt.Errorf("heap storage: %v lies outside its page of %d B", h, size)
		}
		f(p.bytes[h.Offset:h.Offset+h.Size], 0)
		return nil
	}
	granules, ok := s.virtual[h.ID]
	if !ok {
		return fmt.Errorf("heap storage: %v: %w", h, vkruntime.ErrNotFound)
	}
	size := uint64(len(granules)) * heapGranule
	if h.Offset > size || h.Size > size-h.Offset {
		return fmt.Errorf("heap storage: %v lies outside its virtual range of %d B", h, size)
	}
	for at := uint64(0); at < h.Size; {
		off := h.Offset + at
		g := granules[off/heapGranule]
		if g.page == nil {
			return fmt.Errorf("heap storage: %v: granule %d is not bound", h, off/heapGranule)
		}
		n := min(heapGranule-off%heapGranule, h.Size-at)
		start := g.offset + off%heapGranule
		f(g.page.bytes[start:start+n], at)
		at += n
	}
	return nil
}

func (s *heapStorage) Upload(dst vkruntime.StorageHandle, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.span(dst, func(b []byte, at uint64) { copy(b, data[at:]) })
}

func (s *heapStorage) Download(src vkruntime.StorageHandle, dst []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.span(src, func(b []byte, at uint64) { copy(dst[at:], b) })
}

func (s *heapStorage) SparseGranule() uint64  { return heapGranule }
func (s *heapStorage) MaxVirtualSize() uint64 { return 1 << 30 }

func (s *heapStorage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := s.MaxVirtualSize() - s.virtualBytes
	if s.flaw == sparseSpaceUnshared {
		left = s.MaxVirtualSize()
	}
	if size == 0 && s.flaw != allocatesZero {
		if s.flaw == genericZeroSize {
			return vkruntime.StorageHandle{}, errors.New("heap storage: a virtual range of 0 B")
		}
		return vkruntime.StorageHandle{}, fmt.Errorf("heap storage: a virtual range of 0 B: %w", vkruntime.ErrZeroSize)
	}
	if size > left {
		if s.flaw == sparseGenericSpaceError {
			return vkruntime.StorageHandle{}, errors.New("heap storage: no room for the virtual range")
		}
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Limit: s.MaxVirtualSize(), Usage: s.virtualBytes, Detail: "virtual range"}
	}
	s.virtualBytes += size
	s.next++
	s.virtual[s.next] = make([]granuleBinding, (size+heapGranule-1)/heapGranule)
	return vkruntime.StorageHandle{ID: s.next, Size: size}, nil
}

func (s *heapStorage) ReleaseVirtual(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.virtual[id]; ok && s.flaw != sparseReleaseKeepsRange {
		delete(s.virtual, id)
		s.virtualBytes -= uint64(len(g)) * heapGranule
	}
}

// Bind checks every bind before it applies any.
func (s *heapStorage) Bind(virtual vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	granules, ok := s.virtual[virtual]
	if !ok {
		return fmt.Errorf("heap storage: virtual range %d: %w", virtual, vkruntime.ErrNotFound)
	}
	for i, b := range binds {
		if s.flaw == sparseBindsAsItChecks && i > 0 {
			s.apply(granules, binds[i-1:i])
		}
		if b.Offset%heapGranule != 0 || b.Size%heapGranule != 0 || b.MemoryOffset%heapGranule != 0 {
			if s.flaw == sparseGenericGranuleError {
				return fmt.Errorf("heap storage: bind %+v is not in whole granules of %d B", b, heapGranule)
			}
			return fmt.Errorf("heap storage: bind %+v is not in whole granules of %d B: %w", b, heapGranule, vkruntime.ErrInvalidArgument)
		}
		if b.Offset/heapGranule+b.Size/heapGranule > uint64(len(granules)) {
			return fmt.Errorf("heap storage: bind %+v passes the end of a range of %d granules", b, len(granules))
		}
		if b.Memory == 0 {
			continue
		}
		p, ok := s.pages[b.Memory]
		if !ok || b.MemoryOffset > uint64(len(p.bytes)) || b.Size > uint64(len(p.bytes))-b.MemoryOffset {
			return fmt.Errorf("heap storage: bind %+v of memory not held or too small", b)
		}
	}
	if err := vkruntime.CheckOverlappingBinds(binds); err != nil && s.flaw != sparseAppliesOverlaps {
		return fmt.Errorf("heap storage: %w", err)
	}
	s.apply(granules, binds)
	return nil
}

func (s *heapStorage) apply(granules []granuleBinding, binds []vkruntime.SparseBind) {
	for _, b := range binds {
		if b.Memory == 0 && s.flaw == sparseUnbindIgnored {
			continue
		}
		for i := range b.Size / heapGranule {
			g := granuleBinding{}
			if b.Memory != 0 {
				g = granuleBinding{page: s.pages[b.Memory], offset: b.MemoryOffset + i*heapGranule}
				if s.flaw == sparseMisbinds && g.offset+2*heapGranule <= uint64(len(g.page.bytes)) {
					g.offset += heapGranule
				}
			}
			granules[b.Offset/heapGranule+i] = g
		}
	}
}

// heapTarget is a heap storage as the suite takes it, on the heap's
// device properties.
func heapTarget[S interface {
	vkruntime.Storage
	conformance.Memory
}](s S) conformance.StorageTarget {
	return conformance.StorageTarget{
		Storage:    s,
		Properties: vkruntime.DeviceProperties{Alignment: heapAlignment, MaxPageSize: 4 << 20, MemorySize: 64 << 20},
		Memory:     s,
	}
}

func heapFactory(f flaw) conformance.NewStorage {
	return func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		return heapTarget(newHeapStorage(cfg.MemoryLimit, f)), nil
	}
}

func TestHeapStorageConforms(t *testing.T) {
	conformance.TestStorage(t, heapFactory(noFlaw))
	if testing.Short() {
		return // the count below is the subtests' again
	}
	rep := conformance.RunStorage(context.Background(), heapFactory(noFlaw), conformance.Options{})
	pass, fail, notSupported := rep.Counts()
	require.Equal(t, len(rep.Results)-1, pass, "every check passes on a storage that keeps the contract: %d failed, %d not supported", fail, notSupported)
	r, _ := rep.Result("storage/sparse-unsupported")
	require.Equal(t, conformance.NotSupported, r.Status, "the heap storage has sparse residency")
}

// noSparseHeap is the heap storage on a device without sparse residency:
// a runtime.SparseStorage of granule 0 whose ReserveVirtual refuses every
// range, as unsupported or, with generic, with a plain error.
type noSparseHeap struct {
	*heapStorage
	generic bool
}

func (s noSparseHeap) SparseGranule() uint64  { return 0 }
func (s noSparseHeap) MaxVirtualSize() uint64 { return 0 }

func (s noSparseHeap) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	if s.generic {
		return vkruntime.StorageHandle{}, errors.New("heap storage: no sparse residency")
	}
	return vkruntime.StorageHandle{}, fmt.Errorf("heap storage: no sparse residency: %w", vkruntime.ErrUnsupported)
}

func noSparseHeapFactory(generic bool) conformance.NewStorage {
	return func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		return heapTarget(noSparseHeap{newHeapStorage(cfg.MemoryLimit, noFlaw), generic}), nil
	}
}

// A storage without sparse residency that refuses a virtual range as
// unsupported passes the check, and the sparse-binding checks are not
// supported on it; one refusing it with an error of no kind is caught.
func TestSparseUnsupportedIsClassified(t *testing.T) {
	only := conformance.Options{Run: regexp.MustCompile(`sparse`)}
	rep := conformance.RunStorage(context.Background(), noSparseHeapFactory(false), only)
	for _, r := range rep.Results {
		want := conformance.NotSupported
		if r.Check == "storage/sparse-unsupported" {
			want = conformance.Pass
		}
		require.Equal(t, want, r.Status, "%s: %v", r.Check, r.Evidence)
	}
	rep = conformance.RunStorage(context.Background(), noSparseHeapFactory(true), only)
	require.Equal(t, []string{"storage/sparse-unsupported"}, rep.Failed())
	requireCaught(t, rep, []string{"storage/sparse-unsupported"}, true, func(tb testing.TB) { conformance.TestStorage(tb, noSparseHeapFactory(true)) })
}

// The counting storage of dry-run replays holds no bytes: it passes every
// check it can be put to, and the checks of data say they are not supported.
func TestCountingStorageConforms(t *testing.T) {
	newCounting := func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		s := replay.NewCountingStorage(cfg.MemoryLimit)
		s.Granule = replay.H200Granule
		return conformance.StorageTarget{
			Storage:    s,
			Properties: vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 128 << 20, MemorySize: 1 << 30},
			Held:       func() uint64 { return s.Counts().BytesHeld },
		}, nil
	}
	conformance.TestStorage(t, newCounting)
	rep := conformance.RunStorage(context.Background(), newCounting, conformance.Options{})
	require.Empty(t, rep.Failed())
	for _, name := range []string{"storage/pages-disjoint", "storage/churn-integrity", "storage/transfer-odd-ranges"} {
		r, ok := rep.Result(name)
		require.True(t, ok, name)
		require.Equal(t, conformance.NotSupported, r.Status, "%s on a storage without bytes", name)
		require.Contains(t, r.Reason, "no access to its bytes")
	}
}

// recordingTB is a testing.TB that keeps what the suite reports.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recordingTB) Logf(string, ...any) {}

// requireCaught asserts that the report failed every check of caught, each
// with its rule and evidence, and that the suite run again through a
// testing.TB (viaTB) reports an error naming each of those checks and its
// rule. Under -short only the first of a table runs again.
func requireCaught(t *testing.T, rep conformance.Report, caught []string, first bool, viaTB func(testing.TB)) {
	t.Helper()
	failed := rep.Failed()
	for _, name := range caught {
		require.Contains(t, failed, name, "the rule of %s is broken", name)
		r, _ := rep.Result(name)
		require.NotEmpty(t, r.Rule)
		require.NotEmpty(t, r.Evidence)
		t.Logf("%s: %s: %s", name, r.Rule, r.Evidence[0])
	}
	t.Logf("failed: %v", failed)
	if testing.Short() && !first {
		return
	}
	rec := &recordingTB{TB: t}
	viaTB(rec)
	for _, name := range caught {
		r, _ := rep.Result(name)
		require.True(t, slices.ContainsFunc(rec.errors, func(e string) bool {
			return strings.Contains(e, name+": broke the rule: "+r.Rule)
		}), "no error through the testing.TB names %s and its rule: %q", name, rec.errors)
	}
}

// Each broken storage is caught, by the check whose rule it breaks, both
// by the runner and through a testing.TB.
func TestBrokenStoragesAreCaught(t *testing.T) {
	for i, tc := range []struct {
		flaw   flaw
		caught []string
	}{
		{overlappingPages, []string{"storage/pages-disjoint"}},
		{ignoresAlignment, []string{"storage/alloc-fresh-handle", "storage/alignment"}},
		{genericOOM, []string{"storage/oom-classified", "storage/oom-typed"}},
		{leaks, []string{"storage/size-accounting", "storage/release-returns-memory", "storage/pool-traffic-accounting"}},
		{corruptsAfterChurn, []string{"storage/churn-integrity"}},
		{sparseMisbinds, []string{"storage/sparse-binding"}},
		{sparseAppliesOverlaps, []string{"storage/sparse-binding"}},
		{sparseSpaceUnshared, []string{"storage/sparse-address-space"}},
		{sparseGenericSpaceError, []string{"storage/sparse-address-space"}},
		{sparseReleaseKeepsRange, []string{"storage/sparse-release"}},
		{sparseUnbindIgnored, []string{"storage/sparse-release"}},
		{sparseBindsAsItChecks, []string{"storage/sparse-release"}},
		{allocatesZero, []string{"storage/zero-size-refused"}},
		{genericZeroSize, []string{"storage/zero-size-refused"}},
		{sparseGenericGranuleError, []string{"storage/sparse-binding"}},
	} {
		t.Run(tc.flaw.String(), func(t *testing.T) {
			rep := conformance.RunStorage(context.Background(), heapFactory(tc.flaw), conformance.Options{})
			requireCaught(t, rep, tc.caught, i == 0, func(tb testing.TB) { conformance.TestStorage(tb, heapFactory(tc.flaw)) })
		})
	}
}

// A storage that cannot be limited says so, and the checks that need a
// limit are not supported rather than passed.
func TestLimitChecksNeedALimit(t *testing.T) {
	unlimited := func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		if cfg.MemoryLimit != 0 {
			return conformance.StorageTarget{}, fmt.Errorf("this storage has no memory limit: %w", conformance.ErrNotSupported)
		}
		return heapFactory(noFlaw)(cfg)
	}
	rep := conformance.RunStorage(context.Background(), unlimited, conformance.Options{Run: regexp.MustCompile(`oom|release-returns`)})
	require.Len(t, rep.Results, 4)
	for _, r := range rep.Results {
		require.Equal(t, conformance.NotSupported, r.Status, r.Check)
		require.Contains(t, r.Reason, "no memory limit")
	}
}

// A factory refusing even the zero configuration fails every check that
// asks for it: ErrNotSupported is for a configuration the target cannot
// provide, and a storage or device refusing them all made the run OK, not
// one check passed.
func TestAFactoryRefusingThePlainTargetFails(t *testing.T) {
	refuse := func(conformance.StorageConfig) (conformance.StorageTarget, error) {
		return conformance.StorageTarget{}, fmt.Errorf("no storage here: %w", conformance.ErrNotSupported)
	}
	refuseDevice := func(context.Context, conformance.DeviceConfig) (*client.Client, error) {
		return nil, fmt.Errorf("no device here: %w", conformance.ErrNotSupported)
	}
	for _, rep := range []conformance.Report{
		conformance.RunStorage(context.Background(), refuse, conformance.Options{}),
		conformance.RunDevice(context.Background(), refuseDevice, conformance.Options{}),
	} {
		pass, fail, ns := rep.Counts()
		t.Logf("%s: %d passed, %d failed, %d not supported", rep.Suite, pass, fail, ns)
		require.False(t, rep.OK(), rep.Suite)
		require.NotZero(t, fail, rep.Suite)
		for _, r := range rep.Results {
			t.Logf("%s: %s %s", r.Check, r.Status, r.Reason)
			switch {
			case r.Check == "kernel/catalogue-covered":
				continue // opens no device
			case r.Status == conformance.NotSupported:
				require.Regexp(t, "with (a memory limit|a wrapper|client options)|limited to", r.Reason, "%s: only a configuration past the plain one may be not supported", r.Check)
				continue
			}
			require.Equal(t, conformance.Fail, r.Status, r.Check)
			require.Contains(t, r.Evidence[0], "with no options (ErrNotSupported is for a configuration it cannot provide)", r.Check)
		}
	}
}
