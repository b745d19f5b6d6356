package htmlreport

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// walk is a random stream of pool states: each step moves one pool's live
// bytes up or down, and the pool's reservation follows with some slack.
func walk(events, pools int, seed uint64) (live, reserved [][]uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	l, r := make([]uint64, pools), make([]uint64, pools)
	for range events {
		p := rng.IntN(pools)
		if rng.IntN(2) == 0 || l[p] < 1000 {
			l[p] += uint64(rng.IntN(1 << 20))
		} else {
			l[p] -= uint64(rng.IntN(int(l[p])))
		}
		// The reservation grows on its own and is now and then cut back
		// to what is live, so its peaks fall elsewhere than live's.
		switch q := rng.IntN(pools); {
		case rng.IntN(20) == 0:
			r[q] = l[q]
		case rng.IntN(3) == 0:
			r[q] += uint64(rng.IntN(1 << 19))
		}
		r[p] = max(r[p], l[p])
		live, reserved = append(live, slices.Clone(l)), append(reserved, slices.Clone(r))
	}
	return live, reserved
}

func downsample(live, reserved [][]uint64, buckets int) []Sample {
	d := NewDownsampler(len(live), buckets, len(live[0]))
	for i := range live {
		d.Add(i, live[i], reserved[i])
	}
	return d.Samples()
}

func TestDownsampleKeepsEveryBucketsExtremesExact(t *testing.T) {
	const events, pools, buckets = 20_000, 4, 300
	live, reserved := walk(events, pools, 7)
	samples := downsample(live, reserved, buckets)
	require.Less(t, len(samples), buckets*(4+2*pools)+1)
	require.Greater(t, len(samples), buckets, "more than one sample per bucket")
	require.True(t, slices.IsSortedFunc(samples, func(a, b Sample) int { return a.Event - b.Event }))
	require.Equal(t, events-1, samples[len(samples)-1].Event, "the last event is kept")

	// Per bucket, the extremes of every series over the full stream must be
	// among the kept samples.
	type extremes struct{ lo, hi []uint64 }
	// The series drawn: the totals, then each edge of the stacked pools.
	series := func(l, r []uint64) []uint64 {
		v := []uint64{sum(l), sum(r)}
		for p := range l {
			v = append(v, sum(r[:p])+l[p], sum(r[:p+1]))
		}
		return v
	}
	fold := func(m map[int]*extremes, b int, v []uint64) {
		e := m[b]
		if e == nil {
			e = &extremes{lo: slices.Clone(v), hi: slices.Clone(v)}
			m[b] = e
		}
		for k := range v {
			e.lo[k], e.hi[k] = min(e.lo[k], v[k]), max(e.hi[k], v[k])
		}
	}
	full, kept := map[int]*extremes{}, map[int]*extremes{}
	for i := range live {
		fold(full, i*buckets/events, series(live[i], reserved[i]))
	}
	for _, s := range samples {
		require.Equal(t, live[s.Event], s.Live, "a kept sample is the real state of its event")
		require.Equal(t, reserved[s.Event], s.Reserved)
		fold(kept, s.Event*buckets/events, series(s.Live, s.Reserved))
	}
	require.Len(t, kept, buckets)
	for b, want := range full {
		require.Equal(t, want.hi, kept[b].hi, "bucket %d: every series' maximum", b)
		require.Equal(t, want.lo[:2], kept[b].lo[:2], "bucket %d: the totals' minimum", b)
	}
}

func TestDownsampleKeepsEveryEventOfAShortStream(t *testing.T) {
	live, reserved := walk(50, 2, 3)
	samples := downsample(live, reserved, 100)
	require.Len(t, samples, 50)
	for i, s := range samples {
		require.Equal(t, i, s.Event)
		require.Equal(t, live[i], s.Live)
		require.Equal(t, reserved[i], s.Reserved)
	}
}
