package torchalloc

// key orders a set of blocks: the free blocks of a pool by (size, address),
// as the allocator's best-fit set does, its unmapped blocks by (address, 0).
type key struct{ major, minor uint64 }

func (a key) less(b key) bool {
	return a.major < b.major || (a.major == b.major && a.minor < b.minor)
}

// blockSet is an ordered set of blocks (a treap over a node slice, nodes
// recycled), standing in for the std::set the allocator searches: a pool
// holds thousands of free blocks on the long streams, so a sorted slice's
// insertions would dominate the replay.
type blockSet struct {
	nodes []setNode
	root  int32
	spare int32 // first recycled node, linked through left
	seed  uint32
}

type setNode struct {
	key         key
	block       int32
	prio        uint32
	left, right int32
}

func newBlockSet() blockSet { return blockSet{root: -1, spare: -1, seed: 2463534242} }

func (s *blockSet) priority() uint32 {
	// xorshift32: balance only needs priorities that look random.
	s.seed ^= s.seed << 13
	s.seed ^= s.seed >> 17
	s.seed ^= s.seed << 5
	return s.seed
}

func (s *blockSet) node(k key, block int32) int32 {
	n := setNode{key: k, block: block, prio: s.priority(), left: -1, right: -1}
	if s.spare >= 0 {
		i := s.spare
		s.spare = s.nodes[i].left
		s.nodes[i] = n
		return i
	}
	s.nodes = append(s.nodes, n)
	return int32(len(s.nodes) - 1)
}

// split parts the subtree at n into the keys below k and the rest.
func (s *blockSet) split(n int32, k key) (int32, int32) {
	if n < 0 {
		return -1, -1
	}
	if s.nodes[n].key.less(k) {
		l, r := s.split(s.nodes[n].right, k)
		s.nodes[n].right = l
		return n, r
	}
	l, r := s.split(s.nodes[n].left, k)
	s.nodes[n].left = r
	return l, n
}

// join joins two subtrees, every key of a below every key of b.
func (s *blockSet) join(a, b int32) int32 {
	if a < 0 {
		return b
	}
	if b < 0 {
		return a
	}
	if s.nodes[a].prio > s.nodes[b].prio {
		s.nodes[a].right = s.join(s.nodes[a].right, b)
		return a
	}
	s.nodes[b].left = s.join(a, s.nodes[b].left)
	return b
}

func (s *blockSet) insertAt(n, x int32) int32 {
	if n < 0 {
		return x
	}
	if s.nodes[x].prio > s.nodes[n].prio {
		s.nodes[x].left, s.nodes[x].right = s.split(n, s.nodes[x].key)
		return x
	}
	if s.nodes[x].key.less(s.nodes[n].key) {
		s.nodes[n].left = s.insertAt(s.nodes[n].left, x)
	} else {
		s.nodes[n].right = s.insertAt(s.nodes[n].right, x)
	}
	return n
}

func (s *blockSet) insert(k key, block int32) {
	s.root = s.insertAt(s.root, s.node(k, block))
}

func (s *blockSet) removeAt(n int32, k key) int32 {
	if n < 0 {
		panic("torchalloc: removing a block its set does not hold")
	}
	switch nk := s.nodes[n].key; {
	case k.less(nk):
		s.nodes[n].left = s.removeAt(s.nodes[n].left, k)
	case nk.less(k):
		s.nodes[n].right = s.removeAt(s.nodes[n].right, k)
	default:
		joined := s.join(s.nodes[n].left, s.nodes[n].right)
		s.nodes[n].left = s.spare
		s.spare = n
		return joined
	}
	return n
}

func (s *blockSet) remove(k key) { s.root = s.removeAt(s.root, k) }

// atLeast is the block with the smallest key not below k.
func (s *blockSet) atLeast(k key) (key, int32, bool) {
	best := int32(-1)
	for n := s.root; n >= 0; {
		if s.nodes[n].key.less(k) {
			n = s.nodes[n].right
		} else {
			best = n
			n = s.nodes[n].left
		}
	}
	if best < 0 {
		return key{}, -1, false
	}
	return s.nodes[best].key, s.nodes[best].block, true
}

// after is the block with the smallest key above k.
func (s *blockSet) after(k key) (key, int32, bool) {
	if k.minor == ^uint64(0) {
		return s.atLeast(key{k.major + 1, 0})
	}
	return s.atLeast(key{k.major, k.minor + 1})
}

// each calls f on every block in key order until f returns false.
func (s *blockSet) each(f func(key, int32) bool) {
	var walk func(n int32) bool
	walk = func(n int32) bool {
		return n < 0 || (walk(s.nodes[n].left) && f(s.nodes[n].key, s.nodes[n].block) && walk(s.nodes[n].right))
	}
	walk(s.root)
}
