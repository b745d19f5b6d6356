package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/runtime/environment"
)

// ErrClosed: the client or stream was used after Close. Where the client
// itself is closed, and with it its device, the error matches
// runtime.ErrClosed too; a stream closed on its own leaves the client and
// device open, so its errors match ErrClosed only.
var ErrClosed = errors.New("client: closed")

// ErrNilContext: a nil context.Context was passed where a call takes one
// (it panicked inside the call); context.Background() stands for none.
var ErrNilContext = errors.New("client: nil context (pass context.Background() for none)")

// ctxErr is ctx.Err(), or ErrNilContext for a nil ctx.
func ctxErr(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	return ctx.Err()
}

// ErrInvalidOption: Open was given an option it cannot follow, such as a
// nil Option, a nil, closed or read-only environment (UseEnvironment), an
// environment name or options the environment refuses (WithEnvironment), a
// layout the device cannot honour (WithLayout), a memory limit no buffer
// fits under (WithMemoryLimit, *MemoryLimitError) or a nil device
// (WithBackend).
var ErrInvalidOption = errors.New("client: invalid option")

// ErrNilFunction: Persistent was given a nil function, or MeasurePlan a
// nil workload, which the call would have called inside its window or dry
// run (and panicked there); nothing is opened or measured.
var ErrNilFunction = errors.New("client: nil function")

// ErrNil: a method was called on a nil *Client or *Stream, or on a zero
// one, which neither Open nor NewStream makes: it has no device to act on.
// Such a method returns ErrNil where it returns an error, and otherwise its
// zero value (Stream.Closed says true), rather than dereferencing nil.
var ErrNil = errors.New("client: a nil or zero Client or Stream, not made by Open or NewStream")

// isNil says whether c is no client: nil, or zero (Open sets dev).
func (c *Client) isNil() bool { return c == nil || c.dev == nil }

// errClientClosed is ErrClosed for a closed client: the same words, also
// matching runtime.ErrClosed, the class of a closed device on every backend.
var errClientClosed error = clientClosedError{}

type clientClosedError struct{}

func (clientClosedError) Error() string { return ErrClosed.Error() }

// Is makes the error match ErrClosed and runtime.ErrClosed.
func (clientClosedError) Is(target error) bool {
	return target == ErrClosed || target == vkruntime.ErrClosed
}

// prefixedError is err of a part of the client named by where ("stream 1",
// "new stream"): its message says "client: " once, where each level's own
// prefix stacked up ("client: stream 1: client: closed").
type prefixedError struct {
	where string
	err   error
}

func prefixed(err error, format string, args ...any) error {
	return &prefixedError{where: fmt.Sprintf(format, args...), err: err}
}

func (e *prefixedError) Error() string {
	return "client: " + e.where + ": " + strings.TrimPrefix(e.err.Error(), "client: ")
}

func (e *prefixedError) Unwrap() error { return e.err }

// closedByError is an error of a call Close ended: it matches ErrClosed and
// runtime.ErrClosed as well as the call's own error, and says "client: "
// once.
type closedByError struct{ err error }

func (e *closedByError) Error() string {
	return ErrClosed.Error() + ": " + strings.TrimPrefix(e.err.Error(), "client: ")
}

func (e *closedByError) Unwrap() []error { return []error{errClientClosed, e.err} }

type config struct {
	logger  *slog.Logger
	device  device.Config
	backend device.Device
	// backendSet: WithBackend was given, with backend even if nil.
	backendSet bool
	// handed is every device WithBackend was given, in order: the client
	// owns each, the ones a later WithBackend replaced too.
	handed []device.Device
	// deviceSet: WithDevice or WithValidation configured the default device,
	// which a handed backend would silently ignore.
	deviceSet bool
	layout    memory.Layout
	envName   string
	envNamed  bool // WithEnvironment was given, with envName even if empty
	envOpts   []environment.Option
	env       *environment.Env
	// envUsed: UseEnvironment was given, with env even if nil.
	envUsed bool
}

// Option configures Open. Every constructor of the module (client.Open,
// vk.Open, cpu.New, environment.Open) takes options the same way: a function
// from the configuration to the configuration, by value, so an option has
// no effect until the constructor applies it, an option value can be kept
// and reused, and the constructor checks the finished configuration as a
// whole (an invalid value is an error of Open, not of building the option).
// Settings of one call that is not a constructor (MeasureOptions, the
// planner's and the replay's) are plain structs whose zero value is the
// default instead: they are arguments, not a configuration kept.
type Option func(config) config

// WithBackend makes the client run on d, any device.Device (the pure-Go
// device/cpu one, a Vulkan device opened with vk.Open, a test's own),
// instead of opening the default device. Open takes d over whatever
// follows: the client owns it from then on, Close closes it, and so does a
// failed Open; where a later WithBackend replaces d, Open closes d, which
// the client never runs on. A nil d, or a nil pointer such as a nil
// *cpu.Device, fails Open (ErrInvalidOption), which closes the devices
// given before it, and so does WithDevice or WithValidation given with it.
func WithBackend(d device.Device) Option {
	return func(c config) config {
		c.backend, c.backendSet = d, true
		c.handed = append(slices.Clip(c.handed), d)
		return c
	}
}

// WithDevice opens the default backend's device at index (for Vulkan, in
// the order vk.Devices lists them) instead of the first.
func WithDevice(index int) Option {
	return func(c config) config { c.device.Index, c.deviceSet = index, true; return c }
}

// WithLayout is the pool layout of the default stream and of streams created
// before another is installed. The default is
// memory.VirtualLayout(memory.VirtualPlan{}), which needs no plan: on a
// device with sparse residency one virtual range whose granules are bound
// to device memory under live buffers only, on one without (lavapipe, the
// cpu device unless made with a sparse granule) the SubSlices pools. It
// stays the layout MeasurePlan measures under unless told another. A
// layout the device cannot honour fails Open with an error matching
// ErrInvalidOption as well as the pools' *memory.InstallError.
func WithLayout(l memory.Layout) Option {
	return func(c config) config { c.layout = l; return c }
}

// WithMemoryLimit caps the device memory the client's storage holds at
// once; 0 means no cap beyond the heap. The default device enforces it
// itself; on a device handed with WithBackend the client counts what its
// pools hold and refuses past the cap the same way, with a
// *runtime.OutOfMemoryError. A cap below the device's alignment (256 B on
// the cpu device), which not even a buffer of 1 B fits under, fails Open
// with a *MemoryLimitError (ErrInvalidOption).
func WithMemoryLimit(bytes uint64) Option {
	return func(c config) config { c.device.MemoryLimit = bytes; return c }
}

// MemoryLimitError is ErrInvalidOption with the numbers: WithMemoryLimit
// capped the storage of device Device at Limit bytes, less than the
// Alignment bytes the device aligns slices to. Every buffer takes at
// least one slice, so no buffer could ever be allocated; the least cap
// that allows one is Alignment.
type MemoryLimitError struct {
	Device           string
	Limit, Alignment uint64
}

func (e *MemoryLimitError) Error() string {
	return fmt.Sprintf("client: invalid option: WithMemoryLimit(%d): device %s aligns slices to %d B, so not even a buffer of 1 B fits under %d B; give at least %d B, or 0 for no cap",
		e.Limit, e.Device, e.Alignment, e.Limit, e.Alignment)
}

// Is makes a *MemoryLimitError match ErrInvalidOption.
func (e *MemoryLimitError) Is(target error) bool { return target == ErrInvalidOption }

// WithLogger is where the pools warn that a capped pool spilled (the plan
// was short); the default is slog.Default.
func WithLogger(l *slog.Logger) Option {
	return func(c config) config { c.logger = l; return c }
}

// WithValidation turns the default device's own checking on (for Vulkan,
// the Khronos validation layer): every misuse becomes an error of the call
// that caused it.
func WithValidation(on bool) Option {
	return func(c config) config { c.device.Validation, c.deviceSet = on, true; return c }
}

// WithEnvironment makes the environment name (opened with opts) the one
// RecordMemory writes to; Open opens it. An invalid name, the empty one
// too, and opts the environment refuses (a nil one, an empty WithDir) fail
// Open with an error matching ErrInvalidOption as well as the
// environment's (environment.ErrInvalidName, ErrInvalidOption); so do opts
// holding environment.ReadOnly: every record would fail. Without this option or UseEnvironment, the
// environment environment.DefaultName is opened at the first record.
func WithEnvironment(name string, opts ...environment.Option) Option {
	return func(c config) config {
		c.envName, c.envOpts, c.env, c.envNamed, c.envUsed = name, slices.Clone(opts), nil, true, false
		return c
	}
}

// UseEnvironment makes an already open environment the one RecordMemory
// writes to. The client does not close it. A nil env fails Open with an
// error matching ErrInvalidOption: the records would have gone to the
// default environment, where the caller did not ask them to go (leave the
// option out for that). So does a zero, closed or read-only env (opened
// with environment.ReadOnly), which every record would fail in.
func UseEnvironment(env *environment.Env) Option {
	return func(c config) config {
		c.env, c.envName, c.envOpts, c.envNamed, c.envUsed = env, "", nil, false, true
		return c
	}
}

// Client is one device, its streams and their pools. It is safe for
// concurrent use.
type Client struct {
	dev     device.Device
	storage *clientStorage // the device's, counted and held to the limit
	props   vkruntime.DeviceProperties
	// opened is the layout Open was given (WithLayout), which MeasurePlan
	// measures under by default; plans installed since do not change it.
	opened memory.Layout

	// mu guards the fields below. It is never held while a stream's lock is
	// taken, so streams can take it under theirs.
	mu      sync.Mutex
	streams map[vkruntime.StreamID]*Stream
	nextID  vkruntime.StreamID
	layout  memory.Layout // for streams created from now on
	def     *Stream
	env     *environment.Env
	ownsEnv bool
	envName string
	envOpts []environment.Option
	closed  atomic.Bool // set under mu; read without it by streams
	logger  *slog.Logger

	// recording is held shared by RecordMemory from finding the environment
	// to its write, and alone by Close before it closes the environment it
	// opened (and by forgetReplaced before it closes one whose file went):
	// a record in flight finishes, and one after sees ErrClosed (or the
	// environment opened again), instead of writing to a closed database.
	recording sync.RWMutex
	// envOpening is held while the environment is opened (see environment).
	envOpening sync.Mutex

	bufferID atomic.Uint64 // the last buffer id handed out; not under mu

	// warnLayout warns once a client of what a layout asks past the
	// device: every stream built with the layout would say it again.
	warnLayout func(memory.Layout, string)

	// done is closed once Close has closed the device: a second Close
	// waits for it.
	done chan struct{}
	// ending ends when Close begins, and with it every transfer and launch
	// in flight on the client's streams (see callContext): Close waits for
	// each stream's lock, which a launch holds until it returns, so a long
	// one held Close for as long as it ran.
	ending   context.Context
	endCalls context.CancelFunc
}

// Open opens a client with a default stream on the device WithBackend
// hands it, else on the default device of the backend linked into the
// program: with the Vulkan backend (import _ "github.com/vkrt/vkrt/vk"),
// the first Vulkan device unless WithDevice says otherwise, lavapipe where
// there is no GPU. Without a backend it fails with device.ErrNoBackend.
// A nil Option among opts fails it with ErrInvalidOption, and closes every
// device WithBackend handed it, as any failed Open does.
func Open(ctx context.Context, opts ...Option) (*Client, error) {
	c := config{layout: memory.VirtualLayout(memory.VirtualPlan{})}
	nilAt := 0 // the first nil option, counted from 1
	for i, o := range opts {
		if o == nil {
			// Calling it panicked. The options after it are applied
			// still, so that every device handed is closed.
			if nilAt == 0 {
				nilAt = i + 1
			}
			continue
		}
		c = o(c)
	}
	c.closeReplaced()
	if err := c.refusal(ctx, nilAt, len(opts)); err != nil {
		if c.backend != nil {
			closeUnused(c.backend) // the client's from WithBackend on
		}
		return nil, err
	}
	dev, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	var limit uint64 // the default device enforces its own
	if c.backend != nil {
		limit = c.device.MemoryLimit
	}
	storage := newClientStorage(dev.Storage(), limit, dev.Properties().MemorySize)
	props := dev.Properties()
	if limit := storage.Limit(); limit > 0 && limit < props.MemorySize {
		// The pools can never hold more than the limit: size the presets'
		// pages by it, not by the heap.
		props.MemorySize = limit
	}
	if err := checkProperties(dev.Name(), props); err != nil {
		dev.Close()
		return nil, err
	}
	if limit := c.device.MemoryLimit; limit > 0 && limit < props.Alignment {
		// Every buffer takes a slice of at least the alignment: Open
		// succeeded, and every allocation failed.
		dev.Close()
		return nil, &MemoryLimitError{Device: dev.Name(), Limit: limit, Alignment: props.Alignment}
	}
	if err := c.layout.Validate(props); err != nil {
		dev.Close()
		return nil, &invalidOptionError{fmt.Errorf("initial layout %s: %w", c.layout.Brief(), err)}
	}
	cl := &Client{
		dev: dev, storage: storage, props: props, streams: map[vkruntime.StreamID]*Stream{}, layout: c.layout, opened: c.layout, done: make(chan struct{}),
		env: c.env, envName: c.envName, envOpts: c.envOpts, logger: c.logger,
	}
	cl.warnLayout = memory.LayoutWarningsOnce(func() *slog.Logger { return cl.logger })
	cl.ending, cl.endCalls = context.WithCancel(context.Background())
	if c.envNamed { // an empty name too, which Open refuses
		env, err := environment.OpenContext(ctx, c.envName, c.envOpts...)
		if err != nil {
			dev.Close()
			if errors.Is(err, environment.ErrInvalidName) || errors.Is(err, environment.ErrInvalidOption) {
				// WithEnvironment's name or options: the client's option.
				return nil, &invalidOptionError{err}
			}
			return nil, fmt.Errorf("client: %w", err)
		}
		if env.ReadOnly() {
			env.Close()
			dev.Close()
			return nil, readOnlyEnvironment("WithEnvironment", env)
		}
		cl.env, cl.ownsEnv = env, true
	}
	def, err := cl.NewStream()
	if err != nil {
		cl.Close()
		// A layout the storage refuses (a page past its largest
		// allocation) is refused by the default stream's pools: it is
		// still the initial layout, not that of a stream the caller made.
		var ie *memory.InstallError
		if errors.As(err, &ie) {
			return nil, &invalidOptionError{fmt.Errorf("initial layout %s: %w", c.layout.Brief(), ie)}
		}
		return nil, err
	}
	cl.def = def
	return cl, nil
}

// ErrUnsupportedDevice: Open was given a device whose properties the
// client cannot run on: slices aligned to other than a power of two of
// whole 32-bit words (*AlignmentError), or a largest page the alignment
// does not divide. Open closes the device.
var ErrUnsupportedDevice = errors.New("client: unsupported device")

// AlignmentError is ErrUnsupportedDevice with the numbers: device Device
// aligns slices to Alignment bytes, which is no power of two (0 included)
// or less than 4 B. The pools split pages by the alignment, which must be
// a power of two, and buffers are cleared with 32-bit fills of their whole
// slices.
type AlignmentError struct {
	Device    string
	Alignment uint64
}

func (e *AlignmentError) Error() string {
	return fmt.Sprintf("client: device %s aligns slices to %d B; the client needs a power of two of whole 32-bit words (4 B, 8 B, …)", e.Device, e.Alignment)
}

// Is makes an *AlignmentError match ErrUnsupportedDevice.
func (e *AlignmentError) Is(target error) bool { return target == ErrUnsupportedDevice }

// checkProperties refuses the properties of a device the client cannot run
// on (ErrUnsupportedDevice); they were refused later, as the initial
// layout's fault (ErrInvalidOption), where not in words of no kind.
func checkProperties(name string, p vkruntime.DeviceProperties) error {
	if a := p.Alignment; a < 4 || a&(a-1) != 0 {
		return &AlignmentError{Device: name, Alignment: a}
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: device %s: %w", ErrUnsupportedDevice, name, err)
	}
	return nil
}

// refusal is Open's refusal of what it was given, before a device is
// opened: a nil ctx, a nil option (the nilAt-th of the n given, counted
// from 1), or an environment given with UseEnvironment that no record can
// go to (nil, zero, closed or read-only); nil where it takes them.
func (c config) refusal(ctx context.Context, nilAt, n int) error {
	switch {
	case ctx == nil:
		return ErrNilContext
	case nilAt > 0:
		return fmt.Errorf("%w: option %d of the %d given to Open is nil", ErrInvalidOption, nilAt, n)
	case !c.envUsed:
		return nil
	case c.env == nil:
		return fmt.Errorf("%w: UseEnvironment was given no environment (nil); open one with environment.Open, "+
			"or leave the option out to record into the default environment", ErrInvalidOption)
	case c.env.Name() == "":
		return fmt.Errorf("%w: UseEnvironment was given a zero environment.Env, which environment.Open never returns", ErrInvalidOption)
	case c.env.Closed():
		return fmt.Errorf("%w: UseEnvironment was given environment %q, which is closed", ErrInvalidOption, c.env.Name())
	case c.env.ReadOnly():
		return readOnlyEnvironment("UseEnvironment", c.env)
	}
	return nil
}

// invalidOptionError is a refusal of an option's value by what it
// configures (the environment's of WithEnvironment's name or options, the
// pools' of WithLayout's layout): it matches ErrInvalidOption as well as
// err's own kind, and says "client: " once.
type invalidOptionError struct{ err error }

func (e *invalidOptionError) Error() string {
	return "client: " + strings.TrimPrefix(e.err.Error(), "client: ")
}

func (e *invalidOptionError) Unwrap() []error { return []error{ErrInvalidOption, e.err} }

// readOnlyEnvironment is Open's refusal of env, opened read-only, given by
// option: RecordMemory failed in it, every time, with ErrReadOnly.
func readOnlyEnvironment(option string, env *environment.Env) error {
	return fmt.Errorf("%w: %s was given environment %q opened read-only, which RecordMemory cannot write to",
		ErrInvalidOption, option, env.Name())
}

// closeReplaced closes the devices WithBackend was given that the client
// will not run on: those a later WithBackend replaced, each once. They are
// the client's as the last one is, and nobody else closes them.
func (c config) closeReplaced() {
	for i, d := range c.handed {
		if d == nil || sameDevice(d, c.backend) || slices.ContainsFunc(c.handed[:i], func(e device.Device) bool { return sameDevice(d, e) }) {
			continue
		}
		closeUnused(d)
	}
}

// closeUnused closes a device the client never used; nothing of it is
// worth an error of Open, nor a panic: a typed nil (a nil *cpu.Device
// given, then replaced) panicked in its Close where Open had run on the
// device that replaced it.
func closeUnused(d device.Device) {
	defer func() { _ = recover() }()
	_ = d.Close()
}

// isNilPointer says whether d is a nil pointer (or map, slice, function,
// channel) in a non-nil interface: no device, whose methods panic.
func isNilPointer(d device.Device) bool {
	if d == nil {
		return false
	}
	switch v := reflect.ValueOf(d); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// sameDevice says whether a and b are one device. Devices whose type ==
// cannot compare (a struct holding a slice) panic there; such a pair is
// taken for one device, so that none the client runs on is closed.
func sameDevice(a, b device.Device) (same bool) {
	defer func() {
		if recover() != nil {
			same = true
		}
	}()
	return a == b
}

// open opens the device the configuration names.
func (c config) open(ctx context.Context) (device.Device, error) {
	if c.backendSet && c.backend == nil {
		// Opening the default device instead ran the client on a device
		// nobody asked for.
		return nil, fmt.Errorf("%w: WithBackend was given no device (nil)", ErrInvalidOption)
	}
	if isNilPointer(c.backend) {
		// A nil *cpu.Device: Open panicked asking it its storage.
		return nil, fmt.Errorf("%w: WithBackend was given a nil %T", ErrInvalidOption, c.backend)
	}
	if c.backend != nil {
		if c.deviceSet {
			c.backend.Close()
			return nil, fmt.Errorf("%w: WithDevice and WithValidation configure the default device; the device WithBackend hands is already open", ErrInvalidOption)
		}
		if err := ctx.Err(); err != nil {
			c.backend.Close()
			return nil, err
		}
		return c.backend, nil
	}
	dev, err := device.Open(ctx, c.device)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return dev, nil
}

// Device is the device the client runs on.
func (c *Client) Device() device.Device {
	if c.isNil() {
		return nil
	}
	return c.dev
}

// Storage is the storage the client's pools allocate from: the device's,
// held to the client's memory limit.
func (c *Client) Storage() device.Storage {
	if c.isNil() {
		return nil // not a nil *clientStorage, which is no nil interface
	}
	return c.storage
}

// SparseGranule is the device's sparse binding granule, 0 where it has no
// sparse residency (there the Virtual layout builds the SubSlices pools).
func (c *Client) SparseGranule() uint64 {
	if c.isNil() {
		return 0
	}
	return c.storage.SparseGranule()
}

// Properties are the device facts the pools size themselves by; with a
// memory limit, MemorySize is the limit.
func (c *Client) Properties() vkruntime.DeviceProperties {
	if c.isNil() {
		return vkruntime.DeviceProperties{}
	}
	return c.props
}

// DefaultStream is the stream Client methods use when the context names none.
func (c *Client) DefaultStream() *Stream {
	if c.isNil() {
		return nil
	}
	return c.def
}

// Layout is the pool layout streams created from now on get.
func (c *Client) Layout() memory.Layout {
	if c.isNil() {
		return memory.Layout{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.layout
}

// NewStream makes a stream with pools of the client's current layout.
func (c *Client) NewStream() (*Stream, error) {
	if c.isNil() {
		return nil, ErrNil
	}
	return c.newStream(nil)
}

// newStream makes a stream with pools of layout, or of the client's current
// layout when layout is nil.
func (c *Client) newStream(layout *memory.Layout) (*Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, prefixed(errClientClosed, "new stream")
	}
	l := c.layout
	if layout != nil {
		l = *layout
	}
	mgr, err := memory.NewManager(c.storage, c.props, l, memory.WithLogger(c.logger), memory.WithLayoutWarnings(c.warnLayout))
	if err != nil {
		return nil, fmt.Errorf("client: new stream with layout %s: %w", l.Brief(), err)
	}
	s := &Stream{c: c, id: c.nextID, mgr: mgr, layout: l}
	c.streams[s.id] = s
	c.nextID++
	return s, nil
}

// Streams are the client's open streams, by id.
func (c *Client) Streams() []*Stream {
	if c.isNil() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Stream, 0, len(c.streams))
	for _, s := range c.streams {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Stream) int { return int(a.id) - int(b.id) })
	return out
}

type streamKey struct{}

// WithStream makes s the calling stream of Client methods under ctx; a nil
// s names none, which leaves the default stream calling. A nil ctx gives
// nil, which every call refuses with ErrNilContext, where it panicked
// here.
func WithStream(ctx context.Context, s *Stream) context.Context {
	if ctx == nil {
		return nil
	}
	return context.WithValue(ctx, streamKey{}, s)
}

// ErrForeignStream: a context named, with WithStream, a stream of another
// client as the calling stream of this one. The typed form is
// *ForeignStreamError.
var ErrForeignStream = errors.New("client: stream of another client")

// ForeignStreamError is ErrForeignStream with the numbers: the context named
// stream Stream of another client (whose ids overlap this one's).
type ForeignStreamError struct {
	Stream vkruntime.StreamID
}

// Error names the foreign stream.
func (e *ForeignStreamError) Error() string {
	return fmt.Sprintf("client: the context's stream %d belongs to another client", e.Stream)
}

// Is makes a *ForeignStreamError match ErrForeignStream.
func (e *ForeignStreamError) Is(target error) bool { return target == ErrForeignStream }

// Stream is the calling stream under ctx: the one WithStream put there if it
// belongs to c, else the default stream. It cannot refuse a stream of
// another client, so it passes over one; CallingStream refuses it, and so
// does every Client method that acts on the calling stream.
func (c *Client) Stream(ctx context.Context) *Stream {
	if c.isNil() {
		return nil
	}
	if s, err := c.CallingStream(ctx); err == nil {
		return s
	}
	return c.def
}

// CallingStream is the calling stream under ctx: the one WithStream put
// there, else the default stream. A stream of another client is a
// *ForeignStreamError (ErrForeignStream): acting on this client's default
// stream instead would put the caller's work where it did not ask. A closed
// stream of c is returned, and refuses work with ErrClosed itself.
func (c *Client) CallingStream(ctx context.Context) (*Stream, error) {
	if c.isNil() {
		return nil, ErrNil
	}
	if ctx == nil {
		return nil, ErrNilContext
	}
	s, _ := ctx.Value(streamKey{}).(*Stream)
	switch {
	case s == nil:
		return c.def, nil
	case s.isNil():
		// A zero Stream is no stream, of no client: it was told another
		// client's stream 0.
		return nil, ErrNil
	case s.c != c:
		return nil, &ForeignStreamError{Stream: s.id}
	}
	return s, nil
}

// Close closes every stream and the device, and the environment the client
// opened. Buffers are unusable afterwards. Launches and transfers of 1 MiB
// or more in flight on the client's streams are ended, as their contexts'
// end would end them, and fail with ErrClosed; smaller transfers finish
// first. The device finishes what it already runs before Close returns.
// A second Close returns once the first has, and does nothing else.
func (c *Client) Close() error {
	if c.isNil() {
		return ErrNil
	}
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closed.Store(true)
	defer close(c.done)
	streams := make([]*Stream, 0, len(c.streams))
	for _, s := range c.streams {
		streams = append(streams, s)
	}
	// Streams lists open streams only; from here on every one is closing.
	clear(c.streams)
	env, ownsEnv := c.env, c.ownsEnv
	c.env = nil
	c.mu.Unlock()
	c.endCalls() // the streams' locks come free as their calls end
	var errs []error
	func() {
		// The environment and the device close however the streams'
		// release ends: where the device's Flush or Dealloc panicked in
		// it, both stayed open for good, and a second Close said nil.
		defer func() {
			if ownsEnv && env != nil {
				c.recording.Lock()
				errs = append(errs, env.Close())
				c.recording.Unlock()
			}
			errs = append(errs, c.dev.Close())
		}()
		for _, s := range streams {
			s.release()
		}
	}()
	return errors.Join(errs...)
}

// Closed says whether Close has been called on the client: from its start
// on, the client takes no new work, refusing it with ErrClosed. A nil or
// zero Client, which has no device to act on, says true, as Stream.Closed
// does. It is safe to call concurrently with Close.
func (c *Client) Closed() bool {
	return c.isNil() || c.closed.Load()
}

func (c *Client) nextBufferID() uint64 { return c.bufferID.Add(1) }

// callContext is ctx, ended also when Close begins, for a call that may
// wait long on the device (long: a launch, a transfer of
// closeEndsTransfersFrom bytes or more); done releases it. Such a call
// ended by Close fails as its own context's end would fail it, and
// closedBy says so. A short transfer is left to finish (microseconds):
// the cancellable context costs about 0.9 µs, six times a small
// transfer's whole cost.
func (c *Client) callContext(ctx context.Context, long bool) (context.Context, func()) {
	if !long {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.ending, func() { cancel(errClientClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

// closeEndsTransfersFrom is the smallest transfer Close ends in flight.
const closeEndsTransfersFrom = 1 << 20

// closedBy is err of a call under a callContext, marked as ErrClosed where
// Close is what ended the call.
func closedBy(ctx context.Context, err error) error {
	if err != nil && !errors.Is(err, ErrClosed) && errors.Is(context.Cause(ctx), errClientClosed) {
		return &closedByError{err}
	}
	return err
}

// forgetReplaced drops env, which the client opened and whose file was
// removed or replaced under it, so that the next record opens the file now
// at its path, and closes it once no record is in flight with it (the
// caller holds no part of c.recording).
func (c *Client) forgetReplaced(env *environment.Env) {
	c.mu.Lock()
	mine := c.env == env && c.ownsEnv && !c.closed.Load()
	if mine {
		c.env = nil
	}
	c.mu.Unlock()
	if mine {
		c.recording.Lock()
		env.Close() // its file went: nothing of it is worth an error here
		c.recording.Unlock()
	}
}

// environment is the environment RecordMemory writes to, opening the
// default one the first time. Opening waits for other writers, up to the
// busy timeout: it holds envOpening, not c.mu, which streams being made or
// closed, layouts and Close take.
func (c *Client) environment(ctx context.Context) (*environment.Env, error) {
	c.envOpening.Lock()
	defer c.envOpening.Unlock()
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return nil, prefixed(errClientClosed, "recording")
	}
	if env := c.env; env != nil {
		c.mu.Unlock()
		return env, nil
	}
	name, opts := c.envName, c.envOpts
	c.mu.Unlock()
	if name == "" {
		name = environment.DefaultName
	}
	env, err := environment.OpenContext(ctx, name, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		// Close ran meanwhile and found no environment to close.
		env.Close()
		return nil, prefixed(errClientClosed, "recording")
	}
	c.env, c.ownsEnv = env, true
	return env, nil
}
