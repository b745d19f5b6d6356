package wasmhost

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

const benchGuest = "wasmhost/testdata/guests/bench"

// BenchmarkHostCall times host calls from a Go guest, by the guest's own
// clock (ns/call): a validated 64-byte buffer_write, the three ways it
// fails (EBADF, ERANGE, EFAULT), and sync, the cheapest call there is. ns/op
// includes starting the guest. cpu-ns/call is the process's CPU time over
// the run per call, which other processes on a busy machine inflate less
// than the clock.
func BenchmarkHostCall(b *testing.B) {
	c := openClient(b)
	h := newHost(b, context.Background(), c)
	m := compile(b, h, buildGuest(b, benchGuest))
	for _, mode := range []string{"write", "bad-handle", "out-of-range", "fault", "sync"} {
		b.Run(mode, func(b *testing.B) {
			var out, errOut bytes.Buffer
			cpu := cpuTime()
			_, err := h.Run(context.Background(), m, WithArgs("bench", mode, strconv.Itoa(b.N)), WithClocks(), WithStdout(&out), WithStderr(&errOut))
			require.NoError(b, err, errOut.String())
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/call")
			ns, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
			require.NoError(b, err)
			b.ReportMetric(ns/float64(b.N), "ns/call")
		})
	}
}

// BenchmarkGuestStart is a host started afresh, compiling a Go guest (the
// bench guest, 2.6 MB) and running it to its end: cold compiles it, cached
// finds it in the compilation cache directory a host before it filled, as a
// restarted process would. cpu-ms/op is the process's CPU time per start;
// the compiler uses both cores, so cold it can exceed the clock.
func BenchmarkGuestStart(b *testing.B) {
	c := openClient(b)
	wasm := buildGuest(b, benchGuest)
	start := func(b *testing.B, cacheDir string) {
		ctx := context.Background()
		h, err := New(ctx, c, WithCompilationCacheDir(cacheDir))
		require.NoError(b, err)
		m, err := h.Compile(ctx, wasm)
		require.NoError(b, err)
		_, err = h.Run(ctx, m, WithArgs("bench", "start", "0"))
		require.NoError(b, err)
		require.NoError(b, h.Close(ctx))
	}
	b.Run("cold", func(b *testing.B) {
		cpu := cpuTime()
		for i := range b.N {
			start(b, filepath.Join(b.TempDir(), strconv.Itoa(i)))
		}
		b.ReportMetric(float64(cpuTime()-cpu)/1e6/float64(b.N), "cpu-ms/op")
	})
	b.Run("cached", func(b *testing.B) {
		dir := b.TempDir()
		start(b, dir)
		b.ResetTimer()
		cpu := cpuTime()
		for range b.N {
			start(b, dir)
		}
		b.ReportMetric(float64(cpuTime()-cpu)/1e6/float64(b.N), "cpu-ms/op")
	})
}

// cpuTime is the CPU time the process has used, user and system, in
// nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
