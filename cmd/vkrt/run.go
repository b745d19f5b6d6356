package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
	"github.com/vkrt/vkrt/wasmhost"
)

// maxGuestHandles is the most live handles the host's table gives a guest:
// the index part of a handle is 20 bits.
const maxGuestHandles = 1<<20 - 1

// guestFlags are the flags of the commands that run a guest.
type guestFlags struct {
	layout         string
	device         int
	env            string
	timeout        time.Duration
	maxDeviceBytes uint64
	maxHandles     uint32
	maxMemoryPages uint32
	cacheDir       string
}

func (f *guestFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.layout, "layout", "virtual", "pool `LAYOUT`: a preset (virtual, the client's default; sub-slices, exclusive-pages, direct), a layout JSON literal, or a file holding one or a plan file (vkrt plan --out)")
	fl.IntVar(&f.device, "device", 0, "index `N` of the Vulkan device, as vkrt devices lists them")
	fl.StringVar(&f.env, "env", environment.DefaultName, "`NAME` of the environment the guest's memory records go to")
	durationVar(fl, &f.timeout, "timeout", 0, "0 (no deadline) or a positive duration", "end the guest after `DURATION` (90s, 5m; 0: no deadline)")
	fl.Uint64Var(&f.maxDeviceBytes, "max-device-bytes", 0, "quota of device memory, in `BYTES`, the guest's live buffers may hold; its pools may then reserve at most twice that plus a page of each pool it fills (ABI.md, Limits of a run; 0: none)")
	fl.Uint32Var(&f.maxHandles, "max-handles", wasmhost.DefaultMaxHandles, fmt.Sprintf("quota of `N` live buffer handles (1 to %d)", maxGuestHandles))
	fl.Uint32Var(&f.maxMemoryPages, "max-memory-pages", wasmhost.DefaultMaxMemoryPages, fmt.Sprintf("limit of the guest's linear memory, `N` pages of 64 KiB (1 to %d)", wasmhost.MaxMemoryPages))
	fl.StringVar(&f.cacheDir, "compile-cache", defaultCompileCache(), "directory `DIR` of compiled guests ('' compiles every time)")
}

func defaultCompileCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "vkrt", "wazero")
}

// guestSession is an open client and host with a compiled guest.
type guestSession struct {
	client *client.Client
	host   *wasmhost.Host
	module *wasmhost.Module
	run    []wasmhost.RunOption
}

func openGuest(ctx context.Context, path string, args []string, f guestFlags, stdout, stderr io.Writer) (*guestSession, error) {
	if f.timeout < 0 {
		// The host takes a deadline of 0 or less as none: a negative one
		// would run the guest without the limit asked for.
		return nil, fmt.Errorf("--timeout %s: want a positive duration, or 0 for no deadline", f.timeout)
	}
	if f.device < 0 {
		return nil, fmt.Errorf("--device %d: want a device index, 0 or more (vkrt devices lists them)", f.device)
	}
	if f.maxHandles == 0 || f.maxHandles > maxGuestHandles {
		// The host would take 0 as its default and cap a larger quota
		// silently: neither is what was asked.
		return nil, fmt.Errorf("--max-handles %d: want 1 to %d", f.maxHandles, maxGuestHandles)
	}
	if f.maxMemoryPages == 0 || f.maxMemoryPages > wasmhost.MaxMemoryPages {
		return nil, fmt.Errorf("--max-memory-pages %d: want 1 to %d", f.maxMemoryPages, wasmhost.MaxMemoryPages)
	}
	if err := checkStreamsReadOnce(namedInput{path: path, role: "the workload"}, layoutInput("--layout", f.layout)); err != nil {
		return nil, err
	}
	wasm, err := readGuest(path)
	if err != nil {
		return nil, err
	}
	layout, pf, err := guestLayout(f.layout)
	if err != nil {
		return nil, err
	}
	clientOpts := []client.Option{client.WithDevice(f.device), client.WithLayout(layout)}
	var made madeFiles
	if f.env != environment.DefaultName {
		// The default environment is opened at the guest's first record, if
		// it makes one.
		clientOpts = append(clientOpts, client.WithEnvironment(f.env))
		made = environmentToMake(f.env)
	}
	c, err := client.Open(ctx, clientOpts...)
	if err != nil {
		made.remove()
		return nil, noBackendWhy(err)
	}
	// A run refused before the guest starts leaves no environment it made.
	refuse := func(err error) (*guestSession, error) {
		c.Close()
		made.remove()
		return nil, err
	}
	if err := checkPlanOn(f.layout, pf, layout, c, stderr); err != nil {
		return refuse(fmt.Errorf("--layout: %w", err))
	}
	hostOpts := []wasmhost.Option{wasmhost.WithMaxMemoryPages(f.maxMemoryPages)}
	h, err := wasmhost.New(ctx, c, append(hostOpts, wasmhost.WithCompilationCacheDir(f.cacheDir))...)
	if err != nil && f.cacheDir == defaultCompileCache() && f.cacheDir != "" {
		// The user's cache directory is a convenience: without it the guest
		// is compiled, slower, and runs the same. A host that fails without
		// it too failed for another reason (a bad --max-memory-pages), which
		// is the one to report.
		uncached, err2 := wasmhost.New(ctx, c, hostOpts...)
		if err2 == nil {
			// The path is the user's cache directory ($XDG_CACHE_HOME,
			// $HOME), escaped as the error line escapes it.
			fmt.Fprintln(stderr, shownOnTerminal(fmt.Sprintf("vkrt: no compilation cache (%v); compiling the guest", err)))
		}
		h, err = uncached, err2
	}
	if err != nil {
		return refuse(err)
	}
	m, err := h.Compile(ctx, wasm)
	if err != nil && f.cacheDir != "" && damagedCacheEntry(err) {
		// Not the module's fault: the cache is a convenience.
		damaged := err
		var fresh *wasmhost.Host
		if fresh, m, err = compileThroughFreshCache(ctx, c, hostOpts, f.cacheDir, wasm); err == nil {
			// wazero's words quote the entry's bytes, raw: quoted here,
			// so they reach no terminal as they are.
			fmt.Fprintf(stderr, "vkrt: the compilation cache %s held a damaged entry for %s (%s); compiled the guest anew and replaced the entry\n",
				printable.Label(f.cacheDir), printable.Label(path), printable.Label(damaged.Error()))
			h.Close(ctx)
			h = fresh
		}
	}
	if err != nil {
		h.Close(ctx)
		if ml := (*wasmhost.MemoryLimitError)(nil); errors.As(err, &ml) {
			if ml.Pages <= wasmhost.MaxMemoryPages {
				err = fmt.Errorf("%w (--max-memory-pages %d would hold it)", err, ml.Pages)
			} else {
				err = fmt.Errorf("%w (no guest may start above %d pages)", err, wasmhost.MaxMemoryPages)
			}
		} else if !bytes.HasPrefix(wasm, wasmMagic) {
			if what := notAWorkload(path); what != "" {
				err = fmt.Errorf("%w; %s", err, what)
			}
		}
		return refuse(fmt.Errorf("%s: %w", path, err))
	}
	s := &guestSession{client: c, host: h, module: m, run: []wasmhost.RunOption{
		wasmhost.WithArgs(append([]string{filepath.Base(path)}, args...)...),
		wasmhost.WithStdout(stdout), wasmhost.WithStderr(stderr), wasmhost.WithClocks(),
		wasmhost.WithDeadline(f.timeout), wasmhost.WithMaxDeviceBytes(f.maxDeviceBytes), wasmhost.WithMaxHandles(f.maxHandles),
	}}
	return s, nil
}

// maxGuestBytes is the largest module vkrt reads, V8's limit: a Go guest
// is a few MB.
var maxGuestBytes int64 = 1 << 30

// readGuest reads the module at path, at most maxGuestBytes of it. A file
// that does not start as WebAssembly is read no further than its first 4
// bytes, which Compile refuses: /dev/zero, a stream with no end, was read
// until the process died out of memory.
func readGuest(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, pathHint(path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > maxGuestBytes {
		return nil, fmt.Errorf("%s: a module of %d B; vkrt reads at most %d B", path, fi.Size(), maxGuestBytes)
	} else if err == nil && fi.IsDir() {
		// As a trace that is a directory is told: it read "read PATH: is
		// a directory", as if the reading had failed.
		return nil, &isDirectoryError{path: path, want: "a WebAssembly workload"}
	}
	head, wasm, err := readWasmHead(f)
	if err != nil || !wasm {
		return head, err
	}
	n := len(head)
	rest, err := io.ReadAll(io.LimitReader(f, maxGuestBytes-int64(n)+1))
	if err != nil {
		return nil, err
	}
	if int64(n+len(rest)) > maxGuestBytes {
		return nil, fmt.Errorf("%s: a module of more than %d B; vkrt reads at most %d B", path, maxGuestBytes, maxGuestBytes)
	}
	return append(head, rest...), nil
}

var wasmMagic = []byte{0x00, 'a', 's', 'm'}

// notAWorkload says what the file at path is where it is another of
// vkrt's files, not a module, and where it goes: a plan file (vkrt plan
// --out) or an allocation trace (named NAME.trace or NAME.trace.gz), as
// vkrt replay and vkrt plan say a guest or a plan file given as a trace
// is; or a module in the text format (NAME.wat). "" for anything else, and for what is not a regular file: a pipe was
// read once, and opening a named one waits for its writer.
func notAWorkload(path string) string {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	if f, err := os.Open(path); err == nil {
		isPlan := plan.IsFileHead(f)
		f.Close()
		if isPlan {
			return fmt.Sprintf("%s is a plan file, not a WebAssembly workload: give it to --layout (vkrt run, vkrt plan, vkrt replay) or --plan (vkrt report)", path)
		}
	}
	switch {
	case namedAsTrace(path):
		return fmt.Sprintf("%s is an allocation trace, not a WebAssembly workload: replay it (vkrt replay %s) or plan from it (vkrt plan %s --out FILE)", path, path, path)
	case strings.HasSuffix(filepath.Base(path), ".wat"):
		return fmt.Sprintf("%s is WebAssembly text: vkrt runs the binary format (wat2wasm makes it)", path)
	}
	return ""
}

// pathHint is err, the error of opening path, saying how standard input
// is named where path is "-" and no file has that name: the commands read
// files, and "-" reads no standard input, but /dev/stdin does. An empty
// path (a variable that expanded to nothing) is said to be one: it read
// "open : no such file or directory".
func pathHint(path string, err error) error {
	switch {
	case path == "-" && errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w (to read standard input, name /dev/stdin)", err)
	case path == "" && errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("an empty argument names no file (%w): give a file's name or leave the argument out", os.ErrNotExist)
	}
	return err
}

// readWasmHead reads r's first bytes, up to WebAssembly's magic number's
// length, and says whether they are it.
func readWasmHead(r io.Reader) (head []byte, wasm bool, err error) {
	head = make([]byte, len(wasmMagic))
	n, err := io.ReadFull(r, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, false, err
	}
	return head[:n], bytes.Equal(head[:n], wasmMagic), nil
}

func (s *guestSession) close(ctx context.Context) error {
	return errors.Join(s.module.Close(ctx), s.host.Close(ctx), s.client.Close())
}

// exitCode is an error that ends vkrt with the guest's own exit code.
type exitCode struct {
	code int
	err  error
}

func (e *exitCode) Error() string { return e.err.Error() }
func (e *exitCode) Unwrap() error { return e.err }

// runLine is `vkrt run --json`'s line.
type runLine struct {
	Workload string `json:"workload"`
	// Status is how the run ended (runStatus): ok, exit, trapped,
	// deadline, canceled, refused (wasmhost.ErrRefused: the host read the
	// module and would not load or start it), or failed for every other
	// end, a workload the host was never handed (missing, a directory, an
	// empty name) and a bad flag included.
	Status string `json:"status"`
	// ExitCode is the guest's own exit code: 0 when it returned, null
	// where it gave none (refused, trapped, stopped or failed first), so
	// that a run that failed never reads as one that exited 0.
	ExitCode *uint32      `json:"exit_code"`
	Error    string       `json:"error,omitempty"`
	WallS    float64      `json:"wall_s"`
	DryRun   bool         `json:"dry_run"`
	Usage    memory.Usage `json:"usage"`
	// Report is the guest's stream's; none for a module refused at
	// compile, which had no stream.
	Report *memory.Report `json:"report,omitempty"`
	// DeviceBytesPeak, DeviceAllocs, DeviceAllocationsPeak and
	// DeviceBindCalls are the device's own figures (the client's storage,
	// which only the guest used): the most device memory held at once, the
	// device allocations made, the most held at once, and the sparse-binding
	// submissions made (the Virtual layout's; 0 without sparse residency).
	DeviceBytesPeak       uint64 `json:"device_bytes_peak"`
	DeviceAllocs          uint64 `json:"device_allocs"`
	DeviceAllocationsPeak int    `json:"device_allocations_peak"`
	DeviceBindCalls       uint64 `json:"device_bind_calls"`
	ReservedPeak          uint64 `json:"reserved_peak_bytes"`
	Spills                uint64 `json:"spills"`
	// PlanCapacity is what --layout plans to reserve (its capped pools' and
	// arena's pages, or a virtual plan's planned bytes; 0 for a layout
	// without a plan); GrowthBytes is how far the run reserved past it and
	// its persistent pool.
	PlanCapacity uint64 `json:"plan_capacity_bytes,omitempty"`
	GrowthBytes  uint64 `json:"growth_bytes"`
	// InstalledLayout: the guest installed a layout of its own
	// (memory_install), which replaced --layout's (or the default) for the
	// rest of the run: spills, plan_capacity_bytes and growth_bytes are
	// then its own layout's, not the plan's.
	InstalledLayout bool   `json:"installed_layout"`
	LiveBytesPeak   uint64 `json:"peak_live_bytes"`
	HandlesPeak     uint64 `json:"handles_peak"`
	MemoryPages     uint32 `json:"memory_pages"`
	Calls           uint64 `json:"calls"`
	FailedCalls     uint64 `json:"failed_calls"`
	LastError       string `json:"last_error,omitempty"`
}

// guestExitCode is the exit code the guest gave, for a run that ended
// with status (runStatus): nil unless it returned or exited.
func guestExitCode(res *wasmhost.Result, status string) *uint32 {
	if status != "ok" && status != "exit" {
		return nil
	}
	return &res.ExitCode
}

// runStatus names how a guest ended, as runLine.Status says.
func runStatus(err error) string {
	var exit *wasmhost.ExitError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &exit):
		return "exit"
	case errors.Is(err, wasmhost.ErrDeadline):
		return "deadline"
	case errors.Is(err, wasmhost.ErrCanceled):
		return "canceled"
	case errors.Is(err, wasmhost.ErrTrapped):
		return "trapped"
	case errors.Is(err, wasmhost.ErrRefused):
		return "refused"
	}
	return "failed"
}

func init() {
	var f guestFlags
	var dry, asJSON bool
	cmd := &cobra.Command{
		Use:   "run WORKLOAD.wasm [-- ARGS...]",
		Short: "run a WebAssembly workload on the GPU through the vkrt_v1 ABI",
		Long: `Run a WebAssembly guest (GOOS=wasip1 GOARCH=wasm, importing vkrt_v1) on a
device. The guest gets ARGS (after its own name), its standard output and
error, the clocks, and nothing else: no filesystem, no environment.

Exit status: 0 when the guest returns or exits 0; its own exit code when it
exits with 1 to 255 (1 past that); 1 with a message when it traps, breaks a
limit or the host refuses it; 128+N when SIGINT, SIGTERM or SIGHUP stops it
(--json still gives the run's line, status "canceled"; a second signal ends
the command at once). The --json line's exit_code is the guest's own: 0 when
it returned, null when it neither returned nor exited. --dry runs it as a dry run: the pools see its
allocations, the device holds nothing, launches are checked and dropped,
reads give zeros.`,
		// A run refused for its command line never started either: under
		// --json it gives its line too, with the workload where there is
		// one.
		Args: func(cmd *cobra.Command, args []string) error {
			err := cobra.MinimumNArgs(1)(cmd, args)
			if err != nil && asJSON {
				err = writeUnstartedLine(cmd.OutOrStdout(), "", dry, err)
			}
			return err
		},
		// The root's check, and the line --json promises for a run that
		// never started: a flag left empty (--layout '') refused the run
		// with no line, where a refused --layout has one.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			err := refuseEmptyValues(cmd)
			if err != nil && asJSON {
				err = writeUnstartedLine(cmd.OutOrStdout(), args[0], dry, err)
			}
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGuest(cmd, args[0], args[1:], f, dry, asJSON)
		},
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// The flags past the one refused were never parsed: --json, and
		// the workload, are read from the command line.
		if workload, asJSON, dry := unparsedRun(cmd, commandLine); asJSON {
			return writeUnstartedLine(cmd.OutOrStdout(), workload, dry, err)
		}
		return err
	})
	f.register(cmd)
	cmd.Flags().BoolVar(&dry, "dry", false, "run the guest as a dry run")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object summarising the run, also for one that never started (a module refused at compile, a missing file or device, a refused --layout, a bad flag or a missing WORKLOAD: no report then); the guest's output goes to stderr")
	rootCmd.AddCommand(cmd)
}

// unparsedRun reads a command line whose flags cmd could not parse for
// what its --json line needs: whether --json and --dry were given (the last
// of each counting) and the workload, the first argument that is no flag or
// a flag's value. Everything past "--" is positional: the guest's, once
// the workload is known.
func unparsedRun(cmd *cobra.Command, args []string) (workload string, asJSON, dry bool) {
	for i, a := range args {
		if a == cmd.Name() {
			args = args[i+1:]
			break
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			// What follows is positional: the first of it is the
			// workload where none came before ("vkrt run -- x.wasm").
			if workload == "" && i+1 < len(args) {
				workload = args[i+1]
			}
			break
		}
		if len(a) < 2 || a[0] != '-' {
			if workload == "" {
				workload = a
			}
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "json" || name == "dry" {
			on := true
			if hasValue {
				on, _ = strconv.ParseBool(value)
			}
			if name == "json" {
				asJSON = on
			} else {
				dry = on
			}
			continue
		}
		var fl *pflag.Flag
		if strings.HasPrefix(a, "--") {
			fl = cmd.Flags().Lookup(name)
		} else if len(name) == 1 {
			fl = cmd.Flags().ShorthandLookup(name)
		}
		if fl != nil && !hasValue && fl.NoOptDefVal == "" {
			i++ // its value
		}
	}
	return workload, asJSON, dry
}

// writeUnstartedLine writes the --json line of a run that never started
// and returns err, the reason, with any failure to write the line: such a
// run is a result too (a module refused at compile, a file or device that
// is not there, a plan refused), so a script reading the line gets one,
// with no report.
func writeUnstartedLine(stdout io.Writer, path string, dry bool, err error) error {
	line, merr := json.Marshal(runLine{Workload: path, Status: runStatus(err), Error: err.Error(), DryRun: dry})
	if merr == nil {
		_, merr = fmt.Fprintf(stdout, "%s\n", line)
	}
	if merr != nil {
		return errors.Join(err, fmt.Errorf("writing the --json line: %w", merr))
	}
	return err
}

func runGuest(cmd *cobra.Command, path string, args []string, f guestFlags, dry, asJSON bool) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	stdout := cmd.OutOrStdout()
	guestOut := stdout
	if asJSON {
		guestOut = cmd.ErrOrStderr()
	}
	s, err := openGuest(ctx, path, args, f, guestOut, cmd.ErrOrStderr())
	if asJSON && err != nil {
		return writeUnstartedLine(stdout, path, dry, err)
	}
	if err != nil {
		return err
	}
	defer s.close(ctx)
	if dry {
		ctx = dryrun.With(ctx)
	}
	// A signal stops the guest as a cancellation does, so that --json still
	// gives the run's line; the command then ends as the signal would have
	// ended it.
	var (
		res    *wasmhost.Result
		runErr error
	)
	stopped := whileInterruptible(ctx, func(ctx context.Context) { res, runErr = s.host.Run(ctx, s.module, s.run...) })
	runErr = stopped.around(runErr)
	if asJSON && res != nil {
		status := runStatus(runErr)
		line := runLine{
			Workload: path, Status: status, ExitCode: guestExitCode(res, status), WallS: res.Wall.Seconds(), DryRun: res.DryRun,
			Usage: res.Usage, Report: &res.Report, ReservedPeak: res.PeakReservedBytes,
			LiveBytesPeak: res.PeakBytes, HandlesPeak: res.PeakHandles, MemoryPages: res.MemoryPages,
			Calls: res.Calls, FailedCalls: res.FailedCalls, LastError: res.LastError,
			Spills: res.Spills, PlanCapacity: reportedCapacity(res.Report), InstalledLayout: res.InstalledLayout,
		}
		stats := s.client.StorageStats()
		line.DeviceBytesPeak, line.DeviceAllocs, line.DeviceAllocationsPeak = stats.BytesPeak, stats.Allocs, stats.AllocationsPeak
		line.DeviceBindCalls = stats.BindCalls
		line.GrowthBytes = growth(res.PeakReservedBytes, line.PlanCapacity, res.Report.Persistent.Usage.BytesReserved)
		if runErr != nil {
			line.Error = runErr.Error()
		}
		out, err := json.Marshal(line)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(stdout, "%s\n", out); err != nil {
			// The line is the run's result: one lost fails the command,
			// keeping a guest's own exit code.
			runErr = errors.Join(runErr, fmt.Errorf("writing the --json line: %w", err))
		}
	}
	var exit *wasmhost.ExitError
	if errors.As(runErr, &exit) {
		return &exitCode{code: int(exit.Code), err: runErr}
	}
	return runErr
}

// growth is how far a run reserved past a plan's capacity and what its
// persistent pool holds; 0 without a plan (capacity 0): nothing to grow past.
func growth(reservedPeak, capacity, persistent uint64) uint64 {
	if capacity == 0 || reservedPeak <= capacity || reservedPeak-capacity <= persistent {
		return 0
	}
	return reservedPeak - capacity - persistent
}
