package memory

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/vkrt/vkrt/internal/gzread"
	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/internal/strictjson"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// LayoutKind names the variants of a [Layout].
type LayoutKind uint8

const (
	// LayoutSubSlices, the zero Layout: a ladder of sliced pools under one
	// exclusive pool, derived from the device's MaxPageSize. It is what a
	// Virtual layout builds on a storage without sparse residency.
	LayoutSubSlices LayoutKind = iota
	// LayoutExclusivePages: exclusive pools in exponentially spaced buckets.
	LayoutExclusivePages
	// LayoutDirect: one direct pool for everything.
	LayoutDirect
	// LayoutSliced: an explicit ordered list of sliced pools.
	LayoutSliced
	// LayoutArena: an offline plan of slots, with sliced fallback pools.
	LayoutArena
	// LayoutVirtual: one virtual range with device memory bound under live
	// bytes, where the storage offers sparse residency; SubSlices where not.
	LayoutVirtual
)

func (k LayoutKind) String() string {
	switch k {
	case LayoutSubSlices:
		return "SubSlices"
	case LayoutExclusivePages:
		return "ExclusivePages"
	case LayoutDirect:
		return "Direct"
	case LayoutSliced:
		return "Sliced"
	case LayoutArena:
		return "Arena"
	case LayoutVirtual:
		return "Virtual"
	}
	return fmt.Sprintf("LayoutKind(%d)", uint8(k))
}

// Layout is the configuration of a Manager's dynamic pools. Build one with
// [SubSlicesLayout], [ExclusivePagesLayout], [DirectLayout], [SlicedLayout],
// [VirtualLayout] or [ArenaLayout], or parse one with [ParseLayout]. The
// zero Layout is the SubSlices preset. A Layout is immutable: constructors
// and accessors copy.
type Layout struct {
	kind    LayoutKind
	sliced  []SlicedPool
	arena   ArenaPlan
	virtual VirtualPlan
}

// SlicedPool is one pool of a Sliced layout: pages of PageSize bytes, at most
// *Pages of them (nil: uncapped), serving reservations up to *MaxSlice bytes
// (nil: up to PageSize); an uncapped pool also serves one within 20 % of
// its page (PageSize-PageSize/5 to PageSize bytes). A size no pool of the
// list serves is ErrBufferTooBig, one between what they serve too. A page
// larger than the device memory shrinks to it when the layout is
// installed, and the manager warns on its logger; the page it shrinks to,
// or one within the memory, larger than the storage's largest allocation
// is InvalidLayout.
type SlicedPool struct {
	PageSize uint64  `json:"page_size"`
	Pages    *uint64 `json:"pages"`
	MaxSlice *uint64 `json:"max_slice"`
	// Grow makes Pages a forecast rather than a limit: past it the pool
	// keeps adding pages, warns once with what was planned and what came,
	// and counts each such page as a spill. On an uncapped pool it marks a
	// plan's way out: every reservation it serves is a spill. A list with
	// a growing pool is a plan, and its pools end in an exclusive one, as
	// the SubSlices preset's do: a reservation larger than every page
	// takes a device allocation of its own size there (a spill), and so
	// does one whose page the device has no memory for, when it is asked
	// tight (Manager.ReserveTight). Plans set it; in JSON "grow":true,
	// left out when false.
	Grow bool `json:"grow,omitempty"`
	// Exclusive makes the pool one of whole pages: each reservation up to
	// PageSize takes a page of its own size (a free page it fits is used
	// again), as the SubSlices preset's last pool does, and Pages caps the
	// pages held at once. MaxSlice must be nil. A basic plan keeps the
	// pool its dry run measured exclusive so: sliced pages of the largest
	// buffer let a smaller one on another run hold most of a page that a
	// large one then could not use. In JSON "exclusive":true, left out
	// when false.
	Exclusive bool `json:"exclusive,omitempty"`
}

// ArenaSlot is where one planned reservation goes: Size bytes at Offset of
// arena page Page. In JSON it is the array [size, page, offset].
type ArenaSlot struct {
	Size   uint64
	Page   uint32
	Offset uint64
}

// ArenaPlan is an offline assignment of an allocation stream to arena pages.
type ArenaPlan struct {
	// Pages are the sizes of the arena's pages, one device allocation each.
	Pages []uint64 `json:"pages"`
	// Slots[k] is where the k-th dynamic reservation after Install goes.
	Slots []ArenaSlot `json:"slots"`
	// Fallback pools serve reservations that miss the plan; empty means the
	// SubSlices preset. One the device has no memory for goes to the lowest
	// room a held page has free, clear of live slots, if one has it: a run
	// that left the plan keeps its pages for the slots still live.
	Fallback []SlicedPool `json:"fallback"`
}

// SubSlicesLayout is the zero Layout, and what VirtualLayout (the client's
// and the replay's default) builds on a storage without sparse residency.
// Derived from DeviceProperties:
// sliced pools with pages of 2 MiB, 8 MiB, 32 MiB, … (×4, up to MaxPageSize
// or 256 MiB, whichever is less; the last page is exactly that bound), each
// serving slices up to a quarter of its page (and, uncapped, single
// allocations within 20 % of a page), then one exclusive pool for everything
// larger, up to the device's memory size or the storage's largest
// allocation (runtime.AllocationLimiter), whichever is less: larger is
// ErrBufferTooBig. With a MaxPageSize of 4 GiB the
// pages are 2, 8, 32, 128 and 256 MiB; with 128 MiB (lavapipe's largest
// storage buffer) 2, 8, 32 and 128 MiB.
func SubSlicesLayout() Layout { return Layout{kind: LayoutSubSlices} }

// ExclusivePagesLayout is one exclusive pool per size bucket: buckets end at
// 4 KiB, 16 KiB, 64 KiB, … (×4) until MaxPageSize is covered, and a last one
// reaches the device's memory size, or the storage's largest allocation if
// that is less.
func ExclusivePagesLayout() Layout { return Layout{kind: LayoutExclusivePages} }

// DirectLayout is one direct pool for everything.
func DirectLayout() Layout { return Layout{kind: LayoutDirect} }

// SlicedLayout is an ordered list of sliced pools; a reservation goes to the
// first that accepts its size.
func SlicedLayout(pools ...SlicedPool) Layout {
	return Layout{kind: LayoutSliced, sliced: cloneSlicedPools(pools)}
}

// ArenaLayout places reservations by an offline plan.
func ArenaLayout(p ArenaPlan) Layout { return Layout{kind: LayoutArena, arena: p.clone()} }

// Kind says which variant the layout is.
func (l Layout) Kind() LayoutKind { return l.kind }

// Sliced returns the pools of a Sliced layout.
func (l Layout) Sliced() ([]SlicedPool, bool) {
	if l.kind != LayoutSliced {
		return nil, false
	}
	return cloneSlicedPools(l.sliced), true
}

// Arena returns the plan of an Arena layout.
func (l Layout) Arena() (ArenaPlan, bool) {
	if l.kind != LayoutArena {
		return ArenaPlan{}, false
	}
	return l.arena.clone(), true
}

// Equal reports whether two layouts are the same configuration.
func (l Layout) Equal(o Layout) bool {
	if l.kind != o.kind {
		return false
	}
	switch l.kind {
	case LayoutSliced:
		return slices.EqualFunc(l.sliced, o.sliced, SlicedPool.equal)
	case LayoutArena:
		return slices.Equal(l.arena.Pages, o.arena.Pages) && slices.Equal(l.arena.Slots, o.arena.Slots) &&
			slices.EqualFunc(l.arena.Fallback, o.arena.Fallback, SlicedPool.equal)
	case LayoutVirtual:
		return l.virtual.equal(o.virtual)
	}
	return true
}

// String is the layout's JSON form.
func (l Layout) String() string {
	b, err := l.MarshalJSON()
	if err != nil {
		return fmt.Sprintf("<layout: %v>", err)
	}
	return string(b)
}

// briefJSON is the longest JSON form Brief gives whole, and briefParts the
// most pools, pages, slots and marks a layout it gives whole may have.
const briefJSON, briefParts = 200, 16

// Brief is the layout for a message: its JSON form where that is at most
// 200 B, else its kind and counts. A plan's JSON runs to megabytes (an
// arena of 200,000 slots, 2.9 MB), which a message naming it repeated whole.
func (l Layout) Brief() string {
	// Only a layout of few parts can be short: a plan of 200,000 places
	// is not marshalled to find out.
	parts := len(l.sliced) + len(l.arena.Pages) + len(l.arena.Slots) + len(l.arena.Fallback) + len(l.virtual.Slots) + len(l.virtual.Profile)
	if parts <= briefParts {
		if s := l.String(); len(s) <= briefJSON {
			return s
		}
	}
	switch l.kind {
	case LayoutSliced:
		return "a Sliced layout of " + printable.Count(len(l.sliced), "pool")
	case LayoutArena:
		var bytes uint64
		for _, p := range l.arena.Pages {
			bytes += min(p, math.MaxUint64-bytes)
		}
		return fmt.Sprintf("an Arena plan of %s (%d B), %s and %s", printable.Count(len(l.arena.Pages), "page"), bytes,
			printable.Count(len(l.arena.Slots), "slot"), printable.Count(len(l.arena.Fallback), "fallback pool"))
	case LayoutVirtual:
		return fmt.Sprintf("a Virtual plan of %d B planned, %s and %s", l.virtual.PlannedBytes,
			printable.Count(len(l.virtual.Slots), "slot"), printable.Count(len(l.virtual.Profile), "profile mark"))
	}
	return l.kind.String()
}

func (p SlicedPool) equal(o SlicedPool) bool {
	return p.PageSize == o.PageSize && equalOptional(p.Pages, o.Pages) && equalOptional(p.MaxSlice, o.MaxSlice) && p.Grow == o.Grow &&
		p.Exclusive == o.Exclusive
}

func equalOptional(a, b *uint64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func cloneOptional(p *uint64) *uint64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneSlicedPools(pools []SlicedPool) []SlicedPool {
	if pools == nil {
		return nil
	}
	out := make([]SlicedPool, len(pools))
	for i, p := range pools {
		out[i] = SlicedPool{PageSize: p.PageSize, Pages: cloneOptional(p.Pages), MaxSlice: cloneOptional(p.MaxSlice), Grow: p.Grow, Exclusive: p.Exclusive}
	}
	return out
}

func (p ArenaPlan) clone() ArenaPlan {
	return ArenaPlan{Pages: slices.Clone(p.Pages), Slots: slices.Clone(p.Slots), Fallback: cloneSlicedPools(p.Fallback)}
}

// ParseLayout reads a layout as the command line takes it: a preset name
// (sub-slices, exclusive-pages, direct, virtual, or the name of its kind,
// SubSlices, ExclusivePages, Direct, Virtual, as reports print it; either
// in any case) or a layout JSON literal. A string that is neither is
// refused with an error matching InvalidLayout (see InstallErrorKind).
func ParseLayout(s string) (Layout, error) { return parseLayout([]byte(s)) }

// parseLayout is ParseLayout on bytes, so a layout file is parsed where it
// was read rather than copied into a string and back.
func parseLayout(b []byte) (Layout, error) {
	t := bytes.TrimSpace(b)
	if l, ok := presetNamed(t); ok {
		return l, nil
	}
	if bom := byteOrderMark(t); bom != "" {
		return Layout{}, layoutUnreadable(fmt.Errorf("memory: layout %s starts with a %s byte order mark: want a layout JSON literal or a preset name, in UTF-8 without one", abbreviate(t), bom))
	}
	if len(t) == 0 {
		// abbreviate called it the unknown layout "nothing".
		what := "the layout is empty"
		if len(b) > 0 {
			what = fmt.Sprintf("layout %q is blank, white space only", b)
			if len(b) > 40 {
				what = fmt.Sprintf("layout of %d B is blank, white space only", len(b))
			}
		}
		return Layout{}, layoutUnreadable(fmt.Errorf("memory: %s: want sub-slices, exclusive-pages, direct, virtual or a layout JSON literal", what))
	}
	if t[0] == '{' || t[0] == '"' {
		var l Layout
		if err := l.UnmarshalJSON(t); err != nil {
			// The decoder's errors name the layout already: the literal
			// goes in their place, not in front of it.
			return Layout{}, &literalError{literal: abbreviate(t), err: err}
		}
		return l, nil
	}
	return Layout{}, layoutUnreadable(fmt.Errorf("memory: unknown layout %s: want sub-slices, exclusive-pages, direct, virtual or a layout JSON literal", abbreviate(t)))
}

// Bounds on what a layout may hold, so a layout that is huge by mistake or
// malice is refused at once with a clear error instead of taking gigabytes
// to build. They are far above anything a plan makes: a preset has at most
// a few dozen pools, a basic plan one per pool of its report, and an arena
// one slot per reservation of the stream it was planned on.
const (
	// MaxLayoutPools bounds the sliced pools of a Sliced layout and of an
	// arena's fallback: each reservation is routed through them in order.
	MaxLayoutPools = 256
	// MaxArenaSlots bounds the slots of an arena plan (24 B each once
	// decoded: 384 MiB at the bound).
	MaxArenaSlots = 1 << 24
	// MaxArenaPages bounds the pages of an arena plan, one device
	// allocation each.
	MaxArenaPages = maxPoolPages
	// MaxLayoutFileBytes bounds a layout file: an arena plan at
	// MaxArenaSlots written as JSON fits well inside it.
	MaxLayoutFileBytes = 1 << 30
	// MaxLayoutStringBytes bounds the bytes in a layout file's strings,
	// all together, as it is read: a layout's strings are the names of
	// its variants and members (and a plan file's, of its traces: twice
	// what the most a plan file names take at 256 bytes each), while a
	// gigabyte of text in one string, gzipped to 1 MB, cost 3.2 GB and
	// 13 s to refuse.
	MaxLayoutStringBytes = 32 << 20
)

// literalError is a layout literal's decoding error, quoting the literal.
type literalError struct {
	literal string
	err     error
}

func (e *literalError) Error() string {
	// The decoder's errors start with the package's prefix, and name the
	// layout: the literal goes in their place, not in front of them.
	msg := e.err.Error()
	msg = strings.TrimPrefix(msg, "memory: ")
	msg = strings.TrimPrefix(msg, "layout: ")
	return "memory: layout " + e.literal + ": " + msg
}

func (e *literalError) Unwrap() error { return e.err }

// ReadLayoutFile reads a layout from a file as ParseLayout reads it from a
// string. A file whose first bytes cannot start a layout is refused after
// reading those bytes alone, one past MaxLayoutFileBytes without reading
// further, and errors quote at most 40 bytes of it. What the file holds is
// refused as ParseLayout refuses it, with an error matching InvalidLayout;
// a file that cannot be opened or read keeps the error of that.
func ReadLayoutFile(path string) (Layout, error) {
	f, err := os.Open(path)
	if err != nil {
		return Layout{}, fmt.Errorf("memory: layout file: %w", err)
	}
	defer f.Close()
	return ReadLayout(f, path)
}

// ReadLayout is ReadLayoutFile for a stream already open, a pipe as well
// as a file, named name in errors: it reads r once, front to back.
func ReadLayout(r io.Reader, name string) (Layout, error) {
	// What r fails with is told apart from what the gzip reader makes of
	// it: a stream cut by the disk is no corrupt layout.
	rec := &recordingReader{r: r}
	r = rec
	head := make([]byte, 64)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return Layout{}, fmt.Errorf("memory: layout file %s: %w", name, err)
	}
	head = head[:n]
	gzipped := gzread.IsGzip(head)
	// The head read goes back in front of the rest, so a pipe reads as a
	// file does.
	src := io.MultiReader(bytes.NewReader(head), r)
	what := ""
	if gzipped {
		// A gzipped file's head is what it unpacks to: the packed bytes
		// read to unpack it go back in front of the rest too.
		var packed bytes.Buffer
		head = nil
		if zr, _, err := gzread.Reader(io.TeeReader(src, &packed)); err == nil {
			head = make([]byte, 64)
			n, _ = io.ReadFull(zr, head)
			head = head[:n]
		}
		src, what = io.MultiReader(&packed, src), " (gzipped)"
	}
	if bom := byteOrderMark(head); bom != "" {
		// An editor's mark, in front of what may be a layout: "holds no
		// layout" would send its user looking in the wrong place.
		return Layout{}, layoutUnreadable(fmt.Errorf("memory: layout file %s%s starts with a %s byte order mark: want a layout JSON literal or a preset name, in UTF-8 without one",
			name, what, bom))
	}
	if start := bytes.TrimLeft(head, " \t\r\n"); len(start) > 0 && start[0] != '{' && start[0] != '"' && len(head) == 64 && !presetHead(start) {
		return Layout{}, layoutUnreadable(fmt.Errorf("memory: layout file %s%s holds no layout: want a layout JSON literal or a preset name, starts with %s",
			name, what, abbreviate(start)))
	}
	// A gzipped file is bounded by what it unpacks to. Padding is dropped
	// as it is read: it costs neither memory nor parsing.
	squeezer := strictjson.Squeezer{MaxStringBytes: MaxLayoutStringBytes}
	data, _, err := gzread.ReadAllWith(src, MaxLayoutFileBytes, squeezer.Append)
	if err != nil && rec.err != nil {
		// The reader failed under the gzip stream (which calls it
		// unreadable, the reader's error in words alone): the file could
		// not be read, and keeps the reader's error.
		return Layout{}, fmt.Errorf("memory: layout file %s%s: %w", name, what, rec.err)
	}
	if errors.Is(err, strictjson.ErrStringBytes) {
		return Layout{}, layoutUnreadable(fmt.Errorf("memory: layout file %s: %w: a layout's strings are the names of its variants and members", name, err))
	}
	if err != nil {
		err = fmt.Errorf("memory: layout file %s: %w", name, err)
		if malformedFile(err) {
			err = layoutUnreadable(err)
		}
		return Layout{}, err
	}
	if len(data) == 0 {
		// parseLayout would call it an empty layout, not an empty file.
		return Layout{}, layoutUnreadable(fmt.Errorf("memory: layout file %s%s is empty: want a layout JSON literal or a preset name", name, what))
	}
	l, err := parseLayout(data)
	if err != nil {
		if gzipped {
			return Layout{}, nested("layout file "+name+" (gzipped)", err)
		}
		return Layout{}, nested("layout file "+name, err)
	}
	return l, nil
}

// recordingReader keeps the first error its reader gave other than io.EOF.
type recordingReader struct {
	r   io.Reader
	err error
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return n, err
}

// malformedFile is whether err, a layout file's reading error, is about
// what the file holds (past the size bound, gzip cut short or followed by
// other data) rather than a failure to read it.
func malformedFile(err error) bool {
	var tooLarge *gzread.TooLargeError
	return errors.As(err, &tooLarge) || errors.Is(err, gzread.ErrUnreadable) || errors.Is(err, gzread.ErrTrailing)
}

// byteOrderMark names the byte order mark b starts with (what some editors
// put in front of a file: UTF-16 with one, UTF-8 too), or is "": JSON
// allows none.
func byteOrderMark(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\xef\xbb\xbf")):
		return "UTF-8"
	case bytes.HasPrefix(b, []byte("\xff\xfe")):
		return "UTF-16 (little-endian)"
	case bytes.HasPrefix(b, []byte("\xfe\xff")):
		return "UTF-16 (big-endian)"
	}
	return ""
}

// presetHead reports whether a file's head, past its leading white space,
// is a preset name and white space alone: a preset padded past the head
// is a layout, as ParseLayout reads it.
func presetHead(start []byte) bool {
	_, ok := presetNamed(bytes.TrimRight(start, " \t\r\n"))
	return ok
}

// presetNames are the preset layouts' names as ParseLayout takes them,
// and their kinds' names as reports print them.
var presetNames = [...]struct {
	name, kind string
	layout     func() Layout
}{
	{"sub-slices", "SubSlices", SubSlicesLayout},
	{"exclusive-pages", "ExclusivePages", ExclusivePagesLayout},
	{"direct", "Direct", DirectLayout},
	{"virtual", "Virtual", func() Layout { return VirtualLayout(VirtualPlan{}) }},
}

// presetNamed is the preset layout name names, by its name or its kind's,
// matched in any case: the kinds print capitalised ("Virtual"), and a
// name copied from a report was an unknown layout.
func presetNamed(name []byte) (Layout, bool) {
	for _, p := range presetNames {
		if bytes.EqualFold(name, []byte(p.name)) || bytes.EqualFold(name, []byte(p.kind)) {
			return p.layout(), true
		}
	}
	return Layout{}, false
}

func (p SlicedPool) MarshalJSON() ([]byte, error) {
	b := fmt.Appendf(nil, `{"page_size":%d,"pages":`, p.PageSize)
	b = appendOptional(b, p.Pages)
	b = append(b, `,"max_slice":`...)
	b = appendOptional(b, p.MaxSlice)
	if p.Grow {
		b = append(b, `,"grow":true`...)
	}
	if p.Exclusive {
		b = append(b, `,"exclusive":true`...)
	}
	return append(b, '}'), nil
}

func appendOptional(b []byte, v *uint64) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return fmt.Appendf(b, "%d", *v)
}

func (p *SlicedPool) UnmarshalJSON(data []byte) error {
	o, err := decodeObject(data, "sliced pool", "page_size", "pages", "max_slice", "grow", "exclusive")
	if err != nil {
		return err
	}
	var out SlicedPool
	if out.PageSize, err = o.uint64("page_size"); err != nil {
		return err
	}
	if out.Pages, err = o.optionalUint64("pages"); err != nil {
		return err
	}
	if out.MaxSlice, err = o.optionalUint64("max_slice"); err != nil {
		return err
	}
	if out.Grow, err = o.optionalBool("grow"); err != nil {
		return err
	}
	if out.Exclusive, err = o.optionalBool("exclusive"); err != nil {
		return err
	}
	*p = out
	return nil
}

func (s ArenaSlot) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, "[%d,%d,%d]", s.Size, s.Page, s.Offset), nil
}

func (s *ArenaSlot) UnmarshalJSON(data []byte) error {
	elems, err := decodeArray(data, "arena slot", 3)
	if err != nil {
		return err
	}
	if len(elems) != 3 {
		return fmt.Errorf("memory: arena slot: want [size, page, offset], got %d elements", len(elems))
	}
	var v [3]uint64
	for i, name := range []string{"size", "page", "offset"} {
		if v[i], err = decodeUint64(elems[i], "arena slot "+name); err != nil {
			return err
		}
	}
	if v[1] > math.MaxUint32 {
		return fmt.Errorf("memory: arena slot page %d does not fit 32 bits", v[1])
	}
	*s = ArenaSlot{Size: v[0], Page: uint32(v[1]), Offset: v[2]}
	return nil
}

func (p ArenaPlan) MarshalJSON() ([]byte, error) {
	b := []byte(`{"pages":`)
	if len(p.Pages) == 0 {
		b = append(b, "[]"...)
	} else {
		b = append(b, '[')
		for i, v := range p.Pages {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, "%d", v)
		}
		b = append(b, ']')
	}
	b = append(b, `,"slots":[`...)
	for i, s := range p.Slots {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "[%d,%d,%d]", s.Size, s.Page, s.Offset)
	}
	b = append(b, `],"fallback":`...)
	b, err := appendSlicedPools(b, p.Fallback)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

func appendSlicedPools(b []byte, pools []SlicedPool) ([]byte, error) {
	b = append(b, '[')
	for i, p := range pools {
		if i > 0 {
			b = append(b, ',')
		}
		pb, err := p.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b = append(b, pb...)
	}
	return append(b, ']'), nil
}

func (p *ArenaPlan) UnmarshalJSON(data []byte) error {
	o, err := decodeObject(data, "arena plan", "pages", "slots", "fallback")
	if err != nil {
		return err
	}
	var out ArenaPlan
	raw, err := o.raw("pages")
	if err != nil {
		return err
	}
	elems, err := decodeArray(raw, "arena plan pages", MaxArenaPages)
	if err != nil {
		return err
	}
	out.Pages = make([]uint64, len(elems))
	for i, e := range elems {
		if out.Pages[i], err = decodeUint64(e, fmt.Sprintf("arena plan pages[%d]", i)); err != nil {
			return err
		}
	}
	if raw, err = o.raw("slots"); err != nil {
		return err
	}
	slotFields := [3]string{"size", "page", "offset"}
	nums, err := decodeUintTuples(raw, "arena plan slots", 3, MaxArenaSlots, func(k int) string {
		return fmt.Sprintf("arena plan slots[%d] %s", k/3, slotFields[k%3])
	})
	if err != nil {
		return err
	}
	out.Slots = make([]ArenaSlot, len(nums)/3)
	for i := range out.Slots {
		v := nums[3*i : 3*i+3]
		if v[1] > math.MaxUint32 {
			return fmt.Errorf("memory: arena plan slots[%d]: page %d does not fit 32 bits", i, v[1])
		}
		out.Slots[i] = ArenaSlot{Size: v[0], Page: uint32(v[1]), Offset: v[2]}
	}
	if raw := o.get("fallback"); raw != nil && !isJSONNull(raw) {
		if out.Fallback, err = decodeSlicedPools(raw, "arena plan fallback"); err != nil {
			return err
		}
	}
	*p = out
	return nil
}

func decodeSlicedPools(raw []byte, what string) ([]SlicedPool, error) {
	elems, err := decodeArray(raw, what, MaxLayoutPools)
	if err != nil {
		return nil, err
	}
	pools := make([]SlicedPool, len(elems))
	for i, e := range elems {
		if err := pools[i].UnmarshalJSON(e); err != nil {
			return nil, nested(fmt.Sprintf("%s[%d]", what, i), err)
		}
	}
	return pools, nil
}

// MarshalJSON writes the externally tagged form: "SubSlices",
// "ExclusivePages", "Direct", {"Sliced":[...]}, {"Arena":{...}}, or
// "Virtual" ({"Virtual":{...}} with a plan).
func (l Layout) MarshalJSON() ([]byte, error) {
	switch l.kind {
	case LayoutSubSlices, LayoutExclusivePages, LayoutDirect:
		return []byte(`"` + l.kind.String() + `"`), nil
	case LayoutSliced:
		b, err := appendSlicedPools([]byte(`{"Sliced":`), l.sliced)
		if err != nil {
			return nil, err
		}
		return append(b, '}'), nil
	case LayoutArena:
		ab, err := l.arena.MarshalJSON()
		if err != nil {
			return nil, err
		}
		return append(append([]byte(`{"Arena":`), ab...), '}'), nil
	case LayoutVirtual:
		return l.virtual.marshalLayout(), nil
	}
	return nil, fmt.Errorf("memory: layout of unknown kind %d", l.kind)
}

// layoutVariants are the names of a layout's JSON variants.
var layoutVariants = [...]string{"SubSlices", "ExclusivePages", "Direct", "Sliced", "Arena", "Virtual"}

// UnmarshalJSON reads the layout's JSON strictly, but for the variant's
// name, which matches in any case ("virtual", {"sliced":[…]}); an error
// matches InvalidLayout (see InstallErrorKind).
func (l *Layout) UnmarshalJSON(data []byte) error {
	return layoutUnreadable(l.unmarshalJSON(data))
}

func (l *Layout) unmarshalJSON(data []byte) error {
	const what = "layout"
	name, body, err := decodeVariant(data, what)
	if err != nil {
		return err
	}
	// A variant's name matches in any case, as a preset's name does.
	for _, known := range layoutVariants {
		if strings.EqualFold(name, known) {
			name = known
			break
		}
	}
	var out Layout
	switch name {
	case "SubSlices", "ExclusivePages", "Direct":
		if body != nil && !isJSONNull(body) {
			return fmt.Errorf("memory: layout: %s carries no data, got %s", name, abbreviate(bytes.TrimSpace(body)))
		}
		out.kind = map[string]LayoutKind{"SubSlices": LayoutSubSlices, "ExclusivePages": LayoutExclusivePages, "Direct": LayoutDirect}[name]
	case "Sliced":
		out.kind = LayoutSliced
		if out.sliced, err = decodeSlicedPools(body, "Sliced layout"); err != nil {
			return err
		}
	case "Arena":
		out.kind = LayoutArena
		if err := out.arena.UnmarshalJSON(body); err != nil {
			return err
		}
	case "Virtual":
		out.kind = LayoutVirtual
		if err := out.virtual.unmarshalBody(body); err != nil {
			return err
		}
	default:
		return unknownVariant(what, name, layoutVariants[:]...)
	}
	*l = out
	return nil
}

// Validate checks the layout against a device's properties the way Install
// does, and returns the *InstallError of kind InvalidLayout Install would.
// What depends on the storage Install alone checks: pages past its largest
// allocation, and a Virtual plan's places past its sparse address space.
func (l Layout) Validate(p vkruntime.DeviceProperties) error {
	if err := p.Validate(); err != nil {
		return invalidLayout("%v", err)
	}
	if _, err := l.resolve(p, 0); err != nil {
		return err
	}
	return nil
}
