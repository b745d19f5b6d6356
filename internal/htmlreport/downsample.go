package htmlreport

import "slices"

// Sample is the pools' state after one event of a stream: per pool, the
// requested bytes live in it and the bytes it reserved on the device.
type Sample struct {
	Event    int
	Live     []uint64
	Reserved []uint64
}

// TotalLive is the requested bytes live across the pools.
func (s Sample) TotalLive() uint64 { return sum(s.Live) }

// TotalReserved is the bytes reserved across the pools.
func (s Sample) TotalReserved() uint64 { return sum(s.Reserved) }

func sum(v []uint64) uint64 {
	var n uint64
	for _, x := range v {
		n += x
	}
	return n
}

// The criteria a bucket keeps a sample for, as indexes into the values
// Add computes for a state: the total live and total reserved bytes, each at
// its largest and at its smallest, then for each pool p the stacked edges
// at pool p's live bytes and at its reservation.
const (
	mostLive = iota
	leastLive
	mostReserved
	leastReserved
	poolCriteria
)

// least reports whether criterion k keeps the smallest value of a bucket
// rather than the largest.
func least(k int) bool { return k == leastLive || k == leastReserved }

// candidate is the best sample of a bucket under one criterion so far.
type candidate struct {
	set   bool
	value uint64
	event int
	live  []uint64
	res   []uint64
}

// Downsampler reduces a stream of pool states to at most a few samples per
// bucket of consecutive events. Per bucket it keeps the first event at which
// the total live bytes and the total reserved bytes reach their minimum and
// their maximum, and at which each edge of the pools stacked in order peaks:
// the reserved bytes of the pools up to p, and those of the pools below p
// plus p's live bytes. The stream's last event is kept too. A stream no
// longer than the bucket count keeps every event.
type Downsampler struct {
	events, buckets int
	values          []uint64 // per criterion, for the state being added
	cands           []candidate
	bucket          int
	last            candidate
	out             []Sample
}

// NewDownsampler expects events states of pools pools each and reduces them
// to buckets buckets (at least 1).
func NewDownsampler(events, buckets, pools int) *Downsampler {
	buckets = max(buckets, 1)
	n := poolCriteria + 2*pools
	d := &Downsampler{events: events, buckets: buckets, values: make([]uint64, n), cands: make([]candidate, n), bucket: -1}
	for i := range d.cands {
		d.cands[i].live, d.cands[i].res = make([]uint64, pools), make([]uint64, pools)
	}
	d.last.live, d.last.res = make([]uint64, pools), make([]uint64, pools)
	return d
}

// bucketOf is the bucket of event i: buckets split the events evenly.
func (d *Downsampler) bucketOf(i int) int {
	if d.events <= d.buckets {
		return i
	}
	return int(int64(i) * int64(d.buckets) / int64(d.events))
}

// Add takes the state after event i; events come in increasing order. The
// slices are copied. It is called after every event of a stream, so it
// computes every criterion's value in one pass over the pools.
func (d *Downsampler) Add(i int, live, reserved []uint64) {
	if b := d.bucketOf(i); b != d.bucket {
		d.flush()
		d.bucket = b
	}
	v := d.values
	var totalLive, below uint64
	for p, l := range live {
		totalLive += l
		v[poolCriteria+2*p] = below + l
		below += reserved[p]
		v[poolCriteria+2*p+1] = below
	}
	v[mostLive], v[leastLive], v[mostReserved], v[leastReserved] = totalLive, totalLive, below, below
	for k, x := range v {
		cand := &d.cands[k]
		if cand.set && (least(k) && x >= cand.value || !least(k) && x <= cand.value) {
			continue
		}
		cand.set, cand.value, cand.event = true, x, i
		copy(cand.live, live)
		copy(cand.res, reserved)
	}
	d.last.set, d.last.event = true, i
	copy(d.last.live, live)
	copy(d.last.res, reserved)
}

// flush appends the current bucket's kept samples in event order.
func (d *Downsampler) flush() {
	start := len(d.out)
	for k := range d.cands {
		c := &d.cands[k]
		if !c.set {
			continue
		}
		c.set = false
		if slices.ContainsFunc(d.out[start:], func(s Sample) bool { return s.Event == c.event }) {
			continue
		}
		d.out = append(d.out, Sample{Event: c.event, Live: slices.Clone(c.live), Reserved: slices.Clone(c.res)})
	}
	slices.SortFunc(d.out[start:], func(a, b Sample) int { return a.Event - b.Event })
}

// Samples ends the stream and returns the kept samples in event order.
func (d *Downsampler) Samples() []Sample {
	d.flush()
	if d.last.set && (len(d.out) == 0 || d.out[len(d.out)-1].Event != d.last.event) {
		d.out = append(d.out, Sample{Event: d.last.event, Live: slices.Clone(d.last.live), Reserved: slices.Clone(d.last.res)})
	}
	d.last.set = false
	return d.out
}
