package memory

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// TestRefusalsLeaveNoTrace drives two managers through the same
// stream; the device under one refuses Allocs at random, and what it
// refused the other never sees. A refused call changes nothing, so after
// every step the two agree on every place, report, spill count and the
// sizes the device holds. A reservation that succeeds despite its refused
// Alloc (the arena gave it room its plan's pages had spare, as a device
// out of memory for the fallback pools makes it) is made on the other
// under the same refusal.
func TestRefusalsLeaveNoTrace(t *testing.T) {
	known := testProps
	known.MemorySize = 256 << 20
	cases := []struct {
		name   string
		props  vkruntime.DeviceProperties
		layout Layout
	}{
		{"SubSlices", testProps, SubSlicesLayout()},
		{"ExclusivePages", testProps, ExclusivePagesLayout()},
		{"Direct", testProps, DirectLayout()},
		{"Direct with a known heap", known, DirectLayout()},
		{"Sliced capped", testProps, SlicedLayout(SlicedPool{PageSize: 4096, Pages: u64(2)}, SlicedPool{PageSize: 1 << 20, Pages: u64(3)})},
		{"Sliced forecast", testProps, SlicedLayout(SlicedPool{PageSize: 4096, Pages: u64(2), Grow: true}, SlicedPool{PageSize: 1 << 20, Grow: true})},
		{"Arena", testProps, arenaTestLayout()},
	}
	sizes := []uint64{0, 1, 100, 1000, 1024, 2048, 4000, 5000, 20000, 40000, 70000, 1 << 20, 3 << 20, 9 << 20}
	for _, c := range cases {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("%s/%d", c.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				sa, sb := newRefusingStorage(), newRefusingStorage()
				a, err := NewManager(sa, c.props, c.layout)
				require.NoError(t, err)
				b, err := NewManager(sb, c.props, c.layout)
				require.NoError(t, err)
				a.SetLogger(slog.New(slog.DiscardHandler))
				b.SetLogger(slog.New(slog.DiscardHandler))
				type pair struct{ a, b Handle }
				var live []pair
				for step := range 600 {
					refuse := rng.IntN(3) == 0
					what := fmt.Sprintf("step %d", step)
					switch op := rng.IntN(20); {
					case op < 9:
						size := sizes[rng.IntN(len(sizes))]
						mapping := Mapping(rng.IntN(2))
						if refuse {
							sa.refuse = 1
						}
						ha, err := a.Reserve(size, mapping)
						sa.refuse = 0
						if err != nil {
							if !refuse || !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
								// Not the device's refusal: the other one errs alike.
								_, errB := b.Reserve(size, mapping)
								require.EqualError(t, errB, err.Error(), what)
							}
							break
						}
						if refuse {
							sb.refuse = 1
						}
						hb, err := b.Reserve(size, mapping)
						sb.refuse = 0
						require.NoError(t, err, what)
						require.Equal(t, locate(t, b, hb), locate(t, a, ha), what)
						live = append(live, pair{ha, hb})
					case op < 15 && len(live) > 0:
						i := rng.IntN(len(live))
						require.NoError(t, a.Free(live[i].a), what)
						require.NoError(t, b.Free(live[i].b), what)
						live = append(live[:i], live[i+1:]...)
					case op < 18 && len(live) > 0:
						p := live[rng.IntN(len(live))]
						if refuse {
							sa.refuse = 1
						}
						sha, err := a.Resolve(p.a)
						sa.refuse = 0
						if err != nil {
							require.True(t, refuse, "%s: %v", what, err)
							require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, what)
							break
						}
						shb, err := b.Resolve(p.b)
						require.NoError(t, err, what)
						require.Equal(t, shb.Offset, sha.Offset, what)
						require.Equal(t, shb.Size, sha.Size, what)
					case op == 18 && rng.IntN(4) == 0:
						// Installs are rare: they hold while anything is live.
						l := c.layout
						if rng.IntN(2) == 0 {
							l = SlicedLayout(SlicedPool{PageSize: 4096, MaxSlice: u64(8192)})
						}
						errA, errB := a.Install(l), b.Install(l)
						require.Equal(t, errB, errA, what)
						if errA != nil {
							var ie *InstallError
							require.ErrorAs(t, errA, &ie, what)
						}
					case op == 18:
						explicit := rng.IntN(2) == 0
						a.Cleanup(explicit)
						b.Cleanup(explicit)
					default:
						if a.InPersistent() {
							a.EndPersistent()
							b.EndPersistent()
						} else {
							a.BeginPersistent()
							b.BeginPersistent()
						}
					}
					require.Equal(t, b.Report(), a.Report(), what)
					require.Equal(t, b.Spills(), a.Spills(), what)
					require.Equal(t, slices.Sorted(maps.Values(sb.live)), sa.liveSizes(), what)
					require.NoError(t, a.checkInvariants(), what)
				}
			})
		}
	}
}
