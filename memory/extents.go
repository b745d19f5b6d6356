package memory

import "math/bits"

// extentTable holds a virtual pool's extents by first granule: a hash
// table with open addressing and linear probing, a few nanoseconds a
// lookup where binding a run of granules makes a handful.
type extentTable struct {
	slots []extentSlot // a power of two of them, at most half full
	shift uint         // 64 less log2(len(slots))
	n     int
}

type extentSlot struct {
	key uint64 // the first granule plus one; 0: empty
	e   extent
}

func (t *extentTable) home(key uint64) int {
	return int((key * 0x9e3779b97f4a7c15) >> t.shift)
}

// get is the extent at granule g, or nil. The pointer lasts until the
// next put.
func (t *extentTable) get(g int) *extent {
	if t.n == 0 {
		return nil
	}
	key, mask := uint64(g)+1, len(t.slots)-1
	for i := t.home(key); ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case key:
			return &t.slots[i].e
		case 0:
			return nil
		}
	}
}

// put records e at granule g.
func (t *extentTable) put(g int, e extent) {
	if 2*(t.n+1) > len(t.slots) {
		t.rehash(max(2*len(t.slots), 256))
	}
	key, mask := uint64(g)+1, len(t.slots)-1
	i := t.home(key)
	for ; t.slots[i].key != 0; i = (i + 1) & mask {
		if t.slots[i].key == key {
			t.slots[i].e = e
			return
		}
	}
	t.slots[i] = extentSlot{key, e}
	t.n++
}

// del drops the extent at granule g, which is there, and shifts the
// entries after it back so that no probe sequence breaks.
func (t *extentTable) del(g int) {
	key, mask := uint64(g)+1, len(t.slots)-1
	i := t.home(key)
	for t.slots[i].key != key {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j].key != 0; j = (j + 1) & mask {
		// The entry at j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		if h := t.home(t.slots[j].key); (j-h)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = extentSlot{}
	t.n--
}

func (t *extentTable) rehash(size int) {
	old := t.slots
	t.slots = make([]extentSlot, size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	mask := size - 1
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := t.home(s.key)
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
