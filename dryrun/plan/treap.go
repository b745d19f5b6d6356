package plan

// treap is an ordered set of keys, each a pair of numbers compared first by
// a then by b, carrying a weight; every subtree knows its largest weight.
// It answers in O(log n) what the sweeps of the planner ask of the live
// ranges or free holes of a page: the first key at or after a given one,
// the one before it, and the first key in order whose weight reaches a
// size. Nodes live in one slice and are recycled, so a sweep over a million
// allocations does not churn the garbage collector.
type treap struct {
	nodes []treapNode
	root  int32
	free  []int32
}

type treapKey struct{ a, b uint64 }

func (k treapKey) less(o treapKey) bool { return k.a < o.a || k.a == o.a && k.b < o.b }

type treapNode struct {
	key         treapKey
	weight, max uint64 // max: the largest weight in the subtree
	prio        uint64
	left, right int32
}

const nilNode = -1

func newTreap() *treap { return &treap{root: nilNode} }

// priority is a fixed hash of the key: the tree's shape, like its contents,
// depends only on what it holds, and a hash balances it as well as random
// priorities would.
func priority(k treapKey) uint64 {
	x := k.a*0x9e3779b97f4a7c15 ^ k.b
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (t *treap) update(n int32) {
	nd := &t.nodes[n]
	nd.max = nd.weight
	if nd.left != nilNode {
		nd.max = max(nd.max, t.nodes[nd.left].max)
	}
	if nd.right != nilNode {
		nd.max = max(nd.max, t.nodes[nd.right].max)
	}
}

// split parts the subtree n into the keys before k and the rest.
func (t *treap) split(n int32, k treapKey) (int32, int32) {
	if n == nilNode {
		return nilNode, nilNode
	}
	if t.nodes[n].key.less(k) {
		l, r := t.split(t.nodes[n].right, k)
		t.nodes[n].right = l
		t.update(n)
		return n, r
	}
	l, r := t.split(t.nodes[n].left, k)
	t.nodes[n].left = r
	t.update(n)
	return l, n
}

// merge joins two subtrees whose keys are in order, l's before r's.
func (t *treap) merge(l, r int32) int32 {
	if l == nilNode {
		return r
	}
	if r == nilNode {
		return l
	}
	if t.nodes[l].prio > t.nodes[r].prio {
		t.nodes[l].right = t.merge(t.nodes[l].right, r)
		t.update(l)
		return l
	}
	t.nodes[r].left = t.merge(l, t.nodes[r].left)
	t.update(r)
	return r
}

// insert adds k with its weight; k must not be in the set.
func (t *treap) insert(k treapKey, weight uint64) {
	var n int32
	if len(t.free) > 0 {
		n = t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
	} else {
		n = int32(len(t.nodes))
		t.nodes = append(t.nodes, treapNode{})
	}
	t.nodes[n] = treapNode{key: k, weight: weight, max: weight, prio: priority(k), left: nilNode, right: nilNode}
	l, r := t.split(t.root, k)
	t.root = t.merge(t.merge(l, n), r)
}

// remove takes k out of the set; it reports whether k was there.
func (t *treap) remove(k treapKey) bool {
	l, r := t.split(t.root, k)
	// r's first key is k when k is in the set.
	next := treapKey{k.a, k.b + 1}
	if k.b == ^uint64(0) {
		next = treapKey{k.a + 1, 0}
	}
	m, rest := t.split(r, next)
	found := m != nilNode
	if found {
		t.free = append(t.free, m)
	}
	t.root = t.merge(l, rest)
	return found
}

// ceiling is the first key at or after k.
func (t *treap) ceiling(k treapKey) (treapKey, uint64, bool) {
	best, found := int32(nilNode), false
	for n := t.root; n != nilNode; {
		if t.nodes[n].key.less(k) {
			n = t.nodes[n].right
		} else {
			best, found = n, true
			n = t.nodes[n].left
		}
	}
	if !found {
		return treapKey{}, 0, false
	}
	return t.nodes[best].key, t.nodes[best].weight, true
}

// floorBefore is the last key before k.
func (t *treap) floorBefore(k treapKey) (treapKey, uint64, bool) {
	best, found := int32(nilNode), false
	for n := t.root; n != nilNode; {
		if t.nodes[n].key.less(k) {
			best, found = n, true
			n = t.nodes[n].right
		} else {
			n = t.nodes[n].left
		}
	}
	if !found {
		return treapKey{}, 0, false
	}
	return t.nodes[best].key, t.nodes[best].weight, true
}

// firstWeighing is the first key in order whose weight is at least w.
func (t *treap) firstWeighing(w uint64) (treapKey, uint64, bool) {
	n := t.root
	if n == nilNode || t.nodes[n].max < w {
		return treapKey{}, 0, false
	}
	for {
		nd := &t.nodes[n]
		if nd.left != nilNode && t.nodes[nd.left].max >= w {
			n = nd.left
			continue
		}
		if nd.weight >= w {
			return nd.key, nd.weight, true
		}
		n = nd.right
	}
}

// maxWeight is the largest weight in the set, 0 when it is empty.
func (t *treap) maxWeight() uint64 {
	if t.root == nilNode {
		return 0
	}
	return t.nodes[t.root].max
}

// last is the greatest key.
func (t *treap) last() (treapKey, bool) {
	if t.root == nilNode {
		return treapKey{}, false
	}
	n := t.root
	for t.nodes[n].right != nilNode {
		n = t.nodes[n].right
	}
	return t.nodes[n].key, true
}

// rekey replaces key k by nk with a new weight in place; nk must fall
// between the same neighbours as k. It is cheaper than remove and insert:
// one walk down and the largest weights mended on the way back.
func (t *treap) rekey(k, nk treapKey, weight uint64) {
	var path [64]int32
	depth := 0
	n := t.root
	for n != nilNode && t.nodes[n].key != k {
		if depth < len(path) {
			path[depth] = n
		}
		depth++
		if k.less(t.nodes[n].key) {
			n = t.nodes[n].left
		} else {
			n = t.nodes[n].right
		}
	}
	if n == nilNode {
		panic("plan: rekey of a key not in the treap")
	}
	if depth > len(path) {
		// Deeper than any balanced treap gets: fall back.
		t.remove(k)
		t.insert(nk, weight)
		return
	}
	t.nodes[n].key, t.nodes[n].weight = nk, weight
	t.update(n)
	for i := depth - 1; i >= 0; i-- {
		t.update(path[i])
	}
}
