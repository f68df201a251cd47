package schedulers

// rankTree is an ordered set with ranks, so that a decision measures a
// result against n others in O(log n) instead of sorting them: inserting,
// removing, finding the i-th item and an item's rank all take O(log n)
// expected time. It is a treap whose nodes count their subtree. Items may
// be marked, and marked items are counted apart, so that the i-th marked
// item is found as fast (ASHA's promotable records, PBT's donors).
//
// less must be a strict total order on the items held: the caller breaks
// ties (by arrival, by trial number), so that equal items never meet.
// The tree's shape comes from a fixed sequence of priorities and never
// changes an answer.
type rankTree[T any] struct {
	root *rankNode[T]
	less func(a, b T) bool
	seed uint32
}

type rankNode[T any] struct {
	item        T
	left, right *rankNode[T]
	prio        uint32
	// size and marks count the subtree's items and marked items; 32 bits
	// keep a node small, for trees of up to 2³¹ items.
	size, marks int32
	mark        bool
}

func newRankTree[T any](less func(a, b T) bool) *rankTree[T] {
	return &rankTree[T]{less: less, seed: 0x9e3779b9}
}

func (n *rankNode[T]) fix() {
	n.size, n.marks = 1, 0
	if n.mark {
		n.marks = 1
	}
	if n.left != nil {
		n.size += n.left.size
		n.marks += n.left.marks
	}
	if n.right != nil {
		n.size += n.right.size
		n.marks += n.right.marks
	}
}

func sizeOf[T any](n *rankNode[T]) int {
	if n == nil {
		return 0
	}
	return int(n.size)
}

func marksOf[T any](n *rankNode[T]) int {
	if n == nil {
		return 0
	}
	return int(n.marks)
}

// Len is the number of items.
func (t *rankTree[T]) Len() int { return sizeOf(t.root) }

// Marked is the number of marked items.
func (t *rankTree[T]) Marked() int { return marksOf(t.root) }

// Insert adds item, marked or not.
func (t *rankTree[T]) Insert(item T, mark bool) {
	// xorshift32: the priorities only shape the tree.
	t.seed ^= t.seed << 13
	t.seed ^= t.seed >> 17
	t.seed ^= t.seed << 5
	n := &rankNode[T]{item: item, prio: t.seed, mark: mark}
	n.fix()
	l, r := t.split(t.root, item)
	t.root = t.merge(t.merge(l, n), r)
}

// split cuts n into the items before item and the others.
func (t *rankTree[T]) split(n *rankNode[T], item T) (l, r *rankNode[T]) {
	if n == nil {
		return nil, nil
	}
	if t.less(n.item, item) {
		n.right, r = t.split(n.right, item)
		n.fix()
		return n, r
	}
	l, n.left = t.split(n.left, item)
	n.fix()
	return l, n
}

// merge joins a and b, every item of a before every item of b.
func (t *rankTree[T]) merge(a, b *rankNode[T]) *rankNode[T] {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a.right = t.merge(a.right, b)
		a.fix()
		return a
	}
	b.left = t.merge(a, b.left)
	b.fix()
	return b
}

// Remove deletes item; false when the tree does not hold it.
func (t *rankTree[T]) Remove(item T) bool {
	var found bool
	t.root, found = t.remove(t.root, item)
	return found
}

func (t *rankTree[T]) remove(n *rankNode[T], item T) (*rankNode[T], bool) {
	if n == nil {
		return nil, false
	}
	var found bool
	switch {
	case t.less(item, n.item):
		n.left, found = t.remove(n.left, item)
	case t.less(n.item, item):
		n.right, found = t.remove(n.right, item)
	default:
		return t.merge(n.left, n.right), true
	}
	if found {
		n.fix()
	}
	return n, found
}

// SetMark marks or unmarks item; false when the tree does not hold it.
func (t *rankTree[T]) SetMark(item T, mark bool) bool {
	return t.setMark(t.root, item, mark)
}

func (t *rankTree[T]) setMark(n *rankNode[T], item T, mark bool) bool {
	if n == nil {
		return false
	}
	var found bool
	switch {
	case t.less(item, n.item):
		found = t.setMark(n.left, item, mark)
	case t.less(n.item, item):
		found = t.setMark(n.right, item, mark)
	default:
		n.mark, found = mark, true
	}
	if found {
		n.fix()
	}
	return found
}

// At returns the i-th item in order, from 0; i must be below Len.
func (t *rankTree[T]) At(i int) T {
	n := t.root
	for {
		l := sizeOf(n.left)
		switch {
		case i < l:
			n = n.left
		case i == l:
			return n.item
		default:
			i -= l + 1
			n = n.right
		}
	}
}

// Rank is the number of items before item, whether or not the tree holds
// it.
func (t *rankTree[T]) Rank(item T) int {
	r := 0
	for n := t.root; n != nil; {
		if t.less(n.item, item) {
			r += sizeOf(n.left) + 1
			n = n.right
		} else {
			n = n.left
		}
	}
	return r
}

// MarkedAt returns the j-th marked item in order, from 0, and its index
// among all items; j must be below Marked.
func (t *rankTree[T]) MarkedAt(j int) (item T, index int) {
	n := t.root
	for {
		l := marksOf(n.left)
		switch {
		case j < l:
			n = n.left
			continue
		case j == l && n.mark:
			return n.item, index + sizeOf(n.left)
		case n.mark:
			j -= l + 1
		default:
			j -= l
		}
		index += sizeOf(n.left) + 1
		n = n.right
	}
}

// MarkedBefore is the number of marked items among the first i.
func (t *rankTree[T]) MarkedBefore(i int) int {
	c := 0
	for n := t.root; n != nil; {
		l := sizeOf(n.left)
		if i <= l {
			n = n.left
			continue
		}
		c += marksOf(n.left)
		if n.mark {
			c++
		}
		i -= l + 1
		n = n.right
	}
	return c
}
