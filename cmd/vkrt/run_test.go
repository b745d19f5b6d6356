package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/internal/wasmtest"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
	"github.com/vkrt/vkrt/wasmhost"
)

// watFile writes a WebAssembly text module, assembled, to a .wasm file.
func watFile(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guest.wasm")
	require.NoError(t, os.WriteFile(path, wasmtest.WAT(t, src), 0o644))
	return path
}

// testCompileCache is the compilation cache of the guests the command
// tests run, kept between runs as the default cache in the user's cache
// directory would be (compiling a Go guest under the race detector takes
// seconds).
var testCompileCache = filepath.Join(os.TempDir(), "vkrt-test-compile-cache")

// guestArgs are the flags every guest test passes: the tests' compilation
// cache, records in a temporary environment.
func guestArgs(t *testing.T, args ...string) []string {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	return append([]string{"--compile-cache", testCompileCache, "--env", "test"}, args...)
}

// exitCodeOf is the exit code vkrt would end with for err.
func exitCodeOf(err error) int { return exitStatus(err) }

const exitWithArgc = `(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $sizes (i32.const 0) (i32.const 4))) (call $exit (i32.add (i32.load (i32.const 0)) (i32.const 10)))))`

func TestRunExitCodes(t *testing.T) {
	devicesOrSkip(t)
	mlp := wasmtest.GoFile(t, "examples/mlp", "mlp.wasm")
	out, _, err := execute(t, "run", guestArgs(t, mlp)...)
	require.NoError(t, err)
	require.Contains(t, out, "every output matches the CPU reference")

	argc := watFile(t, exitWithArgc)
	_, _, err = execute(t, "run", guestArgs(t, argc)...)
	require.Equal(t, 11, exitCodeOf(err), "its own exit code; argv holds its name only")
	_, _, err = execute(t, "run", guestArgs(t, argc, "--", "a", "b")...)
	require.Equal(t, 13, exitCodeOf(err), "the arguments after -- are the guest's")

	trap := watFile(t, `(module (func (export "_start") unreachable))`)
	_, _, err = execute(t, "run", guestArgs(t, trap)...)
	require.Equal(t, 1, exitCodeOf(err))
	require.ErrorContains(t, err, "trapped")

	notWasm := filepath.Join(t.TempDir(), "notes.wasm")
	require.NoError(t, os.WriteFile(notWasm, []byte("hello"), 0o644))
	_, _, err = execute(t, "run", guestArgs(t, notWasm)...)
	require.Equal(t, 1, exitCodeOf(err))
	require.ErrorContains(t, err, "not a WebAssembly binary")
	// A module refused at compile is a result of the run too: --json gives
	// it its line, as one refused when it loads (it printed none).
	for _, refused := range []string{notWasm, watFile(t, `(module)`)} {
		out, _, err = execute(t, "run", guestArgs(t, refused, "--json")...)
		require.Equal(t, 1, exitCodeOf(err))
		var line runLine
		require.NoError(t, json.Unmarshal([]byte(out), &line), "%q", out)
		require.Equal(t, "refused", line.Status)
		require.Nil(t, line.ExitCode, "the guest gave none: %q", out)
		require.Equal(t, refused, line.Workload)
		require.Equal(t, err.Error(), line.Error)
	}

	// So does a run that never started: a file or a device that is not
	// there, a directory or an empty argument where the workload goes (the
	// host is never handed a module: "failed", not "refused"), a layout
	// refused.
	for _, never := range [][]string{
		{filepath.Join(t.TempDir(), "missing.wasm")},
		{t.TempDir()},
		{""},
		{argc, "--device", "99"},
		{argc, "--layout", `{"Virtual":{"planned_bytes":-1}}`},
	} {
		out, _, err = execute(t, "run", guestArgs(t, append(never, "--json")...)...)
		require.Equal(t, 1, exitCodeOf(err), "%v", never)
		var line runLine
		require.NoError(t, json.Unmarshal([]byte(out), &line), "%v: %q", never, out)
		require.Equal(t, "failed", line.Status, "%v", never)
		require.Equal(t, err.Error(), line.Error, "%v", never)
		require.Nil(t, line.ExitCode, "%v", never)
		require.Nil(t, line.Report, "%v", never)
	}

	loop := watFile(t, `(module (func (export "_start") (loop $l (br $l))))`)
	out, _, err = execute(t, "run", guestArgs(t, loop, "--timeout", "200ms", "--json")...)
	require.Equal(t, 1, exitCodeOf(err))
	require.ErrorContains(t, err, "deadline")
	var line runLine
	require.NoError(t, json.Unmarshal([]byte(out), &line))
	require.Equal(t, "deadline", line.Status)
	require.Contains(t, out, `"exit_code":null`, "a guest stopped at its deadline gave no exit code")

	quota := watFile(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $create (i64.const 16) (i32.const 0))) (call $exit (call $create (i64.const 16) (i32.const 4)))))`)
	_, _, err = execute(t, "run", guestArgs(t, quota, "--max-handles", "1")...)
	require.Equal(t, 19, exitCodeOf(err), "the second buffer is past the quota: EDQUOT")
	_, _, err = execute(t, "run", guestArgs(t, quota, "--max-device-bytes", "20")...)
	require.Equal(t, 19, exitCodeOf(err))
	_, _, err = execute(t, "run", guestArgs(t, quota)...)
	require.Equal(t, 0, exitCodeOf(err))

	bomb := watFile(t, `(module (memory 1) (func (export "_start") (loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) unreachable))`)
	out, _, err = execute(t, "run", guestArgs(t, bomb, "--max-memory-pages", "32", "--json")...)
	require.Equal(t, 1, exitCodeOf(err))
	require.NoError(t, json.Unmarshal([]byte(out), &line))
	require.Equal(t, "trapped", line.Status)
	require.Nil(t, line.ExitCode)
	require.Equal(t, uint32(32), line.MemoryPages)

	out, _, err = execute(t, "run", guestArgs(t, argc, "--json")...)
	require.Equal(t, 11, exitCodeOf(err))
	line = runLine{}
	require.NoError(t, json.Unmarshal([]byte(out), &line))
	require.Equal(t, "exit", line.Status)
	require.NotNil(t, line.ExitCode)
	require.Equal(t, uint32(11), *line.ExitCode)
}

// heavyExample is the example guest the command tests run: the
// transformer, or with -short the lighter MLP.
func heavyExample(t *testing.T) (name, path string) {
	name = "transformer"
	if testing.Short() {
		name = "mlp"
	}
	return name, wasmtest.GoFile(t, "examples/"+name, name+".wasm")
}

func TestRunJSON(t *testing.T) {
	devicesOrSkip(t)
	name, transformer := heavyExample(t)
	for _, dry := range []bool{false, true} {
		args := []string{transformer, "--json"}
		if dry {
			args = append(args, "--dry")
		}
		out, errOut, err := execute(t, "run", guestArgs(t, args...)...)
		require.NoError(t, err, errOut)
		require.Equal(t, 1, strings.Count(out, "\n"), "one JSON object; the guest's output went to stderr")
		require.Contains(t, errOut, name+": 10 steps")
		var line runLine
		require.NoError(t, json.Unmarshal([]byte(out), &line))
		require.Equal(t, "ok", line.Status)
		require.Contains(t, out, `"exit_code":0,`)
		require.Equal(t, dry, line.DryRun)
		require.Positive(t, line.WallS)
		require.Positive(t, line.Calls)
		require.Zero(t, line.FailedCalls)
		require.Positive(t, line.LiveBytesPeak)
		require.GreaterOrEqual(t, line.ReservedPeak, line.LiveBytesPeak)
		require.Positive(t, line.MemoryPages)
		require.NotEmpty(t, line.Report.Dynamic)
		_, virtual := line.Report.Dynamic[0].Kind.(memory.VirtualKind)
		if dry {
			require.Zero(t, line.DeviceBytesPeak, "a dry run holds no device memory")
			require.Zero(t, line.DeviceAllocs)
			require.Zero(t, line.DeviceBindCalls, "a dry run binds nothing")
		} else {
			require.Positive(t, line.DeviceBytesPeak)
			require.GreaterOrEqual(t, line.DeviceBytesPeak, line.ReservedPeak, "the pools' pages are device memory")
			require.Positive(t, line.DeviceAllocs)
			require.Positive(t, line.DeviceAllocationsPeak)
			if virtual {
				require.Positive(t, line.DeviceBindCalls, "the virtual pools bound memory under the buffers")
			} else {
				require.Zero(t, line.DeviceBindCalls, "without sparse residency the pools are pages, bound to nothing")
			}
		}
	}
}

func TestPlanGuestVerify(t *testing.T) {
	devicesOrSkip(t)
	name, transformer := heavyExample(t)
	planFile := filepath.Join(t.TempDir(), "plan.json")
	out, errOut, err := execute(t, "plan", guestArgs(t, transformer, "--verify", "--json", "--out", planFile)...)
	require.NoError(t, err, errOut)
	var line planWasmLine
	require.NoError(t, json.Unmarshal([]byte(out), &line))
	require.Zero(t, line.DryRun.DeviceBytes, "the dry run holds no device memory")
	require.Zero(t, line.DryRun.DeviceAllocs, "the dry run makes no device allocation")
	require.NotEmpty(t, line.DryRun.Report.Dynamic)
	require.Positive(t, line.DryRun.WallS)
	require.NotNil(t, line.Plan)
	require.Positive(t, line.Capacity)
	require.NotNil(t, line.Verify)
	require.True(t, line.Verify.OK)
	require.Zero(t, line.Verify.Spills)
	require.Equal(t, line.DryRun.PeakLiveBytes, line.Verify.PeakLiveBytes)
	require.Equal(t, line.Capacity+line.Verify.PersistentBytes, line.Verify.ReservedPeakBytes, "the real run reserved what the plan said")
	require.Equal(t, line.Verify.ReservedPeakBytes, line.Verify.DeviceBytesPeak, "and the device held exactly that")
	require.Positive(t, line.Verify.DeviceAllocs)
	if _, virtual := line.DryRun.Report.Dynamic[0].Kind.(memory.VirtualKind); virtual {
		require.Positive(t, line.Verify.DeviceBindCalls, "the real run bound memory under its buffers")
	} else {
		require.Zero(t, line.Verify.DeviceBindCalls, "without sparse residency nothing is bound")
	}
	require.Positive(t, line.Verify.WallS)
	require.Equal(t, 2, strings.Count(errOut, name+": 10 steps"), "the guest ran twice: dry, then for real")

	written, err := plan.ReadFile(planFile)
	require.NoError(t, err)
	require.True(t, written.Layout.Equal(*line.Plan))

	out, errOut, err = execute(t, "plan", guestArgs(t, transformer)...)
	require.NoError(t, err, errOut)
	require.Contains(t, out, "dry run:  ")
	require.Contains(t, out, "0 B of device memory held")
	require.NotContains(t, out, "verify:")

	// The text says what the real run cost the device, as --json does.
	out, errOut, err = execute(t, "plan", guestArgs(t, transformer, "--verify")...)
	require.NoError(t, err, errOut)
	require.Regexp(t, fmt.Sprintf(`verify: +ok .* of device memory in %d device allocations`, line.Verify.DeviceAllocs), out)
	if line.Verify.DeviceBindCalls > 0 {
		require.Contains(t, out, fmt.Sprintf(" and %d sparse-binding submissions\n", line.Verify.DeviceBindCalls))
	} else {
		require.NotContains(t, out, "sparse-binding submissions")
	}
}

// --layout is the layout the dry run is measured under.
func TestPlanGuestMeasuresUnderItsLayout(t *testing.T) {
	devicesOrSkip(t)
	mlp := wasmtest.GoFile(t, "examples/mlp", "mlp.wasm")
	out, errOut, err := execute(t, "plan", guestArgs(t, mlp, "--layout", "exclusive-pages", "--json", "--", "--steps", "2")...)
	require.NoError(t, err, errOut)
	var line planWasmLine
	require.NoError(t, json.Unmarshal([]byte(out), &line))
	require.NotEmpty(t, line.DryRun.Report.Dynamic)
	for _, p := range line.DryRun.Report.Dynamic {
		require.IsType(t, memory.ExclusiveKind{}, p.Kind, "measured under exclusive pages: %v", p)
	}
}

// A plan measured on a small run, written with --out, is what --layout of
// vkrt run takes: the same run fits it, a bigger one spills and grows past
// it, and says by how much.
func TestPlanSmallThenRunBigger(t *testing.T) {
	devicesOrSkip(t)
	mlp := wasmtest.GoFile(t, "examples/mlp", "mlp.wasm")
	planFile := filepath.Join(t.TempDir(), "plan.json")
	_, errOut, err := execute(t, "plan", guestArgs(t, mlp, "--out", planFile, "--", "--steps", "4")...)
	require.NoError(t, err, errOut)

	run := func(args ...string) runLine {
		out, errOut, err := execute(t, "run", guestArgs(t, append([]string{mlp, "--json", "--layout", planFile, "--"}, args...)...)...)
		require.NoError(t, err, errOut)
		var line runLine
		require.NoError(t, json.Unmarshal([]byte(out), &line))
		require.Equal(t, "ok", line.Status, "the guest checked its numbers either way")
		require.Positive(t, line.PlanCapacity)
		return line
	}
	same := run("--steps", "4")
	require.Zero(t, same.Spills)
	require.Zero(t, same.GrowthBytes)
	bigger := run("--steps", "4", "--scale", "3")
	require.Positive(t, bigger.Spills)
	require.Positive(t, bigger.GrowthBytes)
	require.Equal(t, bigger.PlanCapacity, same.PlanCapacity)
	require.Greater(t, bigger.ReservedPeak, same.ReservedPeak)
}

// A negative --timeout is refused, not taken as no deadline.
func TestRunRefusesANegativeTimeout(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.wasm")
	for _, cmd := range []string{"run", "plan"} {
		_, _, err := execute(t, cmd, "--timeout", "-5s", missing)
		require.ErrorContains(t, err, "--timeout -5s: want a positive duration", cmd)
	}
}

// Guest limits the host would not apply as asked (0 handles taken as the
// default, a quota past the handle table capped, memory past 65,535 pages)
// are refused naming the flag, before a device is opened.
func TestRunRefusesGuestLimitsItCannotHonour(t *testing.T) {
	guest := watFile(t, `(module (memory 1) (func (export "_start")))`)
	for _, c := range []struct{ flag, value, want string }{
		{"--max-handles", "0", "--max-handles 0: want 1 to 1048575"},
		{"--max-handles", "1048576", "--max-handles 1048576: want 1 to 1048575"},
		{"--max-memory-pages", "0", "--max-memory-pages 0: want 1 to 65535"},
		{"--max-memory-pages", "65536", "--max-memory-pages 65536: want 1 to 65535"},
		{"--device", "-1", "--device -1: want a device index, 0 or more (vkrt devices lists them)"},
	} {
		for _, cmd := range []string{"run", "plan"} {
			_, stderr, err := execute(t, cmd, guestArgs(t, guest, c.flag, c.value)...)
			require.EqualError(t, err, c.want, "%s %s %s", cmd, c.flag, c.value)
			require.Empty(t, stderr, "no word of a compilation cache")
		}
	}
}

// A guest whose memory starts past --max-memory-pages is refused with both
// sizes exact and the flag that would hold it: wazero's own refusal read
// "min 20000 pages (1 Gi) over limit of 16384 pages (1 Gi)".
func TestRunNamesTheMemoryLimitAGuestStartsPast(t *testing.T) {
	devicesOrSkip(t)
	for _, c := range []struct{ pages, flags, want string }{
		{"20000", "", "its memory starts at 20000 pages of 64 KiB (1310720000 B); the host allows at most 16384 pages (1073741824 B) (--max-memory-pages 20000 would hold it)"},
		{"101", "--max-memory-pages 100", "its memory starts at 101 pages of 64 KiB (6619136 B); the host allows at most 100 pages (6553600 B) (--max-memory-pages 101 would hold it)"},
		{"65536", "", "its memory starts at 65536 pages of 64 KiB (4294967296 B); the host allows at most 16384 pages (1073741824 B) (no guest may start above 65535 pages)"},
	} {
		guest := watFile(t, `(module (memory `+c.pages+`) (func (export "_start")))`)
		for _, cmd := range []string{"run", "plan"} {
			_, _, err := execute(t, cmd, guestArgs(t, append(strings.Fields(c.flags), guest)...)...)
			require.ErrorIs(t, err, wasmhost.ErrRefused, "%s of a memory of %s pages", cmd, c.pages)
			require.ErrorContains(t, err, c.want, "%s of a memory of %s pages", cmd, c.pages)
		}
	}
	// At the limit the guest runs.
	_, _, err := execute(t, "run", guestArgs(t, "--max-memory-pages", "20", watFile(t, `(module (memory 20) (func (export "_start")))`))...)
	require.NoError(t, err)
}

// A guest file is read no further than the command can use it: /dev/zero
// (not WebAssembly from its first byte) and a stream of WebAssembly's magic
// and zeros without end were read until the process died out of memory; a
// file past the most vkrt reads is refused without being read.
func TestRunReadsNoMoreOfAGuestThanItCanRun(t *testing.T) {
	devicesOrSkip(t)
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero:", err)
	}
	defer func(n int64) { maxGuestBytes = n }(maxGuestBytes)
	maxGuestBytes = 1 << 20
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero.wasm")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	big := filepath.Join(dir, "big.wasm")
	require.NoError(t, os.WriteFile(big, append([]byte("\x00asm\x01\x00\x00\x00"), make([]byte, maxGuestBytes)...), 0o644))
	for _, cmd := range []string{"run", "plan"} {
		_, _, err := execute(t, cmd, guestArgs(t, zero)...)
		require.ErrorContains(t, err, "not a WebAssembly binary (it starts 00 00 00 00)", cmd)

		_, _, err = execute(t, cmd, guestArgs(t, big)...)
		require.EqualError(t, err, fmt.Sprintf("%s: a module of %d B; vkrt reads at most %d B", big, maxGuestBytes+8, maxGuestBytes), cmd)

		r, w, err := os.Pipe()
		require.NoError(t, err)
		go func() {
			defer w.Close()
			if _, err := w.Write([]byte("\x00asm\x01\x00\x00\x00")); err != nil {
				return
			}
			zeros := make([]byte, 64<<10)
			for {
				if _, err := w.Write(zeros); err != nil {
					return
				}
			}
		}()
		endless := filepath.Join(dir, cmd+"-endless.wasm")
		require.NoError(t, os.Symlink(fmt.Sprintf("/proc/self/fd/%d", r.Fd()), endless))
		_, _, err = execute(t, cmd, guestArgs(t, endless)...)
		r.Close()
		require.EqualError(t, err, fmt.Sprintf("%s: a module of more than %d B; vkrt reads at most %d B", endless, maxGuestBytes, maxGuestBytes), cmd)
	}
}

// A compilation cache the user's cache directory cannot hold is a note on
// stderr, and the guest runs compiled; a host that cannot start for another
// reason is that reason alone.
func TestRunWithoutTheDefaultCompilationCacheCompiles(t *testing.T) {
	devicesOrSkip(t)
	notADir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notADir, nil, 0o644))
	t.Setenv("XDG_CACHE_HOME", notADir)
	t.Setenv("HOME", notADir)
	guest := watFile(t, `(module (memory 1) (func (export "_start")))`)
	t.Setenv(environment.DirEnvVar, t.TempDir())
	_, stderr, err := execute(t, "run", "--compile-cache", defaultCompileCache(), "--env", "test", guest)
	require.NoError(t, err)
	require.Contains(t, stderr, "vkrt: no compilation cache (")
	require.Contains(t, stderr, "compiling the guest")
}

// A cache directory that is a file is said in vkrt's words, not wazero's
// ("is not dir"), and matches syscall.ENOTDIR; the note on a default cache
// the user's cache directory cannot hold escapes the path, which comes
// from $XDG_CACHE_HOME or $HOME, as the error line escapes it.
func TestACompilationCacheThatIsAFileIsSaidSo(t *testing.T) {
	devicesOrSkip(t)
	guest := watFile(t, `(module (memory 1) (func (export "_start")))`)
	t.Setenv(environment.DirEnvVar, t.TempDir())
	cacheHome := filepath.Join(t.TempDir(), "cache\x1b]0;title\x07")
	require.NoError(t, os.MkdirAll(filepath.Join(cacheHome, "vkrt"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(cacheHome, "vkrt", "wazero"), nil, 0o644))
	t.Setenv("XDG_CACHE_HOME", cacheHome)
	t.Setenv("HOME", cacheHome)
	_, stderr, err := execute(t, "run", "--compile-cache", defaultCompileCache(), "--env", "test", guest)
	require.NoError(t, err)
	require.Contains(t, stderr, "vkrt: no compilation cache (")
	require.Contains(t, stderr, `cache\x1b]0;title\a/vkrt/wazero: not a directory`)
	require.NotContains(t, stderr, "\x1b", "no escape reaches the terminal")
	require.NotContains(t, stderr, "is not dir")

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, _, err = execute(t, "run", "--compile-cache", file, "--env", "test", guest)
	require.ErrorIs(t, err, syscall.ENOTDIR)
	require.ErrorContains(t, err, "mkdir "+file+": not a directory")
}

// A plan file, an allocation trace or a module in the text format given
// as the workload is refused as a module still (status "refused"), the
// error saying what the file is and where it goes, as vkrt replay says a
// guest or a plan file given as a trace is.
func TestRunSaysWhatAFileGivenAsTheWorkloadIs(t *testing.T) {
	devicesOrSkip(t)
	tr := writeTrace(t, "first.trace", shortRun)
	planFile := filepath.Join(t.TempDir(), "first.plan")
	_, _, err := execute(t, "plan", tr, "--out", planFile)
	require.NoError(t, err)
	wat := filepath.Join(t.TempDir(), "guest.wat")
	require.NoError(t, os.WriteFile(wat, []byte(`(module (func (export "_start")))`), 0o644))
	other := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(other, []byte("hello"), 0o644))
	for path, want := range map[string]string{
		planFile: planFile + " is a plan file, not a WebAssembly workload: give it to --layout",
		tr:       tr + " is an allocation trace, not a WebAssembly workload: replay it (vkrt replay " + tr + ")",
		wat:      wat + " is WebAssembly text",
		other:    "",
	} {
		_, _, err := execute(t, "run", guestArgs(t, path)...)
		require.ErrorIs(t, err, wasmhost.ErrRefused, path)
		require.ErrorContains(t, err, "not a WebAssembly binary", path)
		if want == "" {
			require.NotContains(t, err.Error(), "; ", "nothing to add for a file of no kind vkrt knows")
			continue
		}
		require.ErrorContains(t, err, want)
		out, _, _ := execute(t, "run", guestArgs(t, path, "--json")...)
		var line runLine
		require.NoError(t, json.Unmarshal([]byte(out), &line), out)
		require.Equal(t, "refused", line.Status, path)
	}
}

// exitsInTheRealRun is a guest that makes a buffer and, in a real run
// only, exits 3: the real run of vkrt plan --verify fails.
const exitsInTheRealRun = `(module
  (import "vkrt_v1" "is_dry_run" (func $dry (param i32) (result i32)))
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $create (i64.const 4096) (i32.const 8)))
    (drop (call $dry (i32.const 0)))
    (if (i32.eqz (i32.load (i32.const 0))) (then (call $exit (i32.const 3))))))`

// A plan whose real run fails under --verify is written, saying so, not
// offered for use: "use it with --layout" stood above "verify: FAILED".
func TestPlanVerifyThatFailsSaysSoWhereThePlanIsWritten(t *testing.T) {
	guest := watFile(t, exitsInTheRealRun)
	out := filepath.Join(t.TempDir(), "v.plan")
	stdout, _, err := execute(t, "plan", guestArgs(t, guest, "--verify", "--out", out)...)
	require.Error(t, err)
	require.Contains(t, stdout, "verify:   FAILED")
	require.Contains(t, stdout, "but the real run under it failed")
	require.NotContains(t, stdout, "use it with --layout")
	_, err = os.Stat(out)
	require.NoError(t, err, "the plan is written all the same")
}

// A plan that fails once the dry run has ended well still gives --json its
// line, with the command's error in it, as vkrt run --json gives one for a
// run that failed: stdout was empty, and a script reading it got nothing to
// read. The command still fails, saying why on stderr.
func TestPlanJSONGivesItsLineWhenPlanningFails(t *testing.T) {
	devicesOrSkip(t)
	line := func(stdout string, err error) planWasmLine {
		t.Helper()
		require.Error(t, err)
		require.Equal(t, 1, exitCodeOf(err))
		require.Equal(t, 1, strings.Count(stdout, "\n"), "one line: %q", stdout)
		var l planWasmLine
		require.NoError(t, json.Unmarshal([]byte(stdout), &l), stdout)
		require.Equal(t, err.Error(), l.Error, "the line says what stderr says")
		require.NotEmpty(t, l.DryRun.Report.Dynamic, "the dry run's figures")
		return l
	}
	buffer := watFile(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $create (i64.const 1024) (i32.const 0)))))`)

	// /dev/full passes the check before the runs, and refuses the plan
	// file once it is made.
	stdout, _, err := execute(t, "plan", guestArgs(t, buffer, "--json", "--out", "/dev/full")...)
	require.ErrorIs(t, err, syscall.ENOSPC)
	l := line(stdout, err)
	require.NotNil(t, l.Plan, "the plan was made, and not written")
	require.Equal(t, uint64(1024), l.DryRun.PeakLiveBytes)

	// The planner refuses a dry run that made no buffer: no plan.
	stdout, _, err = execute(t, "plan", guestArgs(t, watFile(t, `(module (memory 1) (func (export "_start")))`), "--json")...)
	require.ErrorIs(t, err, plan.ErrCannotPlan)
	l = line(stdout, err)
	require.Nil(t, l.Plan)
	require.NotContains(t, stdout, `"plan":`)
	require.Contains(t, l.Error, "nothing to plan")

	// The real run of --verify fails: the verification says why, and so
	// does the line.
	exitsForReal := watFile(t, exitsInTheRealRun)
	stdout, _, err = execute(t, "plan", guestArgs(t, exitsForReal, "--json", "--verify")...)
	l = line(stdout, err)
	require.NotNil(t, l.Verify)
	require.False(t, l.Verify.OK)
	require.Equal(t, l.Error, l.Verify.Error)

	// A plan that succeeds has no error.
	stdout, _, err = execute(t, "plan", guestArgs(t, buffer, "--json", "--verify")...)
	require.NoError(t, err)
	require.NotContains(t, stdout, `"error"`)
}

// A guest that installs a layout of its own in the real run replaced the
// plan: the run did not follow it, so --verify fails, saying so, where it
// said "ok" with 0 spills (they were counted from the guest's install)
// though the run reserved a megabyte past the plan's 4 KB.
func TestPlanVerifyFailsWhereTheGuestReplacesThePlan(t *testing.T) {
	devicesOrSkip(t)
	ownForReal := watFile(t, `(module
  (import "vkrt_v1" "is_dry_run" (func $dry (param i32) (result i32)))
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (import "vkrt_v1" "memory_install" (func $install (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "direct")
  (func (export "_start")
    (drop (call $dry (i32.const 0)))
    (if (i32.eqz (i32.load (i32.const 0))) (then
      (if (call $install (i32.const 64) (i32.const 6)) (then unreachable))
      (drop (call $create (i64.const 1048576) (i32.const 8)))))
    (drop (call $create (i64.const 4096) (i32.const 8)))))`)
	out := filepath.Join(t.TempDir(), "p.plan")
	stdout, stderr, err := execute(t, "plan", guestArgs(t, ownForReal, "--verify", "--json", "--out", out)...)
	require.ErrorIs(t, err, client.ErrPlanReplaced, stderr)
	defer func() {
		// vkrt run under the plan says the guest replaced it, so its
		// spills and growth are not read as the plan's.
		for _, c := range []struct {
			guest    string
			replaced bool
		}{{ownForReal, true}, {watFile(t, `(module (memory (export "memory") 1) (func (export "_start")))`), false}} {
			stdout, stderr, err := execute(t, "run", guestArgs(t, c.guest, "--json", "--layout", out)...)
			require.NoError(t, err, stderr)
			var line runLine
			require.NoError(t, json.Unmarshal([]byte(stdout), &line), stdout)
			require.Equal(t, c.replaced, line.InstalledLayout, stdout)
			require.Contains(t, stdout, fmt.Sprintf(`"installed_layout":%v`, c.replaced))
		}
	}()
	require.Equal(t, 1, exitCodeOf(err))
	var line planWasmLine
	require.NoError(t, json.Unmarshal([]byte(stdout), &line), stdout)
	require.NotNil(t, line.Verify)
	require.True(t, line.Verify.PlanReplaced)
	require.False(t, line.Verify.OK)
	require.Contains(t, line.Verify.Error, "did not follow the plan")
	require.Equal(t, err.Error(), line.Error)
	require.FileExists(t, out, "the plan is written, as for a run that spilled")

	stdout, _, err = execute(t, "plan", guestArgs(t, ownForReal, "--verify", "--out", out)...)
	require.ErrorIs(t, err, client.ErrPlanReplaced)
	require.Contains(t, stdout, "verify:   FAILED")
	require.Contains(t, stdout, "the guest installed a layout of its own (memory_install): the run did not follow the plan")
	require.Contains(t, stdout, "but the real run did not run under it")
	require.NotContains(t, stdout, "use it with --layout")

	// A guest that leaves the plan in place is verified as before.
	stdout, _, err = execute(t, "plan", guestArgs(t, watFile(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $create (i64.const 4096) (i32.const 8)))))`), "--verify", "--json")...)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(stdout), &line), stdout)
	require.True(t, line.Verify.OK)
	require.False(t, line.Verify.PlanReplaced)
	require.Contains(t, stdout, `"plan_replaced":false`)
}

// fullWriter refuses every write, as stdout on a full disk does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// The --json line is the run's result: one that could not be written
// fails the command, as records, replay and devices do; run ignored the
// error and exited 0 with nothing written (vkrt run --json > /dev/full).
func TestRunJSONLineThatCannotBeWrittenFails(t *testing.T) {
	devicesOrSkip(t)
	ok := watFile(t, `(module (memory (export "memory") 1) (func (export "_start")))`)
	argc := watFile(t, exitWithArgc)
	for _, c := range []struct {
		guest string
		code  int
	}{{ok, 1}, {argc, 11}} {
		_, _, err := execute(t, "run", guestArgs(t, "--json", c.guest)...)
		if c.code == 1 {
			require.NoError(t, err, "written, the line succeeds")
		}
		err = executeToFullStdout(t, "run", guestArgs(t, "--json", c.guest)...)
		require.ErrorIs(t, err, syscall.ENOSPC)
		require.Equal(t, c.code, exitCodeOf(err), "a guest's own exit code is kept")
	}
	buffer := watFile(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $create (i64.const 1024) (i32.const 0)))))`)
	_, _, err := execute(t, "plan", guestArgs(t, "--json", buffer)...)
	require.NoError(t, err, "written, plan's line succeeds")
	require.ErrorIs(t, executeToFullStdout(t, "plan", guestArgs(t, "--json", buffer)...), syscall.ENOSPC, "plan --json")
}

// executeToFullStdout runs `vkrt name args...` as execute does, with a
// stdout that refuses every write.
func executeToFullStdout(t *testing.T, name string, args ...string) error {
	t.Helper()
	for _, c := range rootCmd.Commands() {
		if c.Name() == name {
			c.Flags().VisitAll(func(f *pflag.Flag) {
				require.NoError(t, f.Value.Set(f.DefValue))
				f.Changed = false
			})
		}
	}
	rootCmd.SetOut(fullWriter{})
	defer setCommandLine(append([]string{name}, args...))()
	defer rootCmd.SetOut(nil)
	return rootCmd.ExecuteContext(t.Context())
}

// A summary written in many lines fails the command when stdout refuses
// it, as a JSON line does: vkrt plan WORKLOAD without --out (the summary
// is all it gives) and vkrt conformance --list exited 0 with nothing
// written.
func TestTextOutputThatCannotBeWrittenFails(t *testing.T) {
	require.ErrorIs(t, executeToFullStdout(t, "conformance", "--list"), syscall.ENOSPC, "conformance --list")
	devicesOrSkip(t)
	buffer := watFile(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $create (i64.const 1024) (i32.const 0)))))`)
	require.ErrorIs(t, executeToFullStdout(t, "plan", guestArgs(t, buffer)...), syscall.ENOSPC, "plan")
}

// A damaged entry of the compilation cache is not the module's fault: the
// guest is compiled anew, the entry replaced, and the next run reads it
// without a word (the module was refused on every run, the cache blamed
// on the module).
func TestADamagedCompilationCacheEntryIsReplaced(t *testing.T) {
	devicesOrSkip(t)
	guest := watFile(t, exitWithArgc)
	cache := t.TempDir()
	t.Setenv(environment.DirEnvVar, t.TempDir())
	run := func() (string, error) {
		_, stderr, err := execute(t, "run", "--compile-cache", cache, guest)
		return stderr, err
	}
	_, err := run()
	require.Equal(t, 11, exitCodeOf(err))
	var entries []string
	require.NoError(t, filepath.WalkDir(cache, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			entries = append(entries, path)
		}
		return err
	}))
	require.NotEmpty(t, entries, "the cache holds the compiled guest")
	for _, e := range entries {
		require.NoError(t, os.WriteFile(e, []byte("WAZEVO"), 0o644)) // cut short
	}
	stderr, err := run()
	require.Equal(t, 11, exitCodeOf(err), "the guest ran: %v", err)
	require.Contains(t, stderr, "held a damaged entry for "+guest)
	for _, e := range entries {
		// Whole, its magic number raw bytes, which wazero's words quote.
		data, err := os.ReadFile(e)
		require.NoError(t, err)
		copy(data, "\xff\xfe\x01w5\x02")
		require.NoError(t, os.WriteFile(e, data, 0o644))
	}
	stderr, err = run()
	require.Equal(t, 11, exitCodeOf(err), "the guest ran: %v", err)
	require.Contains(t, stderr, "held a damaged entry for "+guest)
	// The raw bytes reached the terminal as they were.
	require.Contains(t, stderr, `\xff\xfe\x01w5\x02`)
	require.True(t, utf8.ValidString(stderr), "%q", stderr)
	require.NotRegexp(t, "[\\x00-\\x09\\x0b-\\x1f\\x7f\\x{fffd}]", stderr)
	for _, e := range entries {
		fi, err := os.Stat(e)
		require.NoError(t, err)
		require.Greater(t, fi.Size(), int64(len("WAZEVO")), "%s was replaced", e)
	}
	stderr, err = run()
	require.Equal(t, 11, exitCodeOf(err))
	require.Empty(t, stderr, "the replaced entry reads back")
}

// A module refused before it runs leaves no environment behind: --env
// made the environment's file, and its directory, before the module was
// read.
func TestARefusedModuleMakesNoEnvironment(t *testing.T) {
	devicesOrSkip(t)
	notWasm := filepath.Join(t.TempDir(), "not.wasm")
	require.NoError(t, os.WriteFile(notWasm, []byte("garbage\n"), 0o644))
	envDir := filepath.Join(t.TempDir(), "envs", "more")
	t.Setenv(environment.DirEnvVar, envDir)
	for _, cmd := range []string{"run", "plan"} {
		_, _, err := execute(t, cmd, "--env", "fresh", notWasm)
		require.ErrorContains(t, err, "not a WebAssembly binary", cmd)
		_, statErr := os.Stat(filepath.Dir(envDir))
		require.ErrorIs(t, statErr, fs.ErrNotExist, "%s made no environment directory", cmd)
	}
	// An environment that was there stays.
	require.NoError(t, os.MkdirAll(envDir, 0o755))
	_, _, err := execute(t, "run", "--env", "fresh", watFile(t, `(module (memory 1) (func (export "_start")))`))
	require.NoError(t, err)
	_, _, err = execute(t, "run", "--env", "fresh", notWasm)
	require.Error(t, err)
	_, err = os.Stat(filepath.Join(envDir, "fresh.sqlite"))
	require.NoError(t, err, "the environment made by the run before stays")
}

// A run refused before its guest starts takes away the environment it was
// to make only where no other process opened it meanwhile: it removed the
// file another run was writing into, and that run's records with it.
func TestARefusedRunKeepsAnEnvironmentAnotherOpened(t *testing.T) {
	ctx := context.Background()
	t.Setenv(environment.DirEnvVar, filepath.Join(t.TempDir(), "envs"))
	for _, other := range []string{"wrote", "holds open", "is making", "none"} {
		t.Run(other, func(t *testing.T) {
			name := strings.ReplaceAll(other, " ", "-")
			made := environmentToMake(name)
			require.NotEmpty(t, made.file)
			if other == "is making" {
				// Its schema's transaction under way: an empty file and
				// the journal beside it.
				require.NoError(t, os.MkdirAll(filepath.Dir(made.file), 0o755))
				require.NoError(t, os.WriteFile(made.file, nil, 0o644))
				require.NoError(t, os.WriteFile(made.file+"-journal", []byte("journal"), 0o644))
				made.remove()
				_, err := os.Stat(made.file)
				require.NoError(t, err, "the environment another process is making stays")
				return
			}
			env, err := environment.Open(name) // the refused run's, or another's
			require.NoError(t, err)
			switch other {
			case "wrote":
				_, err = env.PutJSON(ctx, "other", "kept", []byte(`{}`))
				require.NoError(t, err)
				require.NoError(t, env.Close())
			case "holds open":
				defer env.Close()
			default:
				require.NoError(t, env.Close())
			}
			made.remove()
			_, err = os.Stat(made.file)
			if other == "none" {
				require.ErrorIs(t, err, fs.ErrNotExist, "an environment no one else opened goes")
				return
			}
			require.NoError(t, err, "the environment another process %s stays", other)
			if other == "wrote" {
				reader, err := environment.Open(name, environment.ReadOnly())
				require.NoError(t, err)
				defer reader.Close()
				recs, err := reader.Query(ctx, environment.Query{})
				require.NoError(t, err)
				require.Len(t, recs, 1)
			}
		})
	}
}

// A run that spills past its plan says how much it reserved past the
// plan's and the persistent pool's bytes, so that the parts of the
// reserved peak add up (4.19 MB and 0 B were given as the parts of 46 MB).
func TestPlanVerifyOfASpillingRunSaysWhatItReservedPastThePlan(t *testing.T) {
	guest := watFile(t, `(module
  (import "vkrt_v1" "is_dry_run" (func $dry (param i32) (result i32)))
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $create (i64.const 4096) (i32.const 8)))
    (drop (call $dry (i32.const 0)))
    (if (i32.eqz (i32.load (i32.const 0))) (then
      (drop (call $create (i64.const 1048576) (i32.const 8)))
      (drop (call $create (i64.const 1048576) (i32.const 8)))
      (drop (call $create (i64.const 1048576) (i32.const 8)))))))`)
	stdout, _, err := execute(t, "plan", guestArgs(t, guest, "--verify", "--layout", "sub-slices")...)
	require.Error(t, err, "the real run spills past its plan")
	require.Regexp(t, `reserved at peak \(the plan's [^)]* and the persistent pool's [^)]*, and [0-9.]+ [kMG]?B past them\)`, stdout)

	stdout, _, err = execute(t, "plan", guestArgs(t, watFile(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $create (i64.const 4096) (i32.const 8)))))`), "--verify", "--layout", "sub-slices")...)
	require.NoError(t, err)
	require.Contains(t, stdout, "verify:   ok")
	require.NotContains(t, stdout, "past them", "a run within its plan reserved nothing past it")
}

// A device index past the loader's list is one error line with one
// "vkrt:", the command's own: the Vulkan backend's errors name their
// package as every other package's do.
func TestRunOnAMissingDeviceSaysSoOnce(t *testing.T) {
	devicesOrSkip(t)
	loop := watFile(t, `(module (func (export "_start")))`)
	_, _, err := execute(t, "run", guestArgs(t, loop, "--device", "99")...)
	require.Error(t, err)
	line := errorLine(err)
	require.Contains(t, line, "no Vulkan device 99")
	require.Equal(t, 1, strings.Count(line, "vkrt:"), line)
}

// A flag left empty refuses the run before it starts, and --json gives
// that run its line as it does a refused --layout: an empty --layout or
// --env wrote none.
func TestRunJSONGivesALineForAnEmptyFlag(t *testing.T) {
	guest := watFile(t, `(module (memory 1) (func (export "_start")))`)
	for _, flag := range []string{"--layout", "--env"} {
		out, _, err := execute(t, "run", "--compile-cache", "", "--json", flag, "", guest)
		require.Equal(t, 1, exitCodeOf(err), flag)
		require.ErrorContains(t, err, flag+" is empty")
		var line runLine
		require.NoError(t, json.Unmarshal([]byte(out), &line), "%s: %q", flag, out)
		require.Equal(t, "failed", line.Status, flag)
		require.Equal(t, guest, line.Workload, flag)
		require.Equal(t, err.Error(), line.Error, flag)
		require.Nil(t, line.ExitCode, flag)
		require.Nil(t, line.Report, flag)
	}
	out, _, err := execute(t, "run", "--compile-cache", "", "--layout", "", guest)
	require.ErrorContains(t, err, "--layout is empty")
	require.Empty(t, out, "no line without --json")
}

// A run refused for its command line (a flag that does not parse, an
// unknown one, no WORKLOAD) never started either, and --json gives its
// line wherever --json stands: it gave none, the flags past the bad one
// unread.
func TestRunJSONGivesALineForABadCommandLine(t *testing.T) {
	guest := watFile(t, `(module (memory 1) (func (export "_start")))`)
	for _, c := range []struct {
		args     []string
		workload string
		dry      bool
		err      string
	}{
		{[]string{"--json", "--timeout", "5", guest}, guest, false, `invalid argument "5" for "--timeout" flag`},
		{[]string{guest, "--max-handles", "abc", "--json"}, guest, false, `invalid argument "abc" for "--max-handles" flag`},
		{[]string{"--timeout=5", "--json=true", "--dry", guest}, guest, true, `invalid argument "5" for "--timeout" flag`},
		{[]string{"--bogus", "--layout", "sub-slices", guest, "--json"}, guest, false, "unknown flag: --bogus"},
		{[]string{"--json"}, "", false, "requires at least 1 arg(s)"},
		// Past "--" the first argument is the workload, as cobra reads it.
		{[]string{"--json", "--timeout", "5", "--", guest, "--json"}, guest, false, `invalid argument "5" for "--timeout" flag`},
	} {
		out, _, err := execute(t, "run", c.args...)
		require.ErrorContains(t, err, c.err, "%v", c.args)
		require.Equal(t, 1, exitStatus(err), "%v", c.args)
		var line runLine
		require.NoError(t, json.Unmarshal([]byte(out), &line), "%v: %q", c.args, out)
		require.Equal(t, "failed", line.Status, "%v", c.args)
		require.Equal(t, c.workload, line.Workload, "%v", c.args)
		require.Equal(t, c.dry, line.DryRun, "%v", c.args)
		require.Equal(t, err.Error(), line.Error, "%v", c.args)
		require.Nil(t, line.ExitCode, "%v", c.args)
		require.Nil(t, line.Report, "%v", c.args)
	}
	for _, args := range [][]string{
		{"--timeout", "5", guest},
		{"--timeout", "5", guest, "--", "--json"}, // the guest's argument
		{"--json=false", "--timeout", "5", guest},
	} {
		out, _, err := execute(t, "run", args...)
		require.ErrorContains(t, err, `invalid argument "5" for "--timeout" flag`, "%v", args)
		require.Empty(t, out, "no line without --json: %v", args)
	}

	// The command line's own path: the line on stdout, the one error line
	// on stderr, exit status 1.
	var stdout, stderr bytes.Buffer
	rootCmd.SetOut(&stdout)
	defer rootCmd.SetOut(nil)
	require.Equal(t, 1, runCommandLine([]string{"run", "--compile-cache", "", "--max-handles", "abc", guest, "--json"}, &stderr))
	require.Equal(t, 1, strings.Count(stderr.String(), "\n"), stderr.String())
	require.Contains(t, stderr.String(), `vkrt run: invalid argument "abc" for "--max-handles" flag`)
	var line runLine
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &line), stdout.String())
	require.Equal(t, guest, line.Workload)
}
