package memory

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		in   uint64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{999, "999 B"},
		{1000, "1.00 KB"},
		{1500, "1.50 KB"},
		{1_048_576, "1.05 MB"},
		{1_000_000, "1.00 MB"},
		{2_000_000_000, "2.00 GB"},
		{13_594_206_920, "13.59 GB"},
		{3_000_000_000_000, "3.00 TB"},
		{math.MaxUint64, "18.45 EB"},
		// Sizes that round up to 1000 of a prefix are shown in the next.
		{999_994, "999.99 KB"},
		{999_995, "1.00 MB"},
		{999_999, "1.00 MB"},
		{999_999_999, "1.00 GB"},
		{1_000_000_000_000_000, "1.00 PB"},
		{999_999_999_999_999_999, "1.00 EB"},
	} {
		require.Equal(t, c.want, FormatBytes(c.in), "FormatBytes(%d)", c.in)
	}
}

func TestUsageString(t *testing.T) {
	u := Usage{NumberAllocs: 1, BytesInUse: 100, BytesPadding: 12, BytesReserved: 1048576}
	require.Equal(t, "Memory Usage Report:\n"+
		" Number of allocations: 1\n"+
		" Bytes in use: 100 B\n"+
		" Bytes used for padding: 12 B\n"+
		" Total bytes reserved: 1.05 MB\n"+
		" Usage efficiency: 0.01%\n"+
		" Padding overhead: 12.00%\n", u.String())

	// An empty reading divides zero by zero, as the reference does.
	require.Contains(t, Usage{}.String(), " Usage efficiency: NaN%\n Padding overhead: NaN%\n")
	require.Contains(t, Usage{BytesInUse: 5}.String(), " Usage efficiency: inf%\n")
	require.Contains(t, Usage{BytesInUse: 3, BytesReserved: 4}.String(), " Usage efficiency: 75.00%\n")
}

func TestUsageCombine(t *testing.T) {
	a := Usage{NumberAllocs: 1, BytesInUse: 2, BytesPadding: 3, BytesReserved: 4}
	b := Usage{NumberAllocs: 10, BytesInUse: 20, BytesPadding: 30, BytesReserved: 40}
	require.Equal(t, Usage{NumberAllocs: 11, BytesInUse: 22, BytesPadding: 33, BytesReserved: 44}, a.Combine(b))
	require.Equal(t, a, a.Combine(Usage{}))
}

// Readings that sum past 2^64 (a report made up, or decoded from one) wrapped
// to a few bytes; each field of the sum stops at math.MaxUint64, alone.
func TestUsageCombineSaturates(t *testing.T) {
	const top = math.MaxUint64
	a := Usage{NumberAllocs: top - 1, BytesInUse: top, BytesPadding: 1 << 63, BytesReserved: 5}
	b := Usage{NumberAllocs: 1, BytesInUse: 1, BytesPadding: 1 << 63, BytesReserved: 7}
	want := Usage{NumberAllocs: top, BytesInUse: top, BytesPadding: top, BytesReserved: 12}
	require.Equal(t, want, a.Combine(b))
	require.Equal(t, want, b.Combine(a))
	huge := Usage{NumberAllocs: top, BytesInUse: top, BytesPadding: top, BytesReserved: top}
	require.Equal(t, huge, huge.Combine(huge))

	r := Report{Persistent: PoolReport{Usage: huge}, Dynamic: []PoolReport{{Usage: a}, {Usage: b}}}
	require.Equal(t, huge, r.Usage())
	require.Contains(t, r.Usage().String(), " Total bytes reserved: 18.45 EB\n")
}

func TestInstallErrorMessages(t *testing.T) {
	for _, c := range []struct {
		err       *InstallError
		want      string
		transient bool
	}{
		{&InstallError{Kind: PoolsInUse, BytesInUse: 4096}, "4096 B still live in the pools", true},
		{&InstallError{Kind: PoolsInUse, BytesInUse: 4096, AllocsInUse: 3}, "4096 B still live in the pools, in 3 reservations", true},
		// Reservations of 0 B hold the pools as any other.
		{&InstallError{Kind: PoolsInUse, BytesInUse: 0, AllocsInUse: 2}, "0 B still live in the pools, in 2 reservations", true},
		{&InstallError{Kind: StreamUnavailable}, "the calling stream is in an error state", false},
		{&InstallError{Kind: Unsupported}, "this backend has no configurable memory pools", false},
		{&InstallError{Kind: InvalidLayout, Reason: "the pool list is empty"}, "the pool layout cannot be honoured: the pool list is empty", false},
	} {
		require.Equal(t, c.want, c.err.Error())
		require.Equal(t, c.transient, c.err.Transient(), c.want)
		require.ErrorIs(t, c.err, &InstallError{Kind: c.err.Kind})
	}
	require.NotErrorIs(t, &InstallError{Kind: PoolsInUse}, &InstallError{Kind: InvalidLayout})
}

// errors.Is with a nil *InstallError as its target (a variable declared
// and never set) panicked reading the target's kind; it names no kind and
// matches none.
func TestInstallErrorIsNilTarget(t *testing.T) {
	var target *InstallError
	err := fmt.Errorf("install: %w", &InstallError{Kind: PoolsInUse, BytesInUse: 16, AllocsInUse: 1})
	require.NotPanics(t, func() { require.False(t, errors.Is(err, target)) })
	require.ErrorIs(t, err, &InstallError{Kind: PoolsInUse})
	var ie *InstallError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, PoolsInUse, ie.Kind)
}
