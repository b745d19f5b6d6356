package memory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/gzread"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

func TestInvalidLayouts(t *testing.T) {
	for _, c := range []struct {
		name   string
		layout Layout
		reason string
	}{
		{"empty list", SlicedLayout(), "the pool list is empty"},
		{"zero page", SlicedLayout(SlicedPool{PageSize: 0}), "pool 0: page_size is 0"},
		{"zero slice", SlicedLayout(SlicedPool{PageSize: 4096, MaxSlice: u64(0)}), "pool 0: max_slice is 0"},
		{"exclusive with slices", SlicedLayout(SlicedPool{PageSize: 4096}, SlicedPool{PageSize: 8192, MaxSlice: u64(4096), Exclusive: true}),
			"pool 1: an exclusive pool gives each reservation a page of its own; max_slice must be null"},
		{"slice past page", SlicedLayout(SlicedPool{PageSize: 4096}, SlicedPool{PageSize: 4096, MaxSlice: u64(4097)}),
			"pool 1: max_slice of 4097 B is larger than its page of 4096 B"},
		{"slice past rounded page", SlicedLayout(SlicedPool{PageSize: 100, MaxSlice: u64(113)}),
			"pool 0: max_slice of 113 B is larger than its page of 112 B"},
		{"zero pages", SlicedLayout(SlicedPool{PageSize: 4096, Pages: u64(0)}), "pool 0: pages 0 is outside 1..=65535"},
		{"too many pages", SlicedLayout(SlicedPool{PageSize: 4096, Pages: u64(65536)}), "pool 0: pages 65536 is outside 1..=65535"},
		{"page overflows", SlicedLayout(SlicedPool{PageSize: ^uint64(0)}), "overflows when rounded up"},
		{"arena without pages", ArenaLayout(ArenaPlan{}), "the arena has no pages"},
		{"arena with too many pages", ArenaLayout(ArenaPlan{Pages: make([]uint64, 65536)}), "the arena has 65536 pages, more than 65535"},
		{"arena zero page", ArenaLayout(ArenaPlan{Pages: []uint64{64, 0}}), "arena page 1 has size 0"},
		{"arena zero slot", ArenaLayout(ArenaPlan{Pages: []uint64{64}, Slots: []ArenaSlot{{Size: 0}}}), "arena slot 0 has size 0"},
		{"arena slot page", ArenaLayout(ArenaPlan{Pages: []uint64{64}, Slots: []ArenaSlot{{Size: 16}, {Size: 16, Page: 1}}}),
			"arena slot 1 names page 1, but the arena has 1 page"},
		{"arena slot past page", ArenaLayout(ArenaPlan{Pages: []uint64{64}, Slots: []ArenaSlot{{Size: 32, Offset: 48}}}),
			"arena slot 0: 32 B at offset 48 passes the end of page 0 (64 B)"},
		{"arena rounded slot past page", ArenaLayout(ArenaPlan{Pages: []uint64{100}, Slots: []ArenaSlot{{Size: 100, Offset: 16}}}),
			"arena slot 0: 100 B at offset 16 passes the end of page 0 (112 B)"},
		{"arena misaligned offset", ArenaLayout(ArenaPlan{Pages: []uint64{64}, Slots: []ArenaSlot{{Size: 16, Offset: 8}}}),
			"arena slot 0: offset 8 is not a multiple of the alignment of 16 B"},
		{"virtual profile falling", VirtualLayout(VirtualPlan{PlannedBytes: 64, Profile: []VirtualMark{{0, 64}, {1, 32}}}),
			"virtual profile mark 1: ordinals must rise and bytes not fall"},
		{"virtual profile ordinals repeated", VirtualLayout(VirtualPlan{PlannedBytes: 64, Profile: []VirtualMark{{3, 32}, {3, 64}}}),
			"virtual profile mark 1: ordinals must rise and bytes not fall"},
		{"virtual settled past the slots", VirtualLayout(VirtualPlan{PlannedBytes: 64, Slots: []VirtualSlot{{64, 0}}, Settled: VirtualMark{1, 64}}),
			"virtual settled start: reservation 1 is past the plan's 1 slot"},
		{"arena bad fallback", ArenaLayout(ArenaPlan{Pages: []uint64{64}, Fallback: []SlicedPool{{PageSize: 64, Pages: u64(0)}}}),
			"arena fallback pool 0: pages 0 is outside 1..=65535"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.layout.Validate(testProps)
			var ie *InstallError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, InvalidLayout, ie.Kind)
			require.Contains(t, ie.Reason, c.reason)
			require.False(t, ie.Transient())
			require.Contains(t, err.Error(), "the pool layout cannot be honoured: ")

			_, err = NewManager(newFakeStorage(), testProps, c.layout)
			require.ErrorIs(t, err, &InstallError{Kind: InvalidLayout})

			// Install refuses it and leaves the manager exactly as it was:
			// no cleanup, no rebuild, the same pools and reservations.
			m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4096}))
			h := mustReserve(t, m, 100, Eager)
			spare := mustReserve(t, m, 4000, Eager)
			require.NoError(t, m.Free(spare))
			before, deallocs := m.Report(), s.deallocs
			require.ErrorIs(t, m.Install(c.layout), &InstallError{Kind: InvalidLayout})
			require.Equal(t, before, m.Report())
			require.Equal(t, deallocs, s.deallocs)
			_, err = m.Resolve(h)
			require.NoError(t, err)
		})
	}
}

func TestValidLayoutEdges(t *testing.T) {
	for _, l := range []Layout{
		SlicedLayout(SlicedPool{PageSize: 4096, Pages: u64(1)}),
		SlicedLayout(SlicedPool{PageSize: 4096, Pages: u64(65535), MaxSlice: u64(4096)}),
		SlicedLayout(SlicedPool{PageSize: 100, MaxSlice: u64(112)}), // both round to 112
		ArenaLayout(ArenaPlan{Pages: []uint64{100}, Slots: []ArenaSlot{{Size: 100, Offset: 0}, {Size: 1, Offset: 96}}}),
		ArenaLayout(ArenaPlan{Pages: make65535Pages(), Slots: []ArenaSlot{{Size: 16, Page: 65534}}}),
	} {
		require.NoError(t, l.Validate(testProps), "%s", l)
	}
}

func make65535Pages() []uint64 {
	p := make([]uint64, 65535)
	for i := range p {
		p[i] = 16
	}
	return p
}

func TestLayoutSizesRoundUpToAlignment(t *testing.T) {
	m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1000, MaxSlice: u64(100), Pages: u64(2)}))
	kind := m.Report().Dynamic[0].Kind.(SlicedKind)
	require.Equal(t, uint64(1008), kind.PageSize)
	require.Equal(t, uint64(112), kind.MaxSliceSize)
	require.Equal(t, uint64(2016), *kind.MaxPoolSize)
}

func TestBackendWithoutThePageShapeRefusesTheLayout(t *testing.T) {
	s := limitedStorage{newFakeStorage()}
	s.limit = 1 << 20
	_, err := NewManager(s, testProps, SlicedLayout(SlicedPool{PageSize: 2 << 20}))
	require.ErrorIs(t, err, &InstallError{Kind: InvalidLayout})
	require.ErrorContains(t, err, "a page of 2097152 B is larger than the backend's largest allocation of 1048576 B")

	// The presets fit themselves to the backend instead.
	m, err := NewManager(s, testProps, SubSlicesLayout())
	require.NoError(t, err)
	for _, p := range m.Report().Dynamic {
		if k, ok := p.Kind.(SlicedKind); ok {
			require.LessOrEqual(t, k.PageSize, s.limit)
		}
	}
	_, err = m.Reserve(s.limit+1, Eager)
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)

	// Check refuses it as Install would, and changes nothing; a layout
	// the backend has is checked clean.
	before := m.Report()
	tooLarge := SlicedLayout(SlicedPool{PageSize: 2 << 20})
	require.NoError(t, tooLarge.Validate(testProps), "Validate cannot know the backend")
	err = m.Check(tooLarge)
	require.ErrorIs(t, err, &InstallError{Kind: InvalidLayout})
	require.Equal(t, m.Install(tooLarge).Error(), err.Error())
	require.Equal(t, before, m.Report())
	require.NoError(t, m.Check(SlicedLayout(SlicedPool{PageSize: 1 << 20})))
	require.Equal(t, before, m.Report())
}

func TestHeapSmallerThanAPageShrinksThePage(t *testing.T) {
	props := testProps
	props.MemorySize = 64 << 10
	m, err := NewManager(newFakeStorage(), props, SlicedLayout(SlicedPool{PageSize: 1 << 20, Pages: u64(2)}))
	require.NoError(t, err)
	kind := m.Report().Dynamic[0].Kind.(SlicedKind)
	require.Equal(t, uint64(64<<10), kind.PageSize)
	require.Equal(t, uint64(64<<10), kind.MaxSliceSize)
	require.Equal(t, uint64(128<<10), *kind.MaxPoolSize)
	h := mustReserve(t, m, 64<<10, Eager)
	require.Equal(t, uint64(64<<10), locate(t, m, h).size)
}

// On a device whose largest allocation is its memory (the cpu device of a
// small memory), a page past the memory shrinks to it, and an arena page
// past it sends its slots to the fallback pools, as on any device: they
// were refused as past the largest allocation, checked first.
func TestAPagePastASmallDeviceShrinksBeforeTheBackendsLimit(t *testing.T) {
	props := testProps
	props.MemorySize = 4 << 20
	s := limitedStorage{newFakeStorage()}
	s.limit = 4 << 20
	m, err := NewManager(s, props, SlicedLayout(SlicedPool{PageSize: 8 << 20}))
	require.NoError(t, err)
	require.Equal(t, uint64(4<<20), m.Report().Dynamic[0].Kind.(SlicedKind).PageSize)
	h := mustReserve(t, m, 3<<20, Eager)
	require.NoError(t, m.Free(h))

	arena := ArenaLayout(ArenaPlan{Pages: []uint64{1 << 20, 8 << 20}, Slots: []ArenaSlot{{Size: 1 << 20, Page: 1}}})
	require.NoError(t, m.Install(arena))
	h = mustReserve(t, m, 1<<20, Eager)
	require.Equal(t, uint64(1), m.Spills(), "the slot of the page past the memory went to the fallback pools")
	require.NoError(t, m.Free(h))

	// A page within the memory still has to fit the largest allocation.
	props.MemorySize = 16 << 20
	_, err = NewManager(s, props, SlicedLayout(SlicedPool{PageSize: 8 << 20}))
	require.ErrorIs(t, err, &InstallError{Kind: InvalidLayout})
	require.ErrorContains(t, err, "a page of 8388608 B is larger than the backend's largest allocation of 4194304 B")
	// An arena page past the largest allocation is never asked of the
	// device either, within the memory or past it: its slots go to the
	// fallback pools, and the manager says why.
	var logged bytes.Buffer
	m, err = NewManager(s, props, ArenaLayout(ArenaPlan{Pages: []uint64{8 << 20}, Slots: []ArenaSlot{{Size: 1 << 20}}}),
		WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	require.NoError(t, err)
	require.Contains(t, logged.String(), "arena page 0: 8388608 B is larger than the backend's largest allocation of 4194304 B; its slots go to the fallback pools")
	h = mustReserve(t, m, 1<<20, Eager)
	require.Equal(t, uint64(1), m.Spills())
	require.NoError(t, m.Free(h))
}

func TestSubSlicesPreset(t *testing.T) {
	props := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 128 << 20}
	m, err := NewManager(newFakeStorage(), props, SubSlicesLayout())
	require.NoError(t, err)
	r := m.Report()
	// A ladder growing ×4 from 2 MiB to MaxPageSize, each pool serving up
	// to a quarter of its page, then one exclusive pool.
	pagesOf := func(r Report) []uint64 {
		var pages []uint64
		for _, p := range r.Dynamic[:len(r.Dynamic)-1] {
			k := p.Kind.(SlicedKind)
			require.Nil(t, k.MaxPoolSize)
			require.Equal(t, k.PageSize/4, k.MaxSliceSize)
			pages = append(pages, k.PageSize)
		}
		return pages
	}
	require.Equal(t, []uint64{2 << 20, 8 << 20, 32 << 20, 128 << 20}, pagesOf(r))
	_, ok := r.Dynamic[len(r.Dynamic)-1].Kind.(ExclusiveKind)
	require.True(t, ok)

	// Pages stop at 256 MiB however large the device allows.
	props.MaxPageSize = 4 << 30
	m, err = NewManager(newFakeStorage(), props, SubSlicesLayout())
	require.NoError(t, err)
	require.Equal(t, []uint64{2 << 20, 8 << 20, 32 << 20, 128 << 20, 256 << 20}, pagesOf(m.Report()))

	// Small devices get a single page size.
	small := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 4096}
	m, err = NewManager(newFakeStorage(), small, SubSlicesLayout())
	require.NoError(t, err)
	require.Len(t, m.Report().Dynamic, 2)
	require.Equal(t, SlicedKind{PageSize: 4096, MaxSliceSize: 1024}, m.Report().Dynamic[0].Kind)
}

func TestExclusivePagesPreset(t *testing.T) {
	props := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 1 << 20, MemorySize: 1 << 30}
	m, err := NewManager(newFakeStorage(), props, ExclusivePagesLayout())
	require.NoError(t, err)
	var buckets []uint64
	for _, p := range m.Report().Dynamic {
		buckets = append(buckets, p.Kind.(ExclusiveKind).MaxAllocSize)
	}
	require.Equal(t, []uint64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 30}, buckets)
	_, err = m.Reserve(1<<30+1, Eager)
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
}

// The routing table must name exactly the pools that accept a size, in
// layout order, at and around every pool's bounds.
func TestRoutesAgreeWithThePools(t *testing.T) {
	var many []SlicedPool
	for i := range 120 {
		many = append(many, SlicedPool{PageSize: uint64(i+1) * 4096, MaxSlice: u64(uint64(i+1) * 512)})
	}
	for _, l := range []Layout{SubSlicesLayout(), ExclusivePagesLayout(), DirectLayout(), arenaTestLayout(), SlicedLayout(many...),
		SlicedLayout(SlicedPool{PageSize: 1024, MaxSlice: u64(128)}, SlicedPool{PageSize: 4096, Pages: u64(2)}, SlicedPool{PageSize: 1 << 20, MaxSlice: u64(1024)})} {
		m, _ := newTestManager(t, l)
		var sizes []uint64
		for _, c := range m.routes {
			for _, d := range []uint64{0, 16, 32} {
				sizes = append(sizes, c.upTo-d, c.upTo+d)
			}
		}
		for _, size := range sizes {
			if size == 0 || size%16 != 0 {
				continue
			}
			var want []int16
			for i, p := range m.pools {
				if p.accepts(size) {
					want = append(want, int16(i))
				}
			}
			require.Equal(t, want, m.routeOf(size).pools, "%s: size %d", l, size)
		}
	}
}

// Arena pages that add up past 64 bits are refused: laid end to end for the
// placement's bookkeeping, they would wrap onto each other.
func TestArenaPagesThatAddUpPast64BitsAreRefused(t *testing.T) {
	huge := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 1 << 63}
	l := ArenaLayout(ArenaPlan{Pages: []uint64{1 << 63, 1 << 63}, Slots: []ArenaSlot{{Size: 16}, {Size: 16, Page: 1}}})
	var ie *InstallError
	require.ErrorAs(t, l.Validate(huge), &ie)
	require.Equal(t, InvalidLayout, ie.Kind)
	require.ErrorContains(t, ie, "the arena's pages, with a byte between each two, add up to more than 18446744073709551615 B")
	fits := ArenaLayout(ArenaPlan{Pages: []uint64{1 << 62, 1 << 62}, Slots: []ArenaSlot{{Size: 16}, {Size: 16, Page: 1}}})
	require.NoError(t, fits.Validate(huge))

	// 2^64 − 16 B in 17 pages fit end to end, but not a byte apart, as
	// the rooms of a run that left the plan lay them: an extra was lent
	// room on the wrong page.
	pages := []uint64{1 << 63, 1<<63 - 256}
	for range 15 {
		pages = append(pages, 16)
	}
	apart := ArenaLayout(ArenaPlan{Pages: pages, Slots: []ArenaSlot{{Size: 16, Page: 16}}})
	require.ErrorAs(t, apart.Validate(huge), &ie)
	require.Equal(t, InvalidLayout, ie.Kind)
}

// A count of one is one page, or one slot: "the arena has 1 pages" read
// as a slip.
func TestInvalidLayoutCountsInWords(t *testing.T) {
	for _, c := range []struct {
		layout Layout
		reason string
	}{
		{ArenaLayout(ArenaPlan{Pages: []uint64{64}, Slots: []ArenaSlot{{Size: 16, Page: 1}}}),
			"arena slot 0 names page 1, but the arena has 1 page"},
		{ArenaLayout(ArenaPlan{Pages: []uint64{64, 64}, Slots: []ArenaSlot{{Size: 16, Page: 2}}}),
			"arena slot 0 names page 2, but the arena has 2 pages"},
		{VirtualLayout(VirtualPlan{PlannedBytes: 64, Slots: []VirtualSlot{{64, 0}}, Settled: VirtualMark{1, 64}}),
			"virtual settled start: reservation 1 is past the plan's 1 slot"},
		{VirtualLayout(VirtualPlan{PlannedBytes: 64, Slots: []VirtualSlot{{64, 0}, {64, 64}}, Settled: VirtualMark{2, 64}}),
			"virtual settled start: reservation 2 is past the plan's 2 slots"},
	} {
		var ie *InstallError
		require.ErrorAs(t, c.layout.Validate(testProps), &ie)
		require.Equal(t, c.reason, ie.Reason)
	}
}

// A layout that cannot be read is an InvalidLayout, as one that cannot be
// honoured is, from every reader: its errors matched no kind, so a caller
// could not classify a malformed layout at all. A file that cannot be
// opened or read is no layout's fault and keeps its own error.
func TestUnreadableLayoutsAreInvalidLayouts(t *testing.T) {
	invalid := &InstallError{Kind: InvalidLayout}
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return path
	}
	var errs []error
	for _, text := range []string{"nonsense", `{"Sliced":`, `{"Nope":null}`, `{"Sliced":[{"page_size":-1}]}`, "\ufeffdirect", `"SubSlices" x`} {
		_, err := ParseLayout(text)
		errs = append(errs, err)
		if json.Valid([]byte(text)) {
			// encoding/json refuses other text itself, with its own error.
			var l Layout
			errs = append(errs, json.Unmarshal([]byte(text), &l))
		}
	}
	for _, data := range [][]byte{[]byte("   "), []byte(`{"Direct":1}`), []byte("\ufeff\"Direct\""), bytes.Repeat([]byte("x"), 100),
		gzread.Pack([]byte(`{"Sliced":[]`)), append(gzread.Pack([]byte("direct")), "junk"[:]...), gzread.Pack([]byte("direct"))[:10]} {
		_, err := ReadLayoutFile(write("layout", data))
		errs = append(errs, err)
	}
	for _, err := range errs {
		require.Error(t, err)
		require.ErrorIs(t, err, invalid, "%v", err)
		require.NotErrorIs(t, err, &InstallError{Kind: PoolsInUse})
		var ie *InstallError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, InvalidLayout, ie.Kind)
		require.NotEmpty(t, ie.Reason)
		require.NotContains(t, err.Error(), "cannot be honoured", "the message is the reader's")
	}

	_, err := ReadLayoutFile(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NotErrorIs(t, err, invalid)
	_, err = ReadLayout(iotest.ErrReader(errors.New("disk on fire")), "broken")
	require.ErrorContains(t, err, "disk on fire")
	require.NotErrorIs(t, err, invalid)

	l, err := ReadLayoutFile(write("good", []byte(" exclusive-pages\n")))
	require.NoError(t, err)
	require.Equal(t, ExclusivePagesLayout(), l)
}

// failingReader reads data, then fails with err: a disk failing mid-stream.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// A gzipped layout whose reader fails mid-stream could not be read: it was
// an InvalidLayout, the gzip reader's "cannot be read" with the reader's
// error in words alone, as if the layout were corrupt. It keeps the
// reader's error now, wherever in the stream it came, while corrupt gzip
// data stays InvalidLayout.
func TestAReadFailureInAGzippedLayoutIsNoInvalidLayout(t *testing.T) {
	var pools []string
	for i := range 200 {
		pools = append(pools, fmt.Sprintf(`{"page_size":%d}`, 4096*(i+1)))
	}
	packed := gzread.Pack([]byte(`{"Sliced":[` + strings.Join(pools, ",") + `]}`))
	require.Greater(t, len(packed), 600)
	broken := &fs.PathError{Op: "read", Path: "layout.gz", Err: errors.New("input/output error")}
	for _, at := range []int{5, 20, 100, len(packed) / 2, len(packed) - 4} {
		_, err := ReadLayout(&failingReader{data: bytes.Clone(packed[:at]), err: broken}, "layout.gz")
		require.ErrorIs(t, err, broken, "at %d", at)
		var pe *fs.PathError
		require.ErrorAs(t, err, &pe, "at %d", at)
		require.NotErrorIs(t, err, &InstallError{Kind: InvalidLayout}, "at %d: %v", at, err)
		require.ErrorContains(t, err, "memory: layout file layout.gz", "at %d", at)
		require.ErrorContains(t, err, "input/output error", "at %d", at)
	}
	// Corrupt or cut short, the data is at fault.
	flipped := bytes.Clone(packed)
	flipped[len(flipped)/2] ^= 0xff
	for _, data := range [][]byte{flipped, packed[:len(packed)/2]} {
		_, err := ReadLayout(bytes.NewReader(data), "layout.gz")
		require.ErrorIs(t, err, &InstallError{Kind: InvalidLayout}, "%v", err)
	}
	l, err := ReadLayout(bytes.NewReader(packed), "layout.gz")
	require.NoError(t, err)
	require.Equal(t, LayoutSliced, l.Kind())
}

// A layout of nothing or of white space only is said to be empty or
// blank, where it was "unknown layout nothing", and is still an
// InvalidLayout.
func TestBlankLayoutSaysSo(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "memory: the layout is empty: want sub-slices, exclusive-pages, direct, virtual or a layout JSON literal"},
		{" ", `memory: layout " " is blank, white space only: want sub-slices`},
		{" \t\n", `memory: layout " \t\n" is blank, white space only: want`},
		{strings.Repeat(" ", 100), "memory: layout of 100 B is blank, white space only: want"},
	} {
		_, err := ParseLayout(tc.in)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "nothing")
		require.ErrorIs(t, err, &InstallError{Kind: InvalidLayout})
	}
}
