package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Figures no measurement can take are refused before a device is opened:
// -copy-reps 0 timed nothing, -copy-bytes under 16 checked a word before
// the copy's start. (-copy-reps 1 and 2 panicked slicing three warm-up
// copies; they now warm up with what there is, on the device.)
func TestCheckFlagsRefusesWhatCannotBeMeasured(t *testing.T) {
	require.NoError(t, checkFlags(1<<30, 20, 4096, 10, 5))
	require.NoError(t, checkFlags(16, 1, 1, 1, 1), "the smallest of each")
	for _, c := range []struct {
		name           string
		copyBytes      uint64
		copyReps       int
		n              uint
		mmReps, trials int
		want           string
	}{
		{"no copy", 1 << 20, 0, 64, 1, 1, "-copy-reps 0"},
		{"no product", 1 << 20, 1, 64, 0, 1, "-matmul-reps 0"},
		{"no trial", 1 << 20, 1, 64, 1, 0, "-trials 0"},
		{"no word", 15, 1, 64, 1, 1, "-copy-bytes 15"},
		{"past 2^32 words", 1 << 34, 1, 64, 1, 1, "-copy-bytes 17179869184"},
		{"no matrix", 1 << 20, 1, 0, 1, 1, "-matmul 0"},
		{"past 2^32 elements", 1 << 20, 1, 65536, 1, 1, "-matmul 65536"},
	} {
		err := checkFlags(c.copyBytes, c.copyReps, c.n, c.mmReps, c.trials)
		require.ErrorContains(t, err, c.want, c.name)
	}
}
