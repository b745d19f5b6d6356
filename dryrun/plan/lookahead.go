package plan

// arenaTrial records placements made on trial so they can be taken back.
type arenaTrial struct {
	ids   []int32
	nodes []int   // stab tree nodes appended to, in order
	longs []int32 // long-lived allocations placed
	pages []uint64
}

func (b *arenaBuilder) beginTrial() {
	b.trial = b.spareTrial
	if b.trial == nil {
		b.trial = &arenaTrial{}
	}
	t := b.trial
	t.ids, t.nodes, t.longs = t.ids[:0], t.nodes[:0], t.longs[:0]
	t.pages = append(t.pages[:0], b.out.Pages...)
}

// rollback takes back every placement since beginTrial and ends the trial.
func (b *arenaBuilder) rollback() {
	t := b.trial
	for _, id := range t.longs {
		b.removeLong(b.out.Placements[id].Page, id)
		b.out.Placements[id].Page = unplaced
	}
	for _, id := range t.ids {
		b.out.Placements[id].Page = unplaced
	}
	for i := len(t.nodes) - 1; i >= 0; i-- {
		n := t.nodes[i]
		b.tree.nodes[n] = b.tree.nodes[n][:len(b.tree.nodes[n])-1]
	}
	n := len(t.pages)
	b.out.Pages = append(b.out.Pages[:0], t.pages...)
	b.capacity = b.capacity[:n]
	b.byPage = b.byPage[:n]
	b.long = b.long[:n]
	b.trial = nil
	b.spareTrial = t
}

// trialReach is how high the trial's placements reach: the highest page
// they touch, then the highest end in it. It judges a place by the damage
// it does nearby, which the pages' all-time extent, set long before, hides.
func (b *arenaBuilder) trialReach() uint64 {
	var reach uint64
	for _, ids := range [][]int32{b.trial.ids, b.trial.longs} {
		for _, id := range ids {
			pl := b.out.Placements[id]
			reach = max(reach, uint64(pl.Page)<<40|(pl.Offset+b.lifetimes[id].Size))
		}
	}
	return reach
}

type candidatePlace struct {
	page   uint32
	offset uint64
}

// candidates are the places worth trying for allocation id: both ends of
// the lowest holes of each page that hold it, and the top of the page.
func (b *arenaBuilder) candidates(id int32, limit int, out []candidatePlace) []candidatePlace {
	size := b.lifetimes[id].Size
	b.gather(id)
	out = out[:0]
	for p := range b.byPage {
		page := uint32(p)
		var top uint64
		b.byPage[p].holes(func(lo, hi uint64) bool {
			if hi == ^uint64(0) {
				top = lo
				return false
			}
			if hi-lo >= size {
				out = append(out, candidatePlace{page, lo})
				if hi-lo > size {
					out = append(out, candidatePlace{page, hi - size})
				}
			}
			return len(out) < limit
		})
		if len(out) >= limit {
			return out
		}
		if top+size <= b.capacity[p] {
			out = append(out, candidatePlace{page, top})
			// The page's extent may stand above the spans live now: the top
			// of that extent is a place too.
			if ext := b.out.Pages[p]; ext >= top+2*size {
				out = append(out, candidatePlace{page, ext - size})
			}
			return out
		}
	}
	return append(out, candidatePlace{uint32(len(b.byPage)), 0})
}

// lookaheadCandidates bounds the places a large allocation tries: both ends
// of its four lowest holes. Each costs lookaheadHorizon placements, so a
// large allocation costs at most 1 + 8·16 placements of the plain greedy.
const lookaheadCandidates = 8

// lookaheadShare: allocations of at least a hundredth of the peak look
// ahead. Fewer than a hundred such can be live at once, so the lookahead's
// cost stays bounded by the stream's large buffers, and smaller ones move
// the pages' height by under 1 % each.
const lookaheadShare = 100

// assignLookahead places allocations in the order of ids; one of at least
// minSize bytes tries each of its candidate places, lays the next horizon
// allocations greedily after it, and keeps the place whose pages came out
// smallest.
func assignLookahead(lifetimes []lifetime, pageLimit uint64, ids []int32, horizon int, minSize uint64, p *progress) assignment {
	b := newArenaBuilder(lifetimes, pageLimit)
	var cands []candidatePlace
	for i, id := range ids {
		l := lifetimes[id]
		p.placed(i)
		if l.Size < minSize {
			b.place(id, false)
			continue
		}
		cands = b.candidates(id, lookaheadCandidates, cands)
		best, bestCost := cands[0], ^uint64(0)
		if len(cands) > 1 {
			for _, c := range cands {
				b.beginTrial()
				b.placeAt(id, c.page, c.offset)
				for _, next := range ids[i+1 : min(len(ids), i+1+horizon)] {
					b.place(next, false)
				}
				if cost := b.trialReach(); cost < bestCost {
					best, bestCost = c, cost
				}
				b.rollback()
			}
		}
		b.placeAt(id, best.page, best.offset)
	}
	p.add(len(ids) % progressEvery)
	return b.out
}
