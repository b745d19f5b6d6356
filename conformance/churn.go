package conformance

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

type churnOptions struct {
	// alignmentOnly checks where slices lie and writes no bytes.
	alignmentOnly bool
}

// pageRecorder stands between the pools and the storage under test: it
// learns every page's size, so a slice can be checked against its page,
// and checks every page handle the storage returns.
type pageRecorder struct {
	vkruntime.Storage
	c     *checkState
	align uint64
	pages map[vkruntime.StorageID]uint64
}

func (r *pageRecorder) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	h, err := r.Storage.Alloc(size)
	if err != nil {
		return h, err
	}
	if h.Offset%r.align != 0 {
		r.c.Errorf("Alloc(%d) = %v: the allocation starts %d B past a multiple of the alignment of %d B", size, h, h.Offset%r.align, r.align)
	}
	if _, dup := r.pages[h.ID]; dup {
		r.c.Errorf("Alloc(%d) = %v: the id of a live allocation", size, h)
	}
	r.pages[h.ID] = size
	return h, nil
}

func (r *pageRecorder) Dealloc(id vkruntime.StorageID) {
	delete(r.pages, id)
	r.Storage.Dealloc(id)
}

type liveSlice struct {
	h     memory.Handle
	bytes vkruntime.StorageHandle // the requested bytes of the slice
	seed  uint64
}

// churnSteps is how many reservations and frees one layout's churn makes.
const churnSteps = 240

// churnSize draws a request size: mostly small, some medium, a few large.
func churnSize(rng *rand.Rand, largest uint64) uint64 {
	switch n := rng.IntN(20); {
	case n < 12:
		return 1 + rng.Uint64N(512)
	case n < 19:
		return 512 + rng.Uint64N(48<<10)
	default:
		return 48<<10 + rng.Uint64N(largest-48<<10)
	}
}

// churn reserves and frees through pools of layout l over the target's
// storage, checks where every slice lies and, unless alignmentOnly, writes
// a pattern into every slice and reads every live slice back as it goes.
func churn(c *checkState, t StorageTarget, l memory.Layout, o churnOptions) {
	rec := &pageRecorder{Storage: t.Storage, c: c, align: t.Properties.Alignment, pages: map[vkruntime.StorageID]uint64{}}
	var storage vkruntime.Storage = rec
	if sparse, ok := sparseOf(t); ok {
		storage = sparseRecorder{rec, sparse}
	}
	mgr, err := memory.NewManager(storage, t.Properties, l)
	if err != nil {
		c.Errorf("layout %v: a pool manager over the storage: %v", l, err)
		return
	}
	data := !o.alignmentOnly && t.Memory != nil
	align := t.Properties.Alignment
	largest := uint64(512 << 10)
	if sliced, ok := l.Sliced(); ok {
		for _, p := range sliced {
			largest = min(largest, max(p.PageSize, largest/2))
		}
	}
	rng := rand.New(rand.NewPCG(0x5EED, uint64(l.Kind())))
	var live []liveSlice
	var nextSeed uint64 = 1
	corrupt, failures := 0, 0
	verify := func(s liveSlice, when string) {
		if data {
			corrupt += checkPattern(c, t, s.bytes, s.seed, fmt.Sprintf("layout %v: a slice of %d B (%v) %s", l, s.bytes.Size, s.bytes, when))
		}
	}
	free := func(i int) {
		s := live[i]
		verify(s, "when freed")
		if err := mgr.Free(s.h); err != nil {
			c.Errorf("layout %v: freeing %v: %v", l, s.h, err)
		}
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	for step := range churnSteps {
		switch step {
		case churnSteps / 3:
			mgr.BeginPersistent()
		case churnSteps / 2:
			mgr.EndPersistent()
		}
		if step%60 == 59 {
			for _, s := range live {
				verify(s, fmt.Sprintf("at step %d", step))
			}
		}
		if len(live) >= 40 || (len(live) > 0 && rng.IntN(3) == 0) {
			free(rng.IntN(len(live)))
			continue
		}
		size := churnSize(rng, largest)
		h, err := mgr.Reserve(size, memory.Eager)
		if errors.Is(err, vkruntime.ErrBufferTooBig) {
			continue
		}
		if err != nil {
			c.Errorf("layout %v: reserving %d B: %v", l, size, err)
			if failures++; failures > 3 {
				break
			}
			continue
		}
		sh, err := mgr.Resolve(h)
		if err != nil {
			c.Errorf("layout %v: resolving %v (%d B): %v", l, h, size, err)
			_ = mgr.Free(h)
			continue
		}
		page, known := rec.pages[sh.ID]
		switch {
		case sh.Offset%align != 0 || sh.Size%align != 0:
			c.Errorf("layout %v: a slice for %d B is %v, not on multiples of the alignment of %d B", l, size, sh, align)
		case sh.Size < size:
			c.Errorf("layout %v: a slice for %d B is %v, smaller than asked", l, size, sh)
		case !known:
			c.Errorf("layout %v: a slice for %d B is %v, in no live allocation of the storage", l, size, sh)
		case sh.Offset > page || sh.Size > page-sh.Offset:
			c.Errorf("layout %v: a slice for %d B is %v, past the end of its allocation of %d B", l, size, sh, page)
		}
		s := liveSlice{h: h, bytes: vkruntime.StorageHandle{ID: sh.ID, Offset: sh.Offset, Size: size}, seed: nextSeed}
		nextSeed++
		if data {
			writePattern(c, t, s.bytes, s.seed)
		}
		live = append(live, s)
	}
	for _, s := range live {
		verify(s, "at the end of the churn")
	}
	for len(live) > 0 {
		free(len(live) - 1)
	}
	mgr.Cleanup(true)
	t.Storage.Flush()
	if corrupt > 0 {
		c.Errorf("layout %v: %d corrupt bytes in all over %d steps", l, corrupt, churnSteps)
	}
}
