package plan

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTreapAgreesWithASortedSlice drives the treap and a sorted slice with
// the same random inserts and removals and asks both the same questions.
func TestTreapAgreesWithASortedSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type entry struct {
		key    treapKey
		weight uint64
	}
	tr := newTreap()
	var model []entry
	find := func(k treapKey) (int, bool) {
		return slices.BinarySearchFunc(model, k, func(e entry, k treapKey) int {
			switch {
			case e.key.less(k):
				return -1
			case k.less(e.key):
				return 1
			}
			return 0
		})
	}
	for range 20000 {
		k := treapKey{rng.Uint64N(64), rng.Uint64N(4)}
		if i, ok := find(k); ok {
			require.True(t, tr.remove(k))
			model = slices.Delete(model, i, i+1)
		} else {
			require.False(t, tr.remove(k))
			w := rng.Uint64N(1000)
			tr.insert(k, w)
			model = slices.Insert(model, i, entry{k, w})
		}
		q := treapKey{rng.Uint64N(64), rng.Uint64N(4)}
		i, _ := find(q)
		got, _, ok := tr.ceiling(q)
		require.Equal(t, i < len(model), ok)
		if ok {
			require.Equal(t, model[i].key, got)
		}
		got, _, ok = tr.floorBefore(q)
		require.Equal(t, i > 0, ok)
		if ok {
			require.Equal(t, model[i-1].key, got)
		}
		w := rng.Uint64N(1100)
		j := slices.IndexFunc(model, func(e entry) bool { return e.weight >= w })
		got, _, ok = tr.firstWeighing(w)
		require.Equal(t, j >= 0, ok)
		if ok {
			require.Equal(t, model[j].key, got)
		}
		var heaviest uint64
		for _, e := range model {
			heaviest = max(heaviest, e.weight)
		}
		require.Equal(t, heaviest, tr.maxWeight())
		last, ok := tr.last()
		require.Equal(t, len(model) > 0, ok)
		if ok {
			require.Equal(t, model[len(model)-1].key, last)
		}
	}
}

func TestTreapRekeyKeepsOrderAndWeights(t *testing.T) {
	tr := newTreap()
	for i := range uint64(1000) {
		tr.insert(treapKey{10 * i, 0}, i)
	}
	// Move every third key up by 5 with a weight of 5000 + i: still between
	// its neighbours.
	for i := uint64(0); i < 1000; i += 3 {
		tr.rekey(treapKey{10 * i, 0}, treapKey{10*i + 5, 0}, 5000+i)
	}
	for i := range uint64(1000) {
		want, weight := treapKey{10 * i, 0}, i
		if i%3 == 0 {
			want, weight = treapKey{10*i + 5, 0}, 5000+i
		}
		got, w, ok := tr.ceiling(treapKey{10 * i, 0})
		require.True(t, ok)
		require.Equal(t, want, got)
		require.Equal(t, weight, w)
	}
	require.Equal(t, uint64(5000+999), tr.maxWeight())
	k, _, ok := tr.firstWeighing(5000)
	require.True(t, ok)
	require.Equal(t, treapKey{5, 0}, k, "the first heavy key, by the mended subtree weights")
	k, _, ok = tr.firstWeighing(5998)
	require.True(t, ok)
	require.Equal(t, treapKey{9995, 0}, k)
}
