package wasmhost

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/memory"
)

// ModuleName is the name guests import the ABI under.
const ModuleName = "vkrt_v1"

var (
	// ErrRefused: the host would not load or start the module (not
	// WebAssembly, a section that does not hold what it claims, an import
	// it does not provide or of the wrong signature, no _start, a memory
	// above the limit (MemoryLimitError), an imported memory, table,
	// global or tag, a table above the limit or more
	// than one, reference types, too many locals).
	ErrRefused = errors.New("wasmhost: module refused")
	// ErrTrapped: the guest trapped (unreachable, out-of-bounds access,
	// stack overflow, …).
	ErrTrapped = errors.New("wasmhost: guest trapped")
	// ErrDeadline: the guest ran past its deadline (WithDeadline, or the
	// deadline of Run's context) and was ended.
	ErrDeadline = errors.New("wasmhost: guest ran past its deadline")
	// ErrCanceled: Run's context was canceled while the guest ran, and the
	// guest was ended. It matches context.Canceled too.
	ErrCanceled = errors.New("wasmhost: guest's run canceled")
	// ErrClosed: the host was used after Close, or closed while the guest
	// ran.
	ErrClosed = errors.New("wasmhost: host closed")
	// ErrNilContext: New, Compile or Run was given a nil context.Context
	// (New and Run panicked, and Compile blamed the module);
	// context.Background() stands for none.
	ErrNilContext = errors.New("wasmhost: nil context (pass context.Background() for none)")
	// ErrNil: a method was called on a nil *Host or *Module, or on a zero
	// one, which New and Compile never return: it has no runtime or code
	// to act on. Such a method returns ErrNil where it returns an error
	// (Client returns nil), rather than dereferencing nil.
	ErrNil = errors.New("wasmhost: a nil or zero Host or Module, not made by New or Compile")
	// ErrInvalidOption: New or Run was given an option it cannot follow,
	// such as a nil Option or RunOption, a memory limit out of range, a
	// compilation cache directory that cannot be one. Nothing of the host
	// or the run is made.
	ErrInvalidOption = errors.New("wasmhost: invalid option")
)

// ExitError is a guest that exited with a non-zero code.
type ExitError struct{ Code uint32 }

func (e *ExitError) Error() string { return fmt.Sprintf("wasmhost: guest exited with code %d", e.Code) }

// MemoryLimitError is a module refused at load (it matches ErrRefused)
// because its memory starts at more pages of 64 KiB than the host allows
// (WithMaxMemoryPages). A memory that only grows past the limit is not
// refused: its memory.grow fails.
type MemoryLimitError struct{ Pages, MaxPages uint32 }

func (e *MemoryLimitError) Error() string {
	return fmt.Sprintf("its memory starts at %d pages of 64 KiB (%d B); the host allows at most %d pages (%d B)",
		e.Pages, uint64(e.Pages)*wasmPageBytes, e.MaxPages, uint64(e.MaxPages)*wasmPageBytes)
}

// Host runs WebAssembly guests against one client through the vkrt_v1 ABI.
// Guests run concurrently, each on a stream of its own unless told
// otherwise, and end alone: a guest that traps, runs past its deadline,
// exceeds its memory or exits leaves the host and other guests running.
type Host struct {
	c       *client.Client
	cfg     hostConfig
	rt      wazero.Runtime
	cache   wazero.CompilationCache
	kernels kernelTable
	// wasi are the host's WASI functions by name, which a guest's WASI
	// imports are checked against at Compile.
	wasi map[string]api.FunctionDefinition

	mu     sync.Mutex
	closed bool           // Close was called
	runs   sync.WaitGroup // the Runs under way
	// compiles are the Compiles under way, which Close waits for before it
	// closes the runtime: wazero's close clears what a compile writes to.
	compiles sync.WaitGroup
	// cacheMu keeps a host's compiles with a compilation cache one at a
	// time: wazero makes a module it reads from the cache visible to other
	// compiles before it has made its entry points, and a Run of one of
	// theirs panicked.
	cacheMu sync.Mutex
	// ending ends with Close, and every Run's context with it: wazero then
	// stops the guest, a guest asleep or blocked writing its output wakes
	// (sleeper, output), and each closes its own module, so Close closes
	// the runtime with no guest left in it. wazero's close of a running
	// guest's module, from Close's goroutine, clears what a host call of
	// the guest may be reading (the file table fd_write read before
	// calling the writer, what poll_oneoff read before it slept: data
	// races).
	ending context.Context
	endAll context.CancelFunc
	// done is closed once Close has ended every guest: a second Close
	// waits for it.
	done chan struct{}
}

// closedExitCode is the exit code Close ends running guests with, which
// Run tells from a guest's own exit by the host being closed.
const closedExitCode = 0xc105ed

// New starts a host over c. ctx may carry wazero's experimental function
// listener, which then sees every host call. A nil or zero c, which
// client.Open never returns, is refused with client.ErrNil, and a closed
// one (client.Client.Closed) with client.ErrClosed: the host ran no guest
// on it. A nil Option, or a nil RunOption given to WithDefaults, is
// refused with ErrInvalidOption, and so is an argument, environment
// variable, directory or stream (OnStream) WithDefaults gives that no run
// can take.
func New(ctx context.Context, c *client.Client, opts ...Option) (*Host, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	if c.Device() == nil { // a nil or zero client has none
		return nil, fmt.Errorf("wasmhost: no client to run guests on: %w", client.ErrNil)
	}
	if c.Closed() {
		// Every Run failed making the guest's stream, in the client's words.
		return nil, fmt.Errorf("wasmhost: the client to run guests on is closed: %w", client.ErrClosed)
	}
	cfg := hostConfig{maxMemoryPages: DefaultMaxMemoryPages, maxTableEntries: DefaultMaxTableEntries, records: true}
	for i, o := range opts {
		if o == nil {
			return nil, nilOption("New", i, len(opts))
		}
		cfg = o(cfg)
	}
	if cfg.invalid != nil {
		return nil, cfg.invalid
	}
	if err := cfg.run.check(); err != nil {
		// Every run would be refused it.
		return nil, fmt.Errorf("%w: WithDefaults: %w", ErrInvalidOption, err)
	}
	if err := streamRefusal(c, cfg.run.stream); err != nil {
		// So every run would be refused this stream, unless given another.
		return nil, fmt.Errorf("%w: WithDefaults: OnStream: %w", ErrInvalidOption, err)
	}
	if cfg.maxMemoryPages == 0 || cfg.maxMemoryPages > MaxMemoryPages {
		return nil, fmt.Errorf("%w: WithMaxMemoryPages: memory limit of %d pages: want 1 to %d", ErrInvalidOption, cfg.maxMemoryPages, MaxMemoryPages)
	}
	rc := wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithMemoryLimitPages(cfg.maxMemoryPages).
		WithCoreFeatures(guestFeatures)
	h := &Host{c: c, cfg: cfg, kernels: newKernelTable(), done: make(chan struct{})}
	h.ending, h.endAll = context.WithCancel(context.Background())
	if cfg.cacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(cfg.cacheDir)
		if err != nil {
			if notDir := cacheNotDir(err); notDir != nil {
				return nil, fmt.Errorf("%w: WithCompilationCacheDir: %w", ErrInvalidOption, notDir)
			}
			return nil, fmt.Errorf("%w: WithCompilationCacheDir: compilation cache in %s: %w", ErrInvalidOption, cfg.cacheDir, err)
		}
		h.cache = cache
		rc = rc.WithCompilationCache(cache)
	}
	h.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, h.rt); err != nil {
		h.Close(ctx)
		return nil, fmt.Errorf("wasmhost: WASI: %w", err)
	}
	h.wasi = h.rt.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions()
	if err := h.instantiateABI(ctx); err != nil {
		h.Close(ctx)
		return nil, fmt.Errorf("wasmhost: %s: %w", ModuleName, err)
	}
	return h, nil
}

// guestFeatures are WebAssembly 2.0 without reference types: with them a
// guest could grow a table by up to 2^32 entries of 8 bytes of host memory
// (table.grow, outside the memory limit) and define many tables. Bulk
// memory operations, which Go guests use, stay on; wazero enforces no
// dependency between the two. See module.go.
const guestFeatures = api.CoreFeaturesV2 &^ api.CoreFeatureReferenceTypes

// Close ends the host's runtime and its guests, and returns once every Run
// has returned. It ends every Run's context first: a guest running, asleep,
// blocked writing its output, or inside a host call that watches its
// context (a launch, a record waiting for another writer's lock) ends at
// once; one inside a host call that does not ends when the call does.
// Their Runs, and any Run or Compile after, fail with ErrClosed; a Compile
// under way finishes first. The client stays open. A second Close returns
// once the first has, and does nothing else.
func (h *Host) Close(ctx context.Context) error {
	if h.isNil() {
		return ErrNil
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		<-h.done
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	defer close(h.done)
	h.endAll() // every guest ends, and closes its own module
	h.compiles.Wait()
	h.runs.Wait()
	err := h.rt.CloseWithExitCode(ctx, closedExitCode)
	if h.cache != nil {
		err = errors.Join(err, h.cache.Close(ctx))
	}
	return err
}

// isClosed says whether Close was called.
func (h *Host) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// isNil says whether h is no host: nil, or zero (New sets rt).
func (h *Host) isNil() bool { return h == nil || h.rt == nil }

// Client is the client the host runs guests on; nil for a nil or zero
// Host.
func (h *Host) Client() *client.Client {
	if h.isNil() {
		return nil
	}
	return h.c
}

func (h *Host) deviceBytes() uint64 { return h.c.Device().Storage().Allocated() }

// Module is a compiled guest, ready to run any number of times on the host
// that compiled it.
type Module struct {
	compiled wazero.CompiledModule
	host     *Host
	closed   atomic.Bool
	// startPages is the size, in 64 KiB pages, the module's memory starts
	// at (0 for a module of none).
	startPages uint32
}

var wasmMagic = []byte{0x00, 'a', 's', 'm'}

// checkBinary is what a module must pass before wazero sees it: wazero's
// decoder trusts the counts it reads, so the walk comes first, then the
// bounds on locals and on control flow that keep its compiler to seconds.
func checkBinary(wasm []byte) (wasmModule, error) {
	walk, err := readModule(wasm)
	if err == nil {
		err = checkLocals(walk, len(wasm))
	}
	if err == nil {
		err = checkControl(walk, len(wasm))
	}
	return walk, err
}

// Compile checks and compiles a guest: WebAssembly whose sections hold what
// they claim to, with a _start taking and returning nothing, importing
// only functions of vkrt_v1 and of the host's WASI that they have, with
// their signatures (no memory, table or global), with at most one
// table of at most the host's entries, functions of at most 50,000 locals
// each (see checkLocals) and of control flow that compiles in seconds (see
// checkControl). Anything else is ErrRefused.
func (h *Host) Compile(ctx context.Context, wasm []byte) (*Module, error) {
	if h.isNil() {
		return nil, ErrNil
	}
	if ctx == nil {
		return nil, ErrNilContext
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	h.compiles.Add(1)
	h.mu.Unlock()
	defer h.compiles.Done()
	if !bytes.HasPrefix(wasm, wasmMagic) {
		if len(wasm) == 0 {
			return nil, fmt.Errorf("%w: not a WebAssembly binary (it is empty)", ErrRefused)
		}
		return nil, fmt.Errorf("%w: not a WebAssembly binary (it starts % x)", ErrRefused, wasm[:min(len(wasm), 4)])
	}
	walk, err := checkBinary(wasm)
	if err == nil {
		err = checkMemories(walk.memories, h.cfg.maxMemoryPages)
	}
	if err == nil {
		// Before compiling: a module refused for it was compiled, and
		// written into the compilation cache, first.
		err = checkOtherImports(walk.otherImport)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, shown(err))
	}
	if h.cache != nil {
		h.cacheMu.Lock()
	}
	cm, err := compileModule(ctx, h.rt, wasm)
	if h.cache != nil {
		h.cacheMu.Unlock()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, shown(err))
	}
	err = checkModule(cm, h.wasi)
	if err == nil {
		err = checkTables(walk.tables, h.cfg.maxTableEntries)
	}
	if err != nil {
		cm.Close(ctx)
		return nil, fmt.Errorf("%w: %w", ErrRefused, shown(err))
	}
	m := &Module{compiled: cm, host: h}
	if len(walk.memories) > 0 {
		m.startPages = walk.memories[0].min // a guest has at most one memory
	}
	return m, nil
}

// compileModule is rt.CompileModule, a panic of which (its decoder's, on a
// module the walk let through) is an error.
func compileModule(ctx context.Context, rt wazero.Runtime, wasm []byte) (cm wazero.CompiledModule, err error) {
	defer func() {
		if p := recover(); p != nil {
			cm, err = nil, fmt.Errorf("wazero failed on it: %v", p)
		}
	}()
	return rt.CompileModule(ctx, wasm)
}

// Close releases the compiled code; a Run of the module after it, or one
// loading it while Close runs, is ErrRefused ("the module is closed"); a
// guest already loaded runs on. A nil or zero Module is ErrNil.
func (m *Module) Close(ctx context.Context) error {
	if m == nil || m.compiled == nil {
		return ErrNil
	}
	m.closed.Store(true)
	return m.compiled.Close(ctx)
}

// checkModule refuses a module with no _start of no parameters and
// results, or importing functions the host lacks: of vkrt_v1 those the ABI
// does not have or with other signatures, of WASI those wasi (the host's
// WASI functions, by name) lacks or with other signatures. wazero refused
// those only when the guest ran, in words of its own.
func checkModule(cm wazero.CompiledModule, wasi map[string]api.FunctionDefinition) error {
	start, ok := cm.ExportedFunctions()["_start"]
	if !ok {
		return errors.New("the module exports no _start function")
	}
	if len(start.ParamTypes()) != 0 || len(start.ResultTypes()) != 0 {
		// Named as the imports' signatures are: %v wrote the types'
		// encodings, "_start takes [127 126] and returns [125]".
		return fmt.Errorf("its _start is %s; the host calls it as () -> ()", signature(start.ParamTypes(), start.ResultTypes()))
	}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod == wasi_snapshot_preview1.ModuleName {
			def, ok := wasi[name]
			if !ok {
				return fmt.Errorf("it imports %s.%s, which this host's WASI does not have", mod, abbreviate([]byte(name)))
			}
			if !sameTypes(f.ParamTypes(), def.ParamTypes()) || !sameTypes(f.ResultTypes(), def.ResultTypes()) {
				return fmt.Errorf("it imports %s.%s as %s, the host's is %s", mod, name,
					signature(f.ParamTypes(), f.ResultTypes()), signature(def.ParamTypes(), def.ResultTypes()))
			}
			continue
		}
		if mod != ModuleName {
			// wazero's own word for it was "module[vkrt_v2] not
			// instantiated", naming neither the import nor the host.
			return fmt.Errorf("it imports %s.%s; this host serves %s and %s only", abbreviate([]byte(mod)), abbreviate([]byte(name)),
				ModuleName, wasi_snapshot_preview1.ModuleName)
		}
		fn, ok := abiByName[name]
		if !ok {
			return fmt.Errorf("it imports %s.%s, which ABI version 1 does not have", mod, abbreviate([]byte(name)))
		}
		if !sameTypes(f.ParamTypes(), fn.params) || !sameTypes(f.ResultTypes(), []api.ValueType{api.ValueTypeI32}) {
			return fmt.Errorf("it imports %s.%s as %s, the ABI's is %s", mod, name,
				signature(f.ParamTypes(), f.ResultTypes()), signature(fn.params, []api.ValueType{api.ValueTypeI32}))
		}
	}
	if mem := cm.ImportedMemories(); len(mem) > 0 {
		mod, name, _ := mem[0].Import()
		return fmt.Errorf("it imports memory %s.%s; a guest defines its own", abbreviate([]byte(mod)), abbreviate([]byte(name)))
	}
	return nil
}

func sameTypes(a, b []api.ValueType) bool { return bytes.Equal(a, b) }

func signature(params, results []api.ValueType) string {
	name := func(ts []api.ValueType) string {
		s := "("
		for i, t := range ts {
			if i > 0 {
				s += " "
			}
			s += api.ValueTypeName(t)
		}
		return s + ")"
	}
	return name(params) + " -> " + name(results)
}

// Result is how a guest's run went.
type Result struct {
	// ExitCode is the guest's exit code: 0 when _start returned.
	ExitCode uint32
	// Wall is the run's wall-clock time, load to end.
	Wall time.Duration
	// DryRun: the guest ran under a dry-run mark.
	DryRun bool
	// Usage and Report are the guest's stream as the guest left it, before
	// the host freed what it still held.
	Usage  memory.Usage
	Report memory.Report
	// PeakDeviceBytes is the most device memory the device held above what
	// it held when the guest started, sampled after each buffer_create and
	// launch; other work on the device at the same time counts too, and
	// what other streams' released pages the device freed in a cleanup the
	// guest made is taken off where it started. A dry run holds none.
	PeakDeviceBytes uint64
	// DeviceAllocs counts the device allocations the client's storage made
	// while the guest ran (other work on the client at the same time
	// included).
	DeviceAllocs uint64
	// Spills counts the ways the guest's run departed from its stream's
	// plan since the layout was installed (memory.Manager.Spills): a
	// reservation a full capped pool sent on or an arena's slot missed, a
	// pool grown past the plan, the run leaving a virtual plan's stream. A
	// miss may cost no memory: PeakReservedBytes says what the run held.
	Spills uint64
	// InstalledLayout: the guest installed a layout of its own
	// (memory_install), which replaced its stream's for the rest of the
	// run: what it made after that went to its own pools, and Spills
	// counts from that install, so a plan the host installed on the
	// stream was not what the run followed.
	InstalledLayout bool
	// PeakReservedBytes is the most bytes the guest's pools reserved at
	// once (lazy pages of a dry run included).
	PeakReservedBytes uint64
	// PeakBytes and PeakHandles are the most the guest held against its
	// quotas at once: live buffer bytes as asked, and live handles.
	PeakBytes, PeakHandles uint64
	// MemoryPages is the size of the guest's linear memory at its end, in
	// 64 KiB pages; of a guest its start function ended, the size its
	// memory started at, as what the start function grew is not seen.
	MemoryPages uint32
	// Calls counts the guest's calls of vkrt_v1, FailedCalls those that
	// returned a status other than ESUCCESS (last_error's own too, though
	// they leave the message it reports in place).
	Calls, FailedCalls uint64
	// LastError is the message of the guest's last failed call, in the
	// host's words: where last_error names the guest's buffer handles to
	// it, this names the client's buffers and storages.
	LastError string
}

type instanceKey struct{}

// Run runs a guest's _start. The guest sees the dry-run mark of ctx
// (dryrun.With) through is_dry_run, and its buffers follow it. The error is
// nil when the guest returned or exited 0; *ExitError for another exit
// code; ErrTrapped, ErrDeadline, ErrCanceled, ErrClosed or ErrRefused otherwise. The result is
// non-nil whenever the guest was loaded. Whatever the guest still holds is
// freed before Run returns. m is a module this host compiled and has not
// closed: a nil one, one of another host or a closed one is ErrRefused.
// A nil RunOption, and an argument or environment variable WASI cannot
// pass (see WithArgs, WithEnv), are refused with ErrInvalidOption, and a
// client closed since New with client.ErrClosed, before anything is made
// for the guest.
func (h *Host) Run(ctx context.Context, m *Module, opts ...RunOption) (*Result, error) {
	if h.isNil() {
		return nil, ErrNil
	}
	if ctx == nil {
		return nil, ErrNilContext
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	h.runs.Add(1)
	h.mu.Unlock()
	defer h.runs.Done()
	switch {
	case m == nil:
		// What a failed Compile returns: Run dereferenced it and panicked.
		return nil, fmt.Errorf("%w: a nil *Module (Compile refused the guest?)", ErrRefused)
	case m.compiled == nil:
		return nil, fmt.Errorf("%w: a zero Module, which Compile never returns", ErrRefused)
	case m.host != h:
		// wazero's words were "source module must be compiled before
		// instantiation", said once a stream was made for the guest.
		return nil, fmt.Errorf("%w: the module was compiled by another host; a host runs the modules it compiled", ErrRefused)
	case m.closed.Load():
		// wazero's words for it were those of another host's module.
		return nil, fmt.Errorf("%w: the module is closed", ErrRefused)
	}
	cfg := h.cfg.run
	for i, o := range opts {
		if o == nil {
			return nil, nilOption("Run", i, len(opts))
		}
		cfg = o(cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if h.c.Closed() {
		// Closed by its owner after New: no stream can be made or used for
		// the guest. OnStream's stream read as the option's fault.
		return nil, fmt.Errorf("wasmhost: the client the host runs guests on is closed: %w", client.ErrClosed)
	}
	if err := streamRefusal(h.c, cfg.stream); err != nil {
		return nil, fmt.Errorf("%w: OnStream: %w", ErrInvalidOption, err)
	}
	dirs, err := openGuestDirs(cfg.dirs)
	if err != nil {
		return nil, err
	}
	defer closeGuestDirs(dirs)
	start := time.Now()
	s, owned := cfg.stream, false
	if s == nil {
		var err error
		if s, err = h.c.NewStream(); err != nil {
			return nil, fmt.Errorf("wasmhost: a stream for the guest: %w", err)
		}
		owned = true
	}
	runCtx, endRun := context.WithCancel(ctx)
	defer endRun()
	defer context.AfterFunc(h.ending, endRun)()
	if cfg.deadline > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(runCtx, cfg.deadline)
		defer cancel()
	}
	allocsBefore := h.c.StorageStats().Allocs
	inst := newInstance(h, client.WithStream(runCtx, s), s, cfg)
	inst.dry = dryrun.Active(ctx)
	callCtx := context.WithValue(runCtx, instanceKey{}, inst)

	res := &Result{DryRun: inst.dry}
	mod, err := h.rt.InstantiateModule(callCtx, m.compiled, moduleConfig(cfg, dirs, h.sleeper(runCtx), h.output(runCtx)))
	if err == nil {
		_, err = mod.ExportedFunction("_start").Call(callCtx)
		if mem := guestMemory(mod); mem != nil {
			res.MemoryPages, _ = mem.Grow(0) // Size is in bytes and wraps at 4 GiB
		}
		mod.Close(context.Background())
		err = h.classify(runCtx, res, err)
	} else if inStartFunction(err) {
		// The module loaded and its start function ran: it ended the way
		// _start can. wazero keeps no module to read the memory of, so
		// the run reports the pages the memory started at.
		res.MemoryPages = m.startPages
		err = h.classify(runCtx, res, err)
	} else if h.isClosed() {
		err = fmt.Errorf("%w (while loading): %w", ErrClosed, shown(err))
	} else if runCtx.Err() != nil {
		err = fmt.Errorf("%w (while loading): %w", endedBy(runCtx), shown(err))
	} else if m.closed.Load() {
		// Closed after the check above, before wazero loaded it: its
		// words were "source module must be compiled before
		// instantiation". Close marks the module before it releases the
		// code, so a load that failed for it sees the mark.
		err = fmt.Errorf("%w: the module is closed (while loading)", ErrRefused)
	} else {
		err = fmt.Errorf("%w: %w", ErrRefused, shown(err))
	}

	res.Usage, res.Report, res.Spills = s.Usage(), s.Report(), s.Spills()
	res.DeviceAllocs = h.c.StorageStats().Allocs - allocsBefore
	inst.sampleDevice()
	res.PeakDeviceBytes, res.PeakBytes, res.PeakHandles = inst.peakDev, inst.peakBytes, inst.peakLive
	res.PeakReservedBytes, res.InstalledLayout = inst.peakReserved, inst.ownLayout
	res.Calls, res.FailedCalls = inst.calls, inst.failedCalls
	res.LastError = inst.last.message()
	relErr := inst.release()
	if owned {
		relErr = errors.Join(relErr, s.Close())
	}
	res.Wall = time.Since(start)
	if relErr != nil {
		return res, errors.Join(err, fmt.Errorf("wasmhost: releasing the guest's buffers: %w", relErr))
	}
	return res, err
}

// streamRefusal says why no guest can run on s (OnStream), a stream of
// another client than c, a zero one or a closed one: every buffer call of
// the guest would fail, one by one, as EIO. nil for s nil (no OnStream)
// and for a stream a guest can run on.
func streamRefusal(c *client.Client, s *client.Stream) error {
	if s == nil {
		return nil
	}
	_, err := c.CallingStream(client.WithStream(context.Background(), s))
	if err == nil && s.Closed() {
		err = fmt.Errorf("stream %d is closed: %w", s.ID(), client.ErrClosed)
	}
	return err
}

// classify turns the error of _start into Run's.
func (h *Host) classify(runCtx context.Context, res *Result, err error) error {
	if err == nil {
		return nil
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		// A guest can pass proc_exit the codes wazero ends a module with
		// when its context is done; only a context that is done makes
		// them a deadline.
		switch code := exit.ExitCode(); {
		case (code == closedExitCode || code == sys.ExitCodeContextCanceled) && h.isClosed():
			return fmt.Errorf("%w: it ended the guest", ErrClosed)
		case code == 0 && h.isClosed():
			// Closed while in a host call, the guest then exited by
			// proc_exit, which wazero lets through: it is ended as a
			// guest that returns then is.
			return fmt.Errorf("%w: it ended the guest", ErrClosed)
		case (code == sys.ExitCodeDeadlineExceeded || code == sys.ExitCodeContextCanceled) && runCtx.Err() != nil:
			return fmt.Errorf("%w: %w", endedBy(runCtx), runCtx.Err())
		case code == 0:
			return nil
		default:
			res.ExitCode = code
			return &ExitError{Code: code}
		}
	}
	if runCtx.Err() != nil && h.isClosed() {
		return fmt.Errorf("%w: it ended the guest", ErrClosed)
	}
	if runCtx.Err() != nil {
		return fmt.Errorf("%w: %w", endedBy(runCtx), runCtx.Err())
	}
	return fmt.Errorf("%w: %w", ErrTrapped, shown(err))
}

// shown is err with what the guest chose escaped as Go escapes it: the
// names of its imports in a refusal, of its functions in a trap's stack
// trace (its name section). Raw, an escape sequence among them reached the
// terminal showing vkrt run's error, which acted on it. Lines and the tabs
// that start them stay.
func shown(err error) error { return shownError{err} }

type shownError struct{ err error }

func (e shownError) Error() string {
	lines := strings.Split(e.err.Error(), "\n")
	for i, l := range lines {
		text := strings.TrimLeft(l, "\t")
		lines[i] = l[:len(l)-len(text)] + printable.Escaped(text)
	}
	return strings.Join(lines, "\n")
}

func (e shownError) Unwrap() error { return e.err }

// endedBy is the class of a run its context ended, once the host is known
// open: ErrDeadline for a deadline, ErrCanceled for a cancellation by the
// caller (a run's deadline was reported for both).
func endedBy(runCtx context.Context) error {
	if errors.Is(runCtx.Err(), context.Canceled) {
		return ErrCanceled
	}
	return ErrDeadline
}

// inStartFunction reports whether an error of InstantiateModule came from
// the module's start function (its start section), which runs once
// everything else is loaded: wazero returns an exit from it as it is, and
// a trap or a deadline in it as "start function[i] failed: …".
func inStartFunction(err error) bool {
	var exit *sys.ExitError
	return errors.As(err, &exit) || strings.HasPrefix(err.Error(), "start function[")
}

// sleeper is a guest's sleep (poll_oneoff on a clock, with clocks
// granted): it wakes at its time, or ends the guest when the run's context
// ends (its deadline, or Close), as wazero ends a guest whose context is
// done. A plain time.Sleep held a guest of 300 ms deadline 10 s, and Close
// with it.
func (h *Host) sleeper(runCtx context.Context) sys.Nanosleep {
	return func(ns int64) {
		if ns <= 0 {
			return
		}
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-runCtx.Done():
			panic(h.ended())
		}
	}
}

// ended is the exit a sleep or a blocked write ends its guest with once
// the run's context is done: Close's where the host is closed (Close sets
// closed before it ends the contexts), the deadline's otherwise; classify
// reads them.
func (h *Host) ended() *sys.ExitError {
	if h.isClosed() {
		return sys.NewExitError(closedExitCode)
	}
	return sys.NewExitError(sys.ExitCodeDeadlineExceeded)
}

// output is a guest's standard output or error, w, ending the guest at the
// run's deadline or when the host closes while a write blocks (a pipe
// nobody reads), as a sleep does: the write goes on from a goroutine of its
// own, and from a copy, since the guest's memory is the guest's again once
// it has ended. A write the guest is ended during is the last of its run,
// and goes on until w takes it or fails. A plain Write held a guest of
// 300 ms deadline, and Close with it, until the reader went away. A write
// w panics in fails, as one w refuses does: the guest sees EIO.
func (h *Host) output(runCtx context.Context) func(w io.Writer) io.Writer {
	return func(w io.Writer) io.Writer {
		return writerFunc(func(p []byte) (int, error) {
			if runCtx.Err() != nil {
				panic(h.ended())
			}
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			p = bytes.Clone(p)
			go func() {
				var r result
				defer func() {
					// Here a panic of w (a typed nil *bytes.Buffer
					// given to WithStdout) ended the host's process.
					if v := recover(); v != nil {
						r = result{0, fmt.Errorf("wasmhost: the guest's output writer %T panicked: %v", w, v)}
					}
					done <- r
				}()
				r.n, r.err = w.Write(p)
			}()
			select {
			case r := <-done:
				return r.n, r.err
			case <-runCtx.Done():
			}
			select {
			case r := <-done: // the write finished too: nothing is left writing
				return r.n, r.err
			default:
				panic(h.ended())
			}
		})
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// moduleConfig is a guest's configuration: dirs are cfg.dirs as the guest
// reads them (openGuestDirs).
func moduleConfig(cfg runConfig, dirs []guestDir, sleep sys.Nanosleep, output func(io.Writer) io.Writer) wazero.ModuleConfig {
	mc := wazero.NewModuleConfig().WithName("").WithStartFunctions().WithArgs(cfg.args...)
	for _, kv := range cfg.env {
		mc = mc.WithEnv(kv[0], kv[1])
	}
	if len(dirs) > 0 {
		fsc := wazero.NewFSConfig()
		for _, d := range dirs {
			fsc = fsc.WithFSMount(d, d.guestPath)
		}
		mc = mc.WithFSConfig(fsc)
	}
	out, errOut := io.Discard, io.Discard
	if cfg.stdout != nil {
		out = output(cfg.stdout)
	}
	if cfg.stderr != nil {
		errOut = output(cfg.stderr)
	}
	mc = mc.WithStdout(out).WithStderr(errOut)
	if cfg.clocks {
		mc = mc.WithSysWalltime().WithSysNanotime().WithNanosleep(sleep)
	}
	if cfg.randomness {
		mc = mc.WithRandSource(rand.Reader)
	}
	return mc
}

// cacheNotDir is wazero's refusal of a compilation cache directory that a
// file stands in the way of ("PATH is not dir", said in its message only)
// as Go's os.MkdirAll says it, "mkdir PATH: not a directory", matching
// syscall.ENOTDIR; nil for any other error.
func cacheNotDir(err error) error {
	path, ok := strings.CutSuffix(err.Error(), " is not dir")
	if !ok {
		return nil
	}
	return &fs.PathError{Op: "mkdir", Path: path, Err: syscall.ENOTDIR}
}
