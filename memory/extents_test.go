package memory

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The extent table agrees with a map through random puts and deletes,
// keys crowded into a few homes so that probe runs wrap and deletes shift
// entries back across them.
func TestExtentTableAgreesWithAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var tab extentTable
	want := map[int]extent{}
	for step := range 20000 {
		g := r.IntN(300) * 64
		if _, ok := want[g]; ok && r.IntN(2) == 0 {
			tab.del(g)
			delete(want, g)
		} else {
			e := extent{n: uint32(step), chunk: int32(g), at: uint32(r.IntN(1000))}
			tab.put(g, e)
			want[g] = e
		}
		require.Equal(t, len(want), tab.n)
		if step%97 == 0 {
			for k := 0; k < 300*64; k += 64 {
				e, ok := want[k]
				got := tab.get(k)
				require.Equal(t, ok, got != nil, "granule %d", k)
				if ok {
					require.Equal(t, e, *got, "granule %d", k)
				}
			}
		}
	}
}
