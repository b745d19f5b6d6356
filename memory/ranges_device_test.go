package memory

import (
	"fmt"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// deviceAgrees checks that the pool knows what the device binds in its
// ranges: every granule the device binds is bound on the device in the
// pool's map, to the same memory, or stale into the chunk that memory is
// in; every granule the map says the device binds, the device binds.
func deviceAgrees(p *virtualPool, s *sparseStorage) error {
	if !p.ranged {
		return nil
	}
	type rng struct {
		id   vkruntime.StorageID
		base uint64
	}
	ranges := []rng{{p.vrange.ID, 0}}
	for _, sg := range p.segs {
		ranges = append(ranges, rng{sg.h.ID, sg.base})
	}
	staleChunk := func(g int) int32 {
		for _, r := range p.stale {
			if g >= r.g && g < r.g+r.n {
				return r.chunk
			}
		}
		return -1
	}
	for key, mem := range s.bound {
		k := -1
		for i, r := range ranges {
			if uint64(r.id) == key[0] {
				k = i
			}
		}
		if k < 0 {
			continue // another pool's range
		}
		g := p.granuleOf(ranges[k].base + key[1])
		if g < p.gm.len() && p.gm.has(p.gm.real, g) {
			ci, at, _ := p.gm.extent(g)
			if c := &p.chunks[ci]; uint64(c.handle.ID) != mem[0] || p.offsetOf(int(at)) != mem[1] {
				return fmt.Errorf("granule %d (range %d at %d): the device binds memory %v, the pool chunk %d at %d", g, k, key[1], mem, ci, at)
			}
			continue
		}
		ci := staleChunk(g)
		if ci < 0 || uint64(p.chunks[ci].handle.ID) != mem[0] {
			return fmt.Errorf("granule %d (range %d at %d): the device binds memory %v, the pool has it neither bound nor stale", g, k, key[1], mem)
		}
	}
	for g := 0; g < p.gm.len(); g++ {
		if !p.gm.has(p.gm.real, g) {
			continue
		}
		id, base, _ := p.rangeAt(p.offsetOf(g))
		if _, ok := s.bound[[2]uint64{uint64(id), p.offsetOf(g) - base}]; !ok {
			return fmt.Errorf("granule %d: the pool has it bound on the device, the device does not", g)
		}
	}
	return nil
}
