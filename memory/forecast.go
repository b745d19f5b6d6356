package memory

import (
	"math"
	"math/bits"
)

// warnForecastShort is the hook of a sliced pool whose cap is a forecast:
// each page past the cap is a spill, and the first of the layout warns,
// once for the run whichever pool it is, with what the plan's capped pools
// hold together and what the pools hold with the new page (called once the
// device granted it).
func (m *Manager) warnForecastShort(pool int) func(capPages, held uint64) {
	return func(capPages, held uint64) {
		m.spills++
		if m.warned[len(m.pools)+1] {
			return
		}
		m.warned[len(m.pools)+1] = true
		planned, need := m.plannedCappedBytes(), m.total.BytesReserved
		if capPages == 0 {
			m.logger.Warn("memory: the run needs more device memory than its plan expected: a reservation larger than every planned page goes to the plan's way out",
				"planned_bytes", planned, "needed_bytes", need, "pool", m.reportIndex(pool), "pages", held)
			return
		}
		m.logger.Warn("memory: the run needs more device memory than its plan expected: a planned pool needs more pages than its plan expected; it grows",
			"planned_bytes", planned, "needed_bytes", need, "pool", m.reportIndex(pool), "planned_pages", capPages, "pages", held)
	}
}

// tellForecastShort hooks warnForecastShort to pool's cap where the cap is
// a forecast.
func (m *Manager) tellForecastShort(c *pageCap, pool int) {
	if c.grow {
		c.outgrown = m.warnForecastShort(pool)
	}
}

// plannedCappedBytes is what the capped pools of a plan hold together at
// their caps (saturating), an exclusive pool's pages counted at the
// largest size it takes.
func (m *Manager) plannedCappedBytes() uint64 {
	var sum uint64
	for _, p := range m.pools {
		if c, _, capped := p.capacity(); capped {
			sum = saturatingAdd(sum, c)
		}
	}
	return sum
}

// saturatingAdd is a+b, or 2^64 - 1 past it.
func saturatingAdd(a, b uint64) uint64 {
	if sum, carry := bits.Add64(a, b, 0); carry == 0 {
		return sum
	}
	return math.MaxUint64
}

// saturatingMul is a*b, or 2^64 - 1 past it.
func saturatingMul(a, b uint64) uint64 {
	if hi, lo := bits.Mul64(a, b); hi == 0 {
		return lo
	}
	return math.MaxUint64
}
