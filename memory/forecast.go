package memory

import "github.com/vkrt/vkrt/internal/saturate"

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
			sum = saturate.Add(sum, c)
		}
	}
	return sum
}
