package memory

import (
	"math/bits"
	"sort"
)

// A run that left its plan's stream foresees its peak by its plan's
// profile (VirtualPlan.Profile) and grows by it (foreseenChunk): in steps of
// a fourth of what it holds up to 17/20 of the foreseen peak, kept at or
// below the planned run's peak (once it holds 3/2 of that, in steps of a
// sixteenth up to 3/5 of the foreseen peak), where the plain policy grows
// by the shortfall; and never by a unit past the foreseen peak, only by
// the shortfall (twice it once past, up to a fourteenth of what it holds)
// or a fortieth of what it holds. Without a plan, while a run follows
// its plan, or once it holds twice the plan (virtualOutgrownPlan: it then
// grows as with no plan), this does nothing. Generated pairs (gen.Run runs 1 and
// 2, each under the other's plan), served within min(1.03×, PyTorch
// expandable) in PyTorch's device allocations, seeds 1–9 / 10–20 / 21–30:
//
//   - with plans of version 2 (no settled start), 53 / 56 without the
//     profile, 59 / 71 with large steps up to 4/5; not kept then: 3/4
//     59 / 71, 9/10 58 / 70, past the planned run's peak 54 / 70 (56 / 70
//     only once the foreseen peak is twice it), fine steps of a 28th
//     56 / 67, of a 64th 58 / 70;
//   - with the settled start (plans of version 3), 4/5 62 / 74 / 63 of
//     72 / 88 / 80, 17/20 63 / 76 / 64; not kept: 2/3 59 / 74, 5/6 61 / 75,
//     21/25 62 / 76, 7/8 62 / 75, 9/10 63 / 74, fine steps of a 30th
//     60 / 67, of a 60th 61 / 74;
//   - with a run that outgrew the planned run foreseeing past it and a
//     shortfall past the foreseen peak taken twice, 63 / 76 / 65 (and
//     62 / 68 of 80 / 80 on seeds 31–40 / 41–50, against 61 / 68). Each
//     alone moved runs across the bounds both ways: past the planned peak
//     at 3/2 of it with steps of a 16th up to 17/20 of the foreseen peak
//     62 / 77 / 66, up to 3/4 62 / 76 / 67, up to 3/5 62 / 77 / 65; at
//     once past it 61 / 76 / 65; steps of a 32nd 63 / 76 / 64; the
//     shortfall twice up to a 14th 64 / 75 / 64, a 10th 64 / 75 / 63.
//     Not kept either: a unit of a 24th or 32nd of the plan 60 / 75 / 63
//     and 62 / 73 / 64, trusting the foresight after a sixth of the planned
//     growth 63 / 74 / 66, an eighth 63 / 75 / 64.
const (
	// foreseeSafeNum/foreseeSafeDen: the share of the foreseen peak the
	// run grows towards in large steps.
	foreseeSafeNum, foreseeSafeDen = 17, 20
	// foreseeMinGrowth: the foresight is trusted once the planned run has
	// grown past what both runs shared by at least 1/foreseeMinGrowth of
	// its growth to its peak, at the reservation the run has reached. Sooner,
	// the two runs' growth is too little to compare.
	foreseeMinGrowth = 10
	// foreseeOutgrownNum/foreseeOutgrownDen: a run holding more than this
	// share of the planned run's peak has outgrown the planned run, and
	// foresees past its peak (foreseenChunk). Runs of one workload differ
	// up to tenfold: conv_training_10_run2 peaked at 1.29 GB under a plan
	// of 199 MB and grew by its shortfalls, 34 device allocations against
	// PyTorch's 31 (31 so, 1.0196×).
	foreseeOutgrownNum, foreseeOutgrownDen = 3, 2
	// foreseeOutgrownSafeNum: the share (over foreseeSafeDen) of the
	// foreseen peak an outgrown run grows towards in large steps, less
	// than foreseeSafeNum: a foresight past the planned run is scaled
	// further and errs more (transformer_training_1_run1, under the plan
	// of its 568 MB second run, foresaw up to 17.7 GB for a peak of 7.7 GB).
	foreseeOutgrownSafeNum = 12
	// foreseeOutgrownStep: an outgrown run's large steps are what it holds
	// over this, at the most.
	foreseeOutgrownStep = 16
	// foreseeRepeatStep: a shortfall past the foreseen peak takes twice
	// itself, up to what the pool holds over this: a run growing past its
	// foresight grows by reservations of one size in a row, as a model's
	// layers do (generation_17_run1: 7 device allocations, PyTorch's count,
	// against 8).
	foreseeRepeatStep = 14
	// foreseeSpareAllocs/foreseeSpareStep: a run whose pool, counting the
	// allocation it is about to make, has made this many device
	// allocations fewer than a pool growing by whole units of its need
	// would have so far (virtualPool.unitGrowths) grows below the foreseen
	// mark by its shortfall or a sixteenth of what it holds, not in large
	// steps: a foresight past the peak then costs a sixteenth at most.
	// Runs that take their weights in one allocation (the settled start)
	// have that many to spare. generation_27_run2, foreseeing 532 MiB for
	// a peak of 413, held 1.097× of it in 3 device allocations where
	// PyTorch made 20, and holds 1.010× in 3; of the generated runs of
	// seeds 1–40 269 of 320 are served (266 before, none lost); the plain
	// unit for such steps gave 269 too, losing one.
	foreseeSpareAllocs, foreseeSpareStep = 4, 16
)

// profileAt is the most bytes the planned run needed at once up to its
// reservation k, as far as its profile's marks say.
func (p *virtualPool) profileAt(k uint64) uint64 {
	i := sort.Search(len(p.profile), func(i int) bool { return p.profile[i].Ordinal > k })
	if i == 0 {
		return 0
	}
	return p.profile[i-1].Bytes
}

// foreseenPeak is the run's peak as its plan's profile foresees it, once
// the run has left the planned stream: what both runs needed when they
// parted (their streams were one up to there), and the planned run's
// growth from there to its peak, scaled by how far this run has grown from
// there against how far the planned run had by the same reservation. Runs
// of one workload differ by their batch, sequence and image sizes, which
// scale what the workload allocates after its weights: the scale shows in
// how each grows.
func (p *virtualPool) foreseenPeak() (pred, peak uint64, ok bool) {
	if len(p.profile) == 0 || p.following || p.plannedB == 0 {
		return 0, 0, false
	}
	shared := p.leftNeed << p.shift
	peak = max(p.plannedB, p.profile[len(p.profile)-1].Bytes)
	then := p.profileAt(p.made)
	now := max(p.neededPeak, p.gm.needed) << p.shift
	if peak <= shared || then <= shared || then-shared < (peak-shared)/foreseeMinGrowth {
		return 0, 0, false
	}
	// The guard above keeps (peak-shared)/(then-shared) near
	// foreseeMinGrowth at most, so the sum cannot wrap.
	return shared + mulDiv(now-min(now, shared), peak-shared, then-shared), peak, true
}

// mulDiv is a×b/c, saturated.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// foreseenChunk is the chunk the plain policy wants for a shortfall, want,
// adjusted by the peak the run foresees (see foreseenPeak) when it has
// left its plan: up to 17/20 of the foreseen peak, or of the planned
// run's if that is less, at least a fourth of what it holds, in few
// device allocations as the foresight is safely below the peak; once the
// run holds 3/2 of the planned run's peak, up to 3/5 of the foreseen peak
// in steps of a sixteenth of what it holds. A chunk that would pass the
// foreseen peak stops at it, or takes the shortfall or a fortieth of what
// it holds if more, so the last chunk spares little when the peak comes
// as foreseen; a shortfall past the foreseen peak takes twice itself, up
// to a fourteenth of what the pool holds.
func (p *virtualPool) foreseenChunk(short, held, want uint64) uint64 {
	pred, peak, ok := p.foreseenPeak()
	if !ok {
		return want
	}
	foreseen, safeNum, step := min(pred, peak), uint64(foreseeSafeNum), held/virtualFollowStep
	if outgrown := mulDiv(peak, foreseeOutgrownNum, foreseeOutgrownDen); held > outgrown {
		foreseen, safeNum, step = pred, foreseeOutgrownSafeNum, held/foreseeOutgrownStep
	}
	if mark := mulDiv(foreseen, safeNum, foreseeSafeDen); held+short <= mark {
		if p.unitGrowths >= p.allocsMade+1+foreseeSpareAllocs { // this one counted
			// Allocations to spare: smaller steps, as the foresight may be
			// past the peak.
			return min(want, p.shortOr(short, held/foreseeSpareStep))
		}
		return max(want, min(mark-held, step))
	}
	if held+want <= pred {
		return want
	}
	fine := p.shortOr(short, held/p.growthDivisor())
	if held+short >= pred {
		fine = max(fine, min(2*short, held/foreseeRepeatStep))
	}
	if pred > held {
		fine = max(fine, pred-held)
	}
	return min(want, fine)
}
