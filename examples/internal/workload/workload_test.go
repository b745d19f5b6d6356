package workload

import (
	"bytes"
	"errors"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/cpuref"
)

func TestParse(t *testing.T) {
	var out bytes.Buffer
	sz, err := Parse("ex", 10, nil, &out)
	require.NoError(t, err)
	require.Equal(t, Sizes{Steps: 10, Scale: 1}, sz)

	sz, err = Parse("ex", 10, []string{"--steps", "3", "-scale=2.5"}, &out)
	require.NoError(t, err)
	require.Equal(t, Sizes{Steps: 3, Scale: 2.5}, sz)

	// --help is a request, not an error: the usage, and ErrHelp for exit 0.
	out.Reset()
	_, err = Parse("ex", 10, []string{"--help"}, &out)
	require.True(t, errors.Is(err, flag.ErrHelp), "%v", err)
	require.Contains(t, out.String(), "-steps")
	require.Contains(t, out.String(), "-scale")

	// A stray argument was ignored and the default sizes ran.
	for _, args := range [][]string{{"20"}, {"--steps", "2", "extra"}, {"--scale", "2", "--", "--steps", "3"}} {
		out.Reset()
		_, err = Parse("ex", 10, args, &out)
		require.Error(t, err, "%q", args)
		require.False(t, errors.Is(err, flag.ErrHelp))
		require.Contains(t, out.String(), "unexpected argument", "%q", args)
	}
	for _, args := range [][]string{{"--steps", "0"}, {"--steps", "100001"}, {"--steps", "1000000000000"}, {"--scale", "NaN"}, {"--scale", "1e5"}, {"--scale", "-1"}, {"--nope"}} {
		out.Reset()
		_, err = Parse("ex", 10, args, &out)
		require.Error(t, err, "%q", args)
		require.NotEmpty(t, out.String(), "%q: said why", args)
	}
	sz, err = Parse("ex", 10, []string{"--steps", "100000"}, &out)
	require.NoError(t, err)
	require.Equal(t, MaxSteps, sz.Steps)
}

func TestLargest(t *testing.T) {
	base := []int{8, 96, 16}
	require.Equal(t, 8, Sizes{Steps: 1, Scale: 1}.Largest(base))
	require.Equal(t, 192, Sizes{Steps: 5, Scale: 2}.Largest(base))
}

// A result of another length is told as such: MaxRelError names no element
// then (-1), and the message indexed want[-1], so the guest panicked
// instead of saying MISMATCH.
func TestMismatchOfAnotherLength(t *testing.T) {
	want, got := []float32{1, 2}, []float32{1}
	e, at := cpuref.MaxRelError(want, got)
	require.Equal(t, "MISMATCH logits: 1 elements, want 2", mismatch("logits", want, got, e, at))
	want, got = []float32{1, 2}, []float32{1, 3}
	e, at = cpuref.MaxRelError(want, got)
	require.Equal(t, "MISMATCH logits: element 1: want 2, got 3 (relative error 0.333 > 0.002)", mismatch("logits", want, got, e, at))
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("input/output error") }

// The closing line is one write, whose failure is returned: fmt.Printf's
// was dropped and the guest exited 0 with its result unreported.
func TestFinish(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, finish(&out, "ex: 2 steps", false))
	require.Equal(t, "ex: 2 steps, every output matches the CPU reference\n", out.String())
	out.Reset()
	require.NoError(t, finish(&out, "ex: 2 steps", true))
	require.Equal(t, "ex: 2 steps (dry run: nothing computed)\n", out.String())
	require.EqualError(t, finish(failingWriter{}, "ex", false), "input/output error")
}

// Check's message names the example and what it was doing, where it said
// "error: ERR" alone.
func TestFailure(t *testing.T) {
	err := errors.New("vkrt: EDQUOT: buffer_create: 655360 B more would take the guest past its quota")
	require.Equal(t, "mlp: step 2 (batch 320): "+err.Error(), failure("mlp", "step 2 (batch 320)", err))
	require.Equal(t, "mlp: "+err.Error(), failure("mlp", "", err))
	require.Equal(t, "error: "+err.Error(), failure("", "", err))
}
