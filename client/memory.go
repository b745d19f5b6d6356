package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/runtime/environment"
)

// MemoryUsage is the memory usage of every stream together.
func (c *Client) MemoryUsage(ctx context.Context) memory.Usage {
	var u memory.Usage
	for _, s := range c.Streams() {
		u = u.Combine(s.Usage())
	}
	return u
}

// MemoryReport is the calling stream's pools now. Where the context names a
// stream of another client there is no calling stream to report on, and
// the report is the zero one, not the default stream's; CallingStream
// says why.
func (c *Client) MemoryReport(ctx context.Context) memory.Report {
	s, err := c.CallingStream(ctx)
	if err != nil {
		return memory.Report{}
	}
	return s.Report()
}

// MemoryCleanup returns the device memory of every stream's fully free
// pages and cached allocations to the driver.
func (c *Client) MemoryCleanup(ctx context.Context) { c.cleanup() }

// cleanup cleans every stream's pools up; a nil client has none
// (Streams).
func (c *Client) cleanup() {
	for _, s := range c.Streams() {
		s.MemoryCleanup()
	}
}

// MemoryCleanup returns the device memory of this stream's fully free pages
// and cached allocations to the driver, leaving other streams' pools as
// they are (Client.MemoryCleanup cleans them all). A closed stream has
// nothing left to return.
func (s *Stream) MemoryCleanup() {
	if s.isNil() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		// Flushed under the stream's lock, not after: a Close of the
		// client waits for that lock before it closes the device.
		s.mgr.Cleanup(true)
		s.c.storage.Flush()
	}
}

// Persistent runs fn with the calling stream in a persistent window: what fn
// allocates on it (weights, caches) goes to the persistent pool, which
// InstallMemoryPools leaves alone. Windows nest; other work on the same
// stream meanwhile is inside the window too. A nil fn is refused with
// ErrNilFunction, opening no window. Where fn returns nil but closed the
// window itself (Stream.EndPersistent), leaving none for Persistent to
// close, Persistent returns ErrNoPersistentWindow.
func (c *Client) Persistent(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if c.isNil() {
		return ErrNil
	}
	if fn == nil {
		// It would be called inside the window, a nil function's panic.
		return fmt.Errorf("%w: Persistent was given none to run in the window", ErrNilFunction)
	}
	s, err := c.CallingStream(ctx)
	if err != nil {
		return err
	}
	if err := s.BeginPersistent(); err != nil {
		return err
	}
	defer func() {
		if end := s.EndPersistent(); err == nil && errors.Is(end, ErrNoPersistentWindow) {
			err = end
		}
	}()
	return fn(WithStream(ctx, s))
}

// InstallMemoryPools rebuilds the calling stream's dynamic pools with layout
// l, which also becomes the layout of streams created afterwards. The
// pools' refusals say "client: stream N: installing layout …" and wrap a
// *memory.InstallError (errors.As): InvalidLayout (nothing changes),
// PoolsInUse (the stream still holds live dynamic buffers; its old layout
// is kept, and so is the client's), StreamUnavailable (the stream is in an
// error state; l still applies to new streams) or Unsupported; a closed
// calling stream is ErrClosed and one of another client ErrForeignStream,
// and neither changes the client's layout.
func (c *Client) InstallMemoryPools(ctx context.Context, l memory.Layout) error {
	s, err := c.CallingStream(ctx)
	if err != nil {
		return err
	}
	_, err = c.installOn(s, l)
	return err
}

// installOn installs l on s and keeps it for new streams, as
// Client.InstallMemoryPools does, and returns how many layouts s had had
// installed once l was, read under the same lock: MeasurePlan tells from
// it an install another caller made before its real run.
func (c *Client) installOn(s *Stream, l memory.Layout) (uint64, error) {
	installs, err := s.install(l)
	var ie *memory.InstallError
	if err == nil || errors.As(err, &ie) && ie.Kind == memory.StreamUnavailable {
		c.setLayout(l)
	}
	return installs, err
}

// InstallMemoryPools rebuilds the stream's dynamic pools with layout l and
// leaves the layout of other streams, and of streams created afterwards,
// alone: what a sandboxed user of one stream may do. Errors are as
// Client.InstallMemoryPools gives them.
func (s *Stream) InstallMemoryPools(l memory.Layout) error {
	_, err := s.install(l)
	return err
}

// install is InstallMemoryPools, returning how many layouts the stream had
// had installed once l was (s.installs, read under the lock that counted
// l's install).
func (s *Stream) install(l memory.Layout) (installs uint64, err error) {
	if s.isNil() {
		return 0, ErrNil
	}
	// A closed stream is said to be closed, whatever the layout.
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, s.closedError()
	}
	if err := l.Validate(s.c.props); err != nil {
		return 0, s.installRefused(l, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, s.closedError()
	}
	if s.failed != nil {
		// The client keeps l for its new streams: one they could not be
		// built with is refused as a healthy stream refuses it.
		if err := s.mgr.Check(l); err != nil {
			return 0, s.installRefused(l, err)
		}
		return 0, s.installRefused(l, &memory.InstallError{Kind: memory.StreamUnavailable})
	}
	if err := s.mgr.Install(l); err != nil {
		return 0, s.installRefused(l, err)
	}
	s.layout = l
	s.installs++
	// Install cleaned the old pools up; hand their pages to the driver now.
	s.c.storage.Flush()
	return s.installs, nil
}

// installRefused is err, the pools' refusal to install l on s, in the
// client's words ("client: stream 1: installing layout …: …"): errors.Is
// and errors.As still find the pools' *memory.InstallError.
func (s *Stream) installRefused(l memory.Layout, err error) error {
	return prefixed(err, "stream %d: installing layout %s", s.id, l.Brief())
}

// BeginPersistent opens a persistent window on the stream: what it
// allocates until the matching EndPersistent goes to the persistent pool.
// Windows nest. Client.Persistent is the scoped form.
func (s *Stream) BeginPersistent() error {
	if s.isNil() {
		return ErrNil
	}
	return s.locked(func() error { s.mgr.BeginPersistent(); return nil })
}

// ErrNoPersistentWindow: EndPersistent was called on a stream with no
// persistent window open: one more than BeginPersistent opened, or after
// another caller closed the window. Nothing changes.
var ErrNoPersistentWindow = errors.New("client: no persistent window is open")

// EndPersistent closes the innermost persistent window BeginPersistent
// opened. With none open it changes nothing and returns
// ErrNoPersistentWindow (an EndPersistent too many went unnoticed, and the
// caller's windows were not the stream's); on a closed stream it returns
// ErrClosed, whose windows went with its pools. A stream in an error state
// still closes its windows: they hold no device memory.
func (s *Stream) EndPersistent() error {
	if s.isNil() {
		return ErrNil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedError()
	}
	if !s.mgr.InPersistent() {
		return fmt.Errorf("%w (stream %d): EndPersistent without a BeginPersistent to match", ErrNoPersistentWindow, s.id)
	}
	s.mgr.EndPersistent()
	return nil
}

func (c *Client) setLayout(l memory.Layout) {
	c.mu.Lock()
	c.layout = l
	c.mu.Unlock()
}

// MemoryRecord is a memory.Record as an environment stores it (kind
// "memory"): the JSON body is the record's own, {"label":…,"report":…}.
type MemoryRecord struct {
	memory.Record
}

// Kind is environment.KindMemory.
func (MemoryRecord) Kind() string { return environment.KindMemory }

// RecordMemory snapshots the calling stream's report under label into the
// client's environment. A closed calling stream (ErrClosed) or one of
// another client (ErrForeignStream) records nothing: a record of pools the
// caller did not mean would mislead the plans made from it. Where the
// environment's file was removed or replaced since the client opened it,
// the record fails with environment.ErrReplaced, and the next one opens the
// file now at its path (an environment given with UseEnvironment is the
// caller's to open again).
func (c *Client) RecordMemory(ctx context.Context, label string) (environment.Entry, error) {
	s, err := c.CallingStream(ctx)
	if err != nil {
		return environment.Entry{}, err
	}
	// The stream and the label are checked before the environment is
	// opened: a refused record leaves no default environment behind.
	if err := environment.CheckLabel(label); err != nil {
		return environment.Entry{}, prefixed(err, "recording memory")
	}
	report, err := s.openReport()
	if err != nil {
		return environment.Entry{}, err
	}
	c.recording.RLock()
	env, err := c.environment(ctx)
	if err != nil {
		c.recording.RUnlock()
		return environment.Entry{}, err
	}
	rec := MemoryRecord{memory.Record{Label: label, Report: report}}
	ent, err := env.Put(ctx, label, rec)
	c.recording.RUnlock()
	if err != nil {
		if errors.Is(err, environment.ErrReplaced) {
			c.forgetReplaced(env)
		}
		return environment.Entry{}, prefixed(err, "recording memory")
	}
	return ent, nil
}

// openReport is the stream's report, refused once the stream is closed.
func (s *Stream) openReport() (memory.Report, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return memory.Report{}, s.closedError()
	}
	return s.mgr.Report(), nil
}

// MemoryRecords reads the memory records q selects from env, all at once.
func MemoryRecords(ctx context.Context, env *environment.Env, q environment.Query) ([]environment.Typed[MemoryRecord], error) {
	return environment.QueryAs[MemoryRecord](ctx, env, q)
}

// EachMemoryRecord calls fn with each memory record q selects from env,
// oldest first, read a page at a time (environment.EachAs): an
// environment of many records is listed in the memory of a page.
func EachMemoryRecord(ctx context.Context, env *environment.Env, q environment.Query, fn func(environment.Typed[MemoryRecord]) error) error {
	return environment.EachAs(ctx, env, q, fn)
}

// LiveAllocation is one live buffer, as an allocation error lists them.
type LiveAllocation struct {
	Buffer uint64
	Stream vkruntime.StreamID
	Size   uint64
}

// topAllocations is how many live buffers an allocation error names.
const topAllocations = 5

// AllocationError is an allocation the device or the pools refused even
// after a cleanup: the size asked, the largest live buffers of every stream,
// the calling stream's pools and its installed layout. It unwraps to the
// refusal (ErrOutOfDeviceMemory or ErrPoolCapacityExceeded under errors.Is).
type AllocationError struct {
	Size    uint64
	Stream  vkruntime.StreamID
	Largest []LiveAllocation
	Pools   memory.Report
	Layout  memory.Layout
	Err     error
}

func (e *AllocationError) Error() string {
	var b strings.Builder
	u := e.Pools.Usage()
	fmt.Fprintf(&b, "client: stream %d: %d B (%s) could not be allocated after a cleanup; the stream's pools hold %s reserved, %s in %s, under layout %s",
		e.Stream, e.Size, memory.FormatBytes(e.Size), memory.FormatBytes(u.BytesReserved), memory.FormatBytes(u.BytesInUse), liveAllocations(u.NumberAllocs), e.Layout.Brief())
	if len(e.Largest) > 0 {
		b.WriteString("; largest live buffers:")
		for i, a := range e.Largest {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s buffer %d on stream %d (%s)", sep, a.Buffer, a.Stream, memory.FormatBytes(a.Size))
		}
	}
	// The refusal names the stream and the size this message already says.
	cause := strings.TrimPrefix(fmt.Sprint(e.Err), fmt.Sprintf("client: stream %d: ", e.Stream))
	cause = strings.TrimPrefix(cause, fmt.Sprintf("buffer of %d B: ", e.Size))
	fmt.Fprintf(&b, ": %s", cause)
	return b.String()
}

func (e *AllocationError) Unwrap() error { return e.Err }

// liveAllocations is n live allocations in words, as an allocation error
// counts them: "1 live allocation", "2 live allocations".
func liveAllocations(n uint64) string {
	if n == 1 {
		return "1 live allocation"
	}
	return fmt.Sprintf("%d live allocations", n)
}

func (c *Client) allocationError(s *Stream, size uint64, err error) error {
	var live []LiveAllocation
	for _, t := range c.Streams() {
		t.mu.Lock()
		for _, b := range t.live {
			live = append(live, LiveAllocation{Buffer: b.id, Stream: t.id, Size: b.size})
		}
		t.mu.Unlock()
	}
	slices.SortFunc(live, func(a, b LiveAllocation) int {
		if a.Size != b.Size {
			return -cmp.Compare(a.Size, b.Size)
		}
		return cmp.Compare(a.Buffer, b.Buffer)
	})
	s.mu.Lock()
	report, layout := s.mgr.Report(), s.layout
	s.mu.Unlock()
	return &AllocationError{Size: size, Stream: s.id, Largest: live[:min(len(live), topAllocations)], Pools: report, Layout: layout, Err: err}
}
