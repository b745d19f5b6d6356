package memory

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vkrt/vkrt/internal/saturate"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Mapping says when a reservation's page gets device memory.
type Mapping int

const (
	// Eager pages get device memory when they are carved.
	Eager Mapping = iota
	// Lazy pages get an id but no device memory until Resolve needs it: a
	// dry run carves, coalesces and counts them like real ones.
	Lazy
)

func (m Mapping) String() string {
	switch m {
	case Eager:
		return "Eager"
	case Lazy:
		return "Lazy"
	}
	return fmt.Sprintf("Mapping(%d)", int(m))
}

// Handle names one reservation of a Manager. It is a small comparable value;
// the generation it carries makes it stale once freed, even after its slot
// is reused, and the manager it names makes it unknown to every other
// manager (another stream's pools). The zero Handle names nothing.
type Handle struct {
	slot    uint32
	gen     uint32
	manager uint32
}

func (h Handle) String() string {
	return fmt.Sprintf("memory handle %d.%d of manager %d", h.slot, h.gen, h.manager)
}

// managerIDs numbers managers from 1, so handles of different managers
// never match.
var managerIDs atomic.Uint32

// IsZero reports whether h is the zero Handle.
func (h Handle) IsZero() bool { return h == Handle{} }

// Reservations name their pool by its index in Manager.all: the
// persistent pool, the arena (nil without one), then the dynamic pools.
const (
	poolPersistent = 0
	poolArena      = 1
	firstDynamic   = 2
)

type reservation struct {
	requested uint64
	ref       int32 // the pool's ref while live; the next unused slot, or noSlot, while not
	pool      int16 // index into Manager.all
	gen       uint32
	live      bool
}

// noSlot ends the chain of unused reservation slots.
const noSlot = -1

// Manager routes one stream's reservations through its pools. It is not
// safe for concurrent use; callers serialise access. Build one with
// NewManager: the zero Manager has no pools, and refuses reservations and
// layouts with ErrNotBuilt (its Report is the zero one, its Cleanup does
// nothing, and no handle is live in it).
type Manager struct {
	id           uint32
	storage      vkruntime.Storage
	props        vkruntime.DeviceProperties
	backendLimit uint64
	layout       Layout
	logger       *slog.Logger
	layoutWarn   func(Layout, string) // WithLayoutWarnings; nil: the logger
	// uncheckedOps counts operations since the last full invariant check
	// (build tag invariants); see mustHoldInvariants.
	uncheckedOps uint64

	arena      *arenaPool
	pools      []pool // the dynamic pools in routing order
	persistent *directPool
	all        []pool // persistent, arena, then pools: indexed by reservation.pool
	warned     []bool // per dynamic pool, the arena's, the plan's growth, the exact pool's, then held room's
	// exact is the index in pools of the layout's last pool when it is
	// exclusive (-1: none): a reservation whose sliced page the device has
	// no memory for takes an allocation of its own size there. exactWayOut
	// says it is a plan's way out, where every reservation is a spill.
	exact       int
	exactWayOut bool
	routes      []route
	routeStart  [65]uint32 // by bit length of a size: the first route that can hold it

	reservations []reservation
	unusedSlot   int32 // head of the chain of unused reservation slots, linked by ref
	total        Usage
	window       int
	ordinal      uint64 // dynamic reservations since the last Install
	spills       uint64
}

// ManagerOption configures NewManager. A nil option is refused
// (ErrInvalidOption), as the client, the environment and the WASM host
// refuse theirs; a nil logger or warning function given to one is the
// default.
type ManagerOption func(*Manager)

// ErrInvalidOption: NewManager was given a nil option.
var ErrInvalidOption = errors.New("memory: invalid option")

// ErrNotBuilt: a Manager that NewManager did not build (the zero Manager)
// was asked to reserve or install: it has no pools.
var ErrNotBuilt = errors.New("memory: the manager was not built by NewManager")

// built is whether NewManager built m: the zero Manager has no pools.
func (m *Manager) built() bool { return m.persistent != nil }

// WithLogger is where the manager warns, from the layout NewManager builds
// on (SetLogger after NewManager comes too late for that layout's
// warnings); nil means slog.Default.
func WithLogger(l *slog.Logger) ManagerOption {
	return func(m *Manager) { m.SetLogger(l) }
}

// WithLayoutWarnings hands warn what a layout asks past the device, each
// time the manager builds one (NewManager, Install), instead of warning
// on its logger: several managers of one layout (a client's streams) then
// say it once (see LayoutWarningsOnce).
func WithLayoutWarnings(warn func(layout Layout, detail string)) ManagerOption {
	return func(m *Manager) { m.layoutWarn = warn }
}

// LayoutWarningsOnce is a WithLayoutWarnings function that warns each
// thing asked past the device once, on logger() (slog.Default where it
// gives nil, or where logger is nil), however many managers share it, from
// any goroutine.
func LayoutWarningsOnce(logger func() *slog.Logger) func(Layout, string) {
	if logger == nil {
		// As WithLogger(nil): the default, not a panic at the first warning.
		logger = func() *slog.Logger { return nil }
	}
	var (
		mu     sync.Mutex
		warned = map[string]bool{}
	)
	return func(l Layout, detail string) {
		mu.Lock()
		defer mu.Unlock()
		if warned[detail] {
			return
		}
		warned[detail] = true
		lg := logger()
		if lg == nil {
			lg = slog.Default()
		}
		lg.Warn(LayoutWarning, "layout", l.Kind().String(), "detail", detail)
	}
}

// NewManager builds the pools of layout l over storage s for a device with
// properties p. An unusable layout is an *InstallError of kind InvalidLayout.
func NewManager(s vkruntime.Storage, p vkruntime.DeviceProperties, l Layout, opts ...ManagerOption) (*Manager, error) {
	if s == nil {
		return nil, errors.New("memory: NewManager needs a storage, got nil")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memory: NewManager: %w", err)
	}
	m := &Manager{id: managerIDs.Add(1), storage: s, props: p, logger: slog.Default(), unusedSlot: noSlot}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d of the %d given to NewManager is nil", ErrInvalidOption, i+1, len(opts))
		}
		o(m)
	}
	if lim, ok := s.(vkruntime.AllocationLimiter); ok {
		m.backendLimit = lim.MaxAllocationSize()
	}
	resolved, err := l.resolve(p, m.backendLimit)
	if err != nil {
		return nil, err
	}
	if err := m.checkAddressSpace(resolved); err != nil {
		return nil, err
	}
	m.persistent = newDirectPool(s, &m.total, exclusiveCeiling(p, m.limit()), 0, true)
	m.build(l, resolved)
	return m, nil
}

func (m *Manager) limit() uint64 {
	if m.backendLimit == 0 {
		return ^uint64(0)
	}
	return m.backendLimit
}

// LayoutWarning is the message a manager warns with where a layout asks
// for more than the device has.
const LayoutWarning = "memory: the layout asks for more than the device has"

// SetLogger sets where the manager warns about spills; nil means slog.Default.
func (m *Manager) SetLogger(l *slog.Logger) {
	if l == nil {
		l = slog.Default()
	}
	m.logger = l
}

// Layout is the installed layout.
func (m *Manager) Layout() Layout { return m.layout }

func (m *Manager) build(l Layout, r resolvedLayout) {
	m.layout = l
	r = m.fitStorage(r)
	notes := r.notes
	for _, c := range r.pools {
		if c.note != "" {
			notes = append(notes, c.note)
		}
	}
	for _, note := range notes {
		if m.layoutWarn != nil {
			m.layoutWarn(l, note)
			continue
		}
		m.logger.Warn(LayoutWarning, "layout", l.Kind().String(), "detail", note)
	}
	m.arena = nil
	if r.arena != nil {
		m.arena = newArenaPool(r.arena, m.storage, &m.total)
	}
	m.pools = make([]pool, len(r.pools))
	m.exact, m.exactWayOut = -1, false
	if n := len(r.pools); n > 0 && r.pools[n-1].shape == shapeExclusive && r.pools[n-1].capPages == 0 {
		m.exact, m.exactWayOut = n-1, r.pools[n-1].wayOut
	}
	for i, c := range r.pools {
		switch c.shape {
		case shapeSliced:
			sp := newSlicedPool(c, m.storage, &m.total)
			m.tellForecastShort(&sp.pageCap, i)
			m.pools[i] = sp
		case shapeExclusive:
			xp := newExclusivePool(c, m.storage, &m.total)
			m.tellForecastShort(&xp.pageCap, i)
			m.pools[i] = xp
		case shapeDirect:
			m.pools[i] = newDirectPool(m.storage, &m.total, exclusiveCeiling(m.props, m.limit()), m.props.MemorySize, false)
		case shapeVirtual:
			vp := newVirtualPool(c, m.storage.(vkruntime.SparseStorage), &m.total)
			vp.outgrown, vp.leftPlan, vp.placesLost = m.warnOutgrown, m.warnLeftPlan, m.warnPlacesPastSpace
			m.pools[i] = vp
		}
	}
	m.all = append(append(m.all[:0], m.persistent, nil), m.pools...)
	if m.arena != nil {
		m.all[poolArena] = m.arena
	}
	m.warned = make([]bool, len(m.pools)+4)
	m.ordinal, m.spills = 0, 0
	m.routes = buildRoutes(m.pools)
	for bitLen := range m.routeStart {
		var least uint64
		if bitLen > 0 {
			least = 1 << (bitLen - 1)
		}
		i := 0
		for m.routes[i].upTo < least {
			i++
		}
		m.routeStart[bitLen] = uint32(i)
	}
}

// route says which pools accept the aligned sizes up to upTo (and past the
// previous route's), in routing order. Routes are cut where any pool's
// acceptance changes, so Reserve finds its candidates without asking every
// pool.
type route struct {
	upTo     uint64
	pools    []int16
	sliced   *slicedPool // pools[0] when it is a sliced pool: a direct call
	slicedAt int16       // then its index in Manager.all
	virtual  *virtualPool
}

func buildRoutes(pools []pool) []route {
	cuts := []uint64{^uint64(0)}
	for _, p := range pools {
		var bounds []uint64
		switch p := p.(type) {
		case *slicedPool:
			bounds = []uint64{p.maxSlice, p.pageSize}
			if p.nearPage != 0 {
				bounds = append(bounds, p.nearPage-1)
			}
		case *exclusivePool:
			bounds = []uint64{p.maxAlloc}
		case *directPool:
			bounds = []uint64{p.ceiling}
		case *virtualPool:
			bounds = []uint64{p.maxAlloc}
		}
		cuts = append(cuts, bounds...)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	routes := make([]route, 0, len(cuts))
	for _, c := range cuts {
		var accepting []int16
		for i, p := range pools {
			if p.accepts(c) {
				accepting = append(accepting, int16(i))
			}
		}
		r := route{upTo: c, pools: accepting}
		if len(accepting) > 0 {
			r.sliced, _ = pools[accepting[0]].(*slicedPool)
			r.virtual, _ = pools[accepting[0]].(*virtualPool)
			r.slicedAt = firstDynamic + accepting[0]
		}
		routes = append(routes, r)
	}
	return routes
}

// routeOf is the route of an aligned size: from the first route that can
// hold a size of its bit length, rarely more than a step.
func (m *Manager) routeOf(size uint64) *route {
	// Most sizes fall in the first route (a Virtual layout's holds every
	// size its pool accepts).
	if r := &m.routes[0]; size <= r.upTo {
		return r
	}
	i := int(m.routeStart[bits.Len64(size)])
	// One step without a branch (the borrow is 1 when the route ends
	// below size); more are rare.
	_, past := bits.Sub64(m.routes[i].upTo, size, 0)
	i += int(past)
	for m.routes[i].upTo < size {
		i++
	}
	return &m.routes[i]
}

// Reserve places size bytes, padded up to the device alignment (a zero size
// takes one alignment unit). Inside a persistent window it serves from the
// persistent pool; otherwise from the arena plan, then the dynamic pools in
// layout order. Errors: ErrBufferTooBig when no pool accepts the size,
// *CapacityError when every accepting pool is full at its cap, the
// storage's error, or an *OutOfMemoryError where the pools would hold more
// than 2^64 B (lazy pages too); on error nothing changed. An
// *OutOfMemoryError reached with errors.As carries the size asked, not that
// of the page or chunk refused for it, which its Detail names (the
// device's own error stays in the chain); Resolve's does too. (A pool hands
// free memory back before it asks the device for more, and takes it again
// when the device refuses: what the device refuses again stays in the pool
// unmapped, like a lazy page, as all of it does where the device panics.)
func (m *Manager) Reserve(size uint64, mapping Mapping) (Handle, error) {
	// The common case, kept short: the first accepting pool is sliced and
	// has room. Everything else, errors included, takes reserveSlow.
	aligned, ok := alignUp(max(size, 1), m.props.Alignment)
	if ok && uint(mapping) <= uint(Lazy) && m.window == 0 && m.arena == nil {
		r := m.routeOf(aligned)
		var (
			ref int32
			err = errPoolFull
		)
		switch {
		case r.sliced != nil:
			ref, err = r.sliced.reserve(aligned, size, mapping == Lazy)
		case r.virtual != nil:
			ref, err = r.virtual.reserve(aligned, size, mapping == Lazy)
		}
		if err == nil {
			m.ordinal++
			h := m.record(r.slicedAt, ref, size)
			if invariantsEnabled {
				m.mustHoldInvariants("Reserve")
			}
			return h, nil
		} else if err != errPoolFull {
			return Handle{}, reserveFailed(size, err)
		}
	}
	return m.reserveSlow(size, mapping, false)
}

// ReserveTight is Reserve as a last resort, for a caller that Reserve
// refused for device memory and that then gave back what its pools held
// unused (Cleanup): where the device has no memory for another page of
// the pool a size goes to, the reservation takes a device allocation of
// its own size from the layout's last pool, when that is exclusive (the
// SubSlices preset's, and a plan's way out), and where the device has no
// memory for that either, free room in a page that a sliced pool of larger
// reservations holds. A page may be far larger than its reservation: a
// plan's largest, or 256 MiB in SubSlices.
// Reserve does not do this itself: an allocation of its own size that
// fits beside pages held unused leaves them held, where a cleanup first
// would have made room for the page. A reservation given an allocation of
// its own size is a spill under a plan; the manager warns once of each.
func (m *Manager) ReserveTight(size uint64, mapping Mapping) (Handle, error) {
	return m.reserveSlow(size, mapping, true)
}

// mayTakeExact is whether a sliced pool's refusal err may send a tight
// reservation on to the exact pool: the device had no memory for a page,
// and the layout has such a pool.
func (m *Manager) mayTakeExact(err error) bool {
	return m.exact >= 0 && errors.Is(err, vkruntime.ErrOutOfDeviceMemory)
}

func reserveFailed(size uint64, err error) error {
	return fmt.Errorf("memory: reserve %d B: %w", size, refusedFor(size, err))
}

// refusedFor is err, a refusal of a request of size bytes, with the
// *OutOfMemoryError in it restated for the request: its Size is size,
// the device's figures are kept, and its Detail says what was refused
// (by the device, or by the pools where they would pass 2^64 B), a page
// or a chunk of another size. errors.As found the size of
// the last device allocation the pools asked for, which said of a request
// of the whole device memory that it asked 1245184 B. The device's error
// stays in the chain.
func refusedFor(size uint64, err error) error {
	var oom *vkruntime.OutOfMemoryError
	if !errors.As(err, &oom) || oom.Size == size {
		return err
	}
	r := *oom
	r.Size = size
	r.Detail = fmt.Sprintf("an allocation of %d B for it was refused", oom.Size)
	if oom.Detail != "" {
		r.Detail += ": " + oom.Detail
	}
	// The message is err's, what wraps the device's error kept, with the
	// device's words restated.
	msg, said := err.Error(), oom.Error()
	if i := strings.Index(msg, said); i >= 0 {
		msg = msg[:i] + r.Error() + msg[i+len(said):]
	} else {
		msg = r.Error() + " (" + msg + ")"
	}
	return &requestRefused{msg: msg, oom: &r, err: err}
}

// requestRefused is an *OutOfMemoryError restated for the request, in
// front of the device's error it restates.
type requestRefused struct {
	msg string
	oom *vkruntime.OutOfMemoryError
	err error
}

func (e *requestRefused) Error() string   { return e.msg }
func (e *requestRefused) Unwrap() []error { return []error{e.oom, e.err} }

// reserveSlow is Reserve past its common case, and ReserveTight when tight.
func (m *Manager) reserveSlow(size uint64, mapping Mapping, tight bool) (Handle, error) {
	if !m.built() {
		// Its alignment of 0 read as a size that overflows when aligned.
		return Handle{}, fmt.Errorf("%w: reserve %d B", ErrNotBuilt, size)
	}
	if mapping != Eager && mapping != Lazy {
		return Handle{}, fmt.Errorf("%w %d (want Eager or Lazy): reserve %d B", ErrUnknownMapping, int(mapping), size)
	}
	aligned, ok := alignUp(max(size, 1), m.props.Alignment)
	if !ok {
		return Handle{}, fmt.Errorf("%w: asked %d B, which overflows when aligned to %d B", vkruntime.ErrBufferTooBig, size, m.props.Alignment)
	}
	lazy := mapping == Lazy
	var (
		poolIdx int16
		ref     int32
		err     error
	)
	if m.window > 0 {
		if !m.persistent.accepts(aligned) {
			return Handle{}, fmt.Errorf("%w: asked %d B (%d B aligned) of the persistent pool, which takes at most %d B",
				vkruntime.ErrBufferTooBig, size, aligned, m.persistent.ceiling)
		}
		poolIdx = poolPersistent
		if ref, err = m.persistent.reserve(aligned, size, lazy); err != nil {
			return Handle{}, reserveFailed(size, err)
		}
	} else {
		poolIdx, ref, err = m.reserveDynamic(aligned, size, lazy, tight)
		if m.arena != nil {
			m.arena.settle(err != nil)
		}
		if err != nil {
			return Handle{}, err
		}
		m.ordinal++
	}
	if invariantsEnabled {
		defer m.mustHoldInvariants("Reserve")
	}
	return m.record(poolIdx, ref, size), nil
}

func (m *Manager) reserveDynamic(aligned, size uint64, lazy, tight bool) (int16, int32, error) {
	spilled := false
	// arenaRefused: the device refused the arena memory for the
	// reservation, which the fallback pools may still serve.
	var arenaRefused error
	if m.arena != nil {
		ref, hit, refused, err := m.arena.place(m.ordinal, aligned, size, lazy)
		if err != nil {
			return 0, 0, reserveFailed(size, err)
		}
		if hit {
			return poolArena, ref, nil
		}
		spilled, arenaRefused = true, refused
		ref, ok, err := m.arena.lend(aligned, size, lazy)
		switch {
		case ok:
			m.spills++
			m.warnLeftArena(size)
			return poolArena, ref, nil
		case errors.Is(err, vkruntime.ErrOutOfDeviceMemory):
			arenaRefused = err
		case err != nil:
			return 0, 0, reserveFailed(size, err)
		}
	}
	r := m.routeOf(aligned)
	var refused error // the first pool's refusal, so the device is not asked twice
	if r.sliced != nil && !spilled {
		// The common case: the first accepting pool is sliced and has room.
		if ref, err := r.sliced.reserve(aligned, size, lazy); err == nil {
			return r.slicedAt, ref, nil
		} else if err != errPoolFull {
			if !tight || !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
				return 0, 0, reserveFailed(size, err)
			}
			refused = err
		}
	}
	candidates := r.pools
	if len(candidates) == 0 {
		if arenaRefused != nil {
			return 0, 0, reserveFailed(size, arenaRefused)
		}
		return 0, 0, m.noPoolAccepts(size, aligned)
	}
	var capBytes, usedBytes uint64
	for n, i := range candidates {
		p := m.pools[i]
		counted := m.spills
		var (
			ref int32
			err error
		)
		if n == 0 && refused != nil {
			err = refused
		} else {
			ref, err = p.reserve(aligned, size, lazy)
		}
		if err == errPoolFull {
			c, u, _ := p.capacity()
			capBytes += c
			usedBytes += u
			continue
		}
		exactAfterRefusal := false
		if sp, sliced := p.(*slicedPool); tight && err != nil && sliced && m.mayTakeExact(err) && m.pools[m.exact].accepts(aligned) {
			// A page the device has no memory for may be far larger
			// than the reservation: an allocation of its own size may fit.
			var xref int32
			if xref, err = m.pools[m.exact].reserve(aligned, size, lazy); err == nil {
				m.warnExact(int(i), aligned)
				spilled = spilled || sp.grow || m.exactWayOut
				i, ref, exactAfterRefusal = int16(m.exact), xref, true
			}
		}
		if err != nil && tight && errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
			// The device has no memory for a page, nor for an allocation
			// of the reservation's own size: a page another pool holds
			// may still have the room.
			if j, xref, ok := m.roomInHeldPages(candidates, n, aligned, size, lazy); ok {
				m.warnHeldRoom(int(i), int(j), aligned)
				i, ref, err = j, xref, nil
			}
		}
		if err != nil {
			return 0, 0, reserveFailed(size, err)
		}
		if n != 0 {
			spilled = true
			m.warnFull(candidates[:n], int(i), size)
		}
		if int(i) == m.exact && m.exactWayOut && !exactAfterRefusal {
			spilled = true
			m.warnWayOut(int(i), size)
		}
		// A growing pool counted the reservation as a spill already
		// when it went past its forecast: one reservation, one spill.
		if spilled && m.spills == counted {
			m.spills++
		}
		if m.arena != nil {
			m.arena.left = true
			m.warnLeftArena(size)
		}
		return firstDynamic + i, ref, nil
	}
	return 0, 0, &vkruntime.CapacityError{Size: size, Capacity: capBytes, InUse: usedBytes}
}

// roomInHeldPages reserves aligned bytes in the free room of a page a
// sliced pool holds, adding no page, for a tight reservation that
// candidates[n] could not serve: first the later candidates (pools of
// larger reservations), then the pools that do not accept the size (those
// of smaller ones), the largest pages first; ok is false where none has
// it. A slice past a pool's largest is still a slice of its page:
// placement and freeing go by the page's free blocks, not the pool's
// limit. With the later candidates only, on devices without sparse
// residency of 1.1, 1.2, 1.5 and 2 times a generated run's peak,
// SubSlices with no plan ran 69, 116, 184 and 198 of 200 runs (seeds
// 1-25); with the smaller pools' pages too, 90, 136, 199 and 200.
func (m *Manager) roomInHeldPages(candidates []int16, n int, aligned, size uint64, lazy bool) (int16, int32, bool) {
	try := func(j int16) (int32, bool) {
		sp, ok := m.pools[j].(*slicedPool)
		if !ok {
			return 0, false
		}
		ref, err := sp.reserveHeld(aligned, size, lazy)
		return ref, err == nil
	}
	for _, j := range candidates[n+1:] {
		if ref, ok := try(j); ok {
			return j, ref, true
		}
	}
	for j := int16(len(m.pools) - 1); j >= 0; j-- {
		if slices.Contains(candidates, j) {
			continue // tried: full, refused, or above
		}
		if ref, ok := try(j); ok {
			return j, ref, true
		}
	}
	return 0, 0, false
}

// warnHeldRoom warns once per layout that a reservation the device had no
// memory for went to a page pool j held for other reservations.
func (m *Manager) warnHeldRoom(i, j int, aligned uint64) {
	if m.warned[len(m.pools)+3] {
		return
	}
	m.warned[len(m.pools)+3] = true
	m.logger.Warn("memory: the device has no memory for the reservation in its pool; it takes free room in a page another pool holds",
		"pool", m.reportIndex(i), "bytes", aligned, "to_pool", m.reportIndex(j))
}

// warnLeftArena warns once per layout that a reservation missed the arena
// plan. Only a served one says so: a refused one leaves the plan as it was.
func (m *Manager) warnLeftArena(size uint64) {
	if !m.warned[len(m.pools)] {
		m.warned[len(m.pools)] = true
		var planned uint64
		for _, page := range m.arena.cfg.pages {
			planned = saturate.Add(planned, page)
		}
		m.logger.Warn("memory: the allocation stream left the arena plan; later reservations go to the free room of its held pages, then to the fallback pools",
			"reservation", m.ordinal, "bytes", size, "planned_slots", len(m.arena.cfg.slots), "planned_bytes", planned,
			"needed_bytes", m.total.BytesInUse) // the miss, served, included
	}
}

// reportIndex is the index of dynamic pool i in Report.Dynamic, which
// lists the arena first when there is one: the index the warnings name.
func (m *Manager) reportIndex(i int) int {
	if m.arena != nil {
		return i + 1
	}
	return i
}

// warnExact warns once per layout that the device had no memory for a
// page of sliced pool i, and that a reservation took an allocation of its
// own size in the exact pool instead.
func (m *Manager) warnExact(i int, aligned uint64) {
	if m.warned[len(m.pools)+2] {
		return
	}
	m.warned[len(m.pools)+2] = true
	m.logger.Warn("memory: the device has no memory for another page of a pool; the reservation takes a device allocation of its own size",
		"pool", m.reportIndex(i), "page_bytes", m.pools[i].(*slicedPool).pageSize, "bytes", aligned, "to_pool", m.reportIndex(m.exact))
}

// warnWayOut warns once per layout (with the plan's growth) that a
// reservation larger than every page of a plan went to its way out.
func (m *Manager) warnWayOut(i int, size uint64) {
	if m.warned[len(m.pools)+1] {
		return
	}
	m.warned[len(m.pools)+1] = true
	m.logger.Warn("memory: the run needs more device memory than its plan expected: a reservation larger than every planned page takes a device allocation of its own size",
		"planned_bytes", m.plannedCappedBytes(), "needed_bytes", m.total.BytesReserved, "pool", m.reportIndex(i), "bytes", size)
}

// warnFull warns once per pool and layout about each full pool a
// reservation spilled past.
func (m *Manager) warnFull(full []int16, landed int, size uint64) {
	for _, j := range full {
		if m.warned[j] {
			continue
		}
		m.warned[j] = true
		c, u, _ := m.pools[j].capacity()
		m.logger.Warn("memory: a capped pool is full and spills to the next one; the plan was short",
			"pool", m.reportIndex(int(j)), "capacity_bytes", c, "used_bytes", u, "bytes", size, "to_pool", m.reportIndex(landed))
	}
}

// noPoolAccepts is the ErrBufferTooBig of a size no pool accepts. A size
// below the largest accepted one falls between what the pools take (an
// uncapped sliced pool takes up to its max_slice and again within 20 % of
// its page): the error names that gap, where "more than any pool accepts
// (largest 1048576 B)" said of 262145 B that it was more than 1 MiB.
func (m *Manager) noPoolAccepts(size, aligned uint64) error {
	largest := m.largestAccepted()
	if aligned > largest {
		return fmt.Errorf("%w: asked %d B (%d B aligned), more than any pool of the layout accepts (largest %d B)",
			vkruntime.ErrBufferTooBig, size, aligned, largest)
	}
	// Routes are cut wherever a pool's acceptance changes: the gap is the
	// run of routes no pool accepts around the size's own.
	i := 0
	for m.routes[i].upTo < aligned {
		i++
	}
	first, last := i, i
	for first > 0 && len(m.routes[first-1].pools) == 0 {
		first--
	}
	for last+1 < len(m.routes) && len(m.routes[last+1].pools) == 0 {
		last++
	}
	var from uint64
	if first > 0 {
		from = m.routes[first-1].upTo + 1
	}
	to := m.routes[last].upTo
	// In aligned sizes, the only ones asked of the pools; neither passes
	// the size's own, which lies in the gap.
	from, _ = alignUp(from, m.props.Alignment)
	to -= to % m.props.Alignment
	return fmt.Errorf("%w: asked %d B (%d B aligned), which no pool of the layout accepts: none takes an aligned size from %d B to %d B (the largest any takes is %d B)",
		vkruntime.ErrBufferTooBig, size, aligned, from, to, largest)
}

func (m *Manager) largestAccepted() uint64 {
	var largest uint64
	for _, p := range m.pools {
		switch p := p.(type) {
		case *slicedPool:
			largest = max(largest, p.maxSlice)
			if p.nearPage != 0 {
				largest = max(largest, p.pageSize)
			}
		case *exclusivePool:
			largest = max(largest, p.maxAlloc)
		case *directPool:
			largest = max(largest, p.ceiling)
		case *virtualPool:
			largest = max(largest, p.maxAlloc)
		}
	}
	return largest
}

func (m *Manager) record(poolIdx int16, ref int32, size uint64) Handle {
	slot := m.unusedSlot
	if slot == noSlot {
		m.reservations = append(m.reservations, reservation{gen: 1, ref: noSlot})
		slot = int32(len(m.reservations) - 1)
	}
	r := &m.reservations[slot]
	m.unusedSlot = r.ref
	r.pool, r.ref, r.requested, r.live = poolIdx, ref, size, true
	return Handle{slot: uint32(slot), gen: r.gen, manager: m.id}
}

func (m *Manager) lookup(h Handle, op string) (*reservation, error) {
	if int(h.slot) < len(m.reservations) && h.manager == m.id {
		if r := &m.reservations[h.slot]; r.live && r.gen == h.gen {
			return r, nil
		}
	}
	return nil, m.notFound(h, op)
}

func (m *Manager) notFound(h Handle, op string) error {
	return fmt.Errorf("%w: %s of %v: it is not a live reservation of this manager (%d live)",
		vkruntime.ErrNotFound, op, h, m.total.NumberAllocs)
}

func (m *Manager) poolOf(r *reservation) pool { return m.all[r.pool] }

// Free releases a reservation. A stale or unknown handle is ErrNotFound and
// changes nothing.
func (m *Manager) Free(h Handle) error {
	if int(h.slot) >= len(m.reservations) || h.manager != m.id {
		return m.notFound(h, "free")
	}
	r := &m.reservations[h.slot]
	if !r.live || r.gen != h.gen {
		return m.notFound(h, "free")
	}
	// The slot is released before the pool frees, so nothing is kept
	// across the call.
	p, ref, requested := m.all[r.pool], r.ref, r.requested
	r.live = false
	if r.gen == math.MaxUint32 {
		// Retired for good: a generation that wrapped would let a handle
		// freed 2^32 reservations ago name the slot's next one. Generation
		// 0 is never issued.
		r.gen = 0
	} else {
		r.gen++
		r.ref = m.unusedSlot
		m.unusedSlot = int32(h.slot)
	}
	p.free(ref, requested)
	if invariantsEnabled {
		m.mustHoldInvariants("Free")
	}
	return nil
}

// Resolve is the device range of a reservation, giving its page device
// memory first if it has none yet.
func (m *Manager) Resolve(h Handle) (vkruntime.StorageHandle, error) {
	r, err := m.lookup(h, "resolve")
	if err != nil {
		return vkruntime.StorageHandle{}, err
	}
	sh, err := m.poolOf(r).resolve(r.ref)
	if err != nil {
		return vkruntime.StorageHandle{}, fmt.Errorf("memory: resolve %v (%d B): %w", h, r.requested, refusedFor(r.requested, err))
	}
	if invariantsEnabled {
		m.mustHoldInvariants("Resolve")
	}
	return sh, nil
}

// ResolveTight is Resolve as a last resort, as ReserveTight is Reserve's:
// a lazy reservation whose sliced page the device has no memory for, and
// that so holds no bytes yet, moves to an allocation of its own size in
// the layout's last pool, when that is exclusive (a spill under a plan;
// the manager warns once). Its handle stays valid; on error nothing
// changed.
func (m *Manager) ResolveTight(h Handle) (vkruntime.StorageHandle, error) {
	sh, err := m.Resolve(h)
	if err == nil || !m.mayTakeExact(err) {
		return sh, err
	}
	r, _ := m.lookup(h, "resolve")
	sp, sliced := m.poolOf(r).(*slicedPool)
	if !sliced {
		return sh, err
	}
	_, _, size := sp.locate(r.ref)
	exact := m.pools[m.exact]
	if !exact.accepts(size) {
		return sh, err
	}
	ref, xerr := exact.reserve(size, r.requested, false)
	if xerr != nil {
		return sh, fmt.Errorf("memory: resolve %v (%d B): %w", h, r.requested, refusedFor(r.requested, xerr))
	}
	from := int(r.pool) - firstDynamic
	sp.free(r.ref, r.requested)
	r.pool, r.ref = firstDynamic+int16(m.exact), ref
	if sp.grow || m.exactWayOut {
		m.spills++
	}
	m.warnExact(from, size)
	return m.Resolve(h)
}

// Usage is the sum over every pool, kept as reservations come and go: O(1).
func (m *Manager) Usage() Usage { return m.total }

// Report is a per-pool snapshot: the arena first when there is one, then the
// dynamic pools in routing order, and the persistent pool.
func (m *Manager) Report() Report {
	if !m.built() {
		return Report{}
	}
	r := Report{Dynamic: make([]PoolReport, 0, len(m.pools)+1), Persistent: m.persistent.report()}
	if m.arena != nil {
		r.Dynamic = append(r.Dynamic, m.arena.report())
	}
	for _, p := range m.pools {
		r.Dynamic = append(r.Dynamic, p.report())
	}
	return r
}

// PoolUsages appends every pool's usage to dst in the order of Report (the
// arena first when there is one, the dynamic pools in routing order, the
// persistent pool last) and returns it: what a per-event observer needs of
// a report, without building one.
func (m *Manager) PoolUsages(dst []Usage) []Usage {
	if !m.built() {
		return dst
	}
	if m.arena != nil {
		dst = append(dst, m.arena.usage)
	}
	for _, p := range m.pools {
		dst = append(dst, p.base().usage)
	}
	return append(dst, m.persistent.usage)
}

// Spills counts, since the last Install, the ways the run departed from its
// layout's plan: a reservation that did not land in the first pool
// accepting its size (a full capped pool spilled to the next one, or the
// arena plan missed), a page a forecast pool took past its cap, a growth of
// a virtual pool past its planned bytes, and the reservation at which a run
// left a virtual plan's stream. One reservation can count twice: one that
// leaves the plan's stream and grows the pool past it.
func (m *Manager) Spills() uint64 { return m.spills }

// dynamicUsage is the usage of the dynamic pools alone.
func (m *Manager) dynamicUsage() Usage {
	u := m.total
	p := m.persistent.usage
	u.NumberAllocs -= p.NumberAllocs
	u.BytesInUse -= p.BytesInUse
	u.BytesPadding -= p.BytesPadding
	u.BytesReserved -= p.BytesReserved
	return u
}

// Install rebuilds the dynamic pools with layout l and resets their marks,
// spills and the arena's reservation count. An unusable layout is
// InvalidLayout, and while dynamic reservations are live it refuses with
// PoolsInUse; either changes nothing. Otherwise it cleans the dynamic
// pools up and rebuilds them. The
// persistent pool is untouched: not cleaned, not rebuilt, its marks kept.
func (m *Manager) Install(l Layout) error {
	resolved, err := m.check(l)
	if err != nil {
		return err
	}
	if d := m.dynamicUsage(); d.NumberAllocs != 0 {
		return &InstallError{Kind: PoolsInUse, BytesInUse: d.BytesInUse, AllocsInUse: d.NumberAllocs}
	}
	m.cleanupDynamic(true)
	m.storage.Flush()
	// Every dynamic page is free and explicit cleanup returned them all.
	m.build(l, resolved)
	if invariantsEnabled {
		m.mustHoldInvariants("Install")
	}
	return nil
}

// Check is the InvalidLayout error Install would give l on this manager's
// storage, or nil, and changes nothing: Layout.Validate's checks and those
// that need the storage (pages past its largest allocation, a Virtual
// plan's places past its sparse address space). A layout kept for pools
// built later on the same storage is checked so.
func (m *Manager) Check(l Layout) error {
	_, err := m.check(l)
	return err
}

func (m *Manager) check(l Layout) (resolvedLayout, error) {
	if !m.built() {
		return resolvedLayout{}, fmt.Errorf("%w: install %s", ErrNotBuilt, l.Brief())
	}
	resolved, ierr := l.resolve(m.props, m.backendLimit)
	if ierr != nil {
		return resolvedLayout{}, ierr
	}
	return resolved, m.checkAddressSpace(resolved)
}

// Cleanup returns memory the pools hold for reuse. Explicit cleanup returns
// every page with nothing live in it (sliced pages, exclusive pages, arena
// pages, cached direct and persistent allocations); an implicit one only
// what a pool's own policy gives back (exclusive pages idle for a period,
// direct allocations past the watermark). Where the device panics in it,
// what went back before the panic is gone and the rest held as it was.
func (m *Manager) Cleanup(explicit bool) {
	if !m.built() {
		return
	}
	m.cleanupDynamic(explicit)
	m.persistent.cleanup(explicit)
	m.storage.Flush()
	if invariantsEnabled {
		m.mustHoldInvariants("Cleanup")
	}
}

func (m *Manager) cleanupDynamic(explicit bool) {
	if m.arena != nil {
		m.arena.cleanup(explicit)
	}
	for _, p := range m.pools {
		p.cleanup(explicit)
	}
}

// BeginPersistent opens a persistent window: reservations until the matching
// EndPersistent go to the persistent pool. Windows nest.
func (m *Manager) BeginPersistent() { m.window++ }

// EndPersistent closes the innermost persistent window; with none open it
// does nothing.
func (m *Manager) EndPersistent() {
	if m.window > 0 {
		m.window--
	}
}

// InPersistent reports whether a persistent window is open.
func (m *Manager) InPersistent() bool { return m.window > 0 }

// checkInvariants verifies every pool's structure and that the manager's
// totals and reservations agree with them.
func (m *Manager) checkInvariants() error {
	var sum Usage
	for _, p := range m.all {
		if p == nil {
			continue
		}
		if err := p.checkInvariants(); err != nil {
			return err
		}
		sum = sum.Combine(p.base().usage)
	}
	if sum != m.total {
		return fmt.Errorf("manager: pools sum to %+v, the total says %+v", sum, m.total)
	}
	var live, requested uint64
	for i := range m.reservations {
		r := &m.reservations[i]
		if !r.live {
			continue
		}
		live++
		requested += r.requested
		_, off, size := m.poolOf(r).locate(r.ref)
		if off%m.props.Alignment != 0 || size%m.props.Alignment != 0 || size < r.requested {
			return fmt.Errorf("manager: reservation %d of %d B sits at %d with %d B", i, r.requested, off, size)
		}
	}
	if live != m.total.NumberAllocs || requested != m.total.BytesInUse {
		return fmt.Errorf("manager: %d live reservations of %d B, usage says %d of %d B", live, requested, m.total.NumberAllocs, m.total.BytesInUse)
	}
	return nil
}

// invariantCheckSpread is how many live reservations one operation's share
// of a full check may walk: with more live than that, the full check runs
// every live/invariantCheckSpread operations instead of after each one.
// The check walks every reservation, so checking after every operation made
// a guest freeing 100,000 buffers quadratic (hours under the race
// detector); spread out, it costs O(invariantCheckSpread) an operation and
// a broken structure is still caught, a bounded number of operations later.
// Managers with fewer live reservations, which is every unit test and fuzz
// input, are checked after every operation.
const invariantCheckSpread = 64

func (m *Manager) mustHoldInvariants(op string) {
	m.uncheckedOps++
	if m.uncheckedOps < m.total.NumberAllocs/invariantCheckSpread {
		return
	}
	m.uncheckedOps = 0
	if err := m.checkInvariants(); err != nil {
		panic(fmt.Sprintf("memory: invariant broken after %s: %v", op, err))
	}
}
