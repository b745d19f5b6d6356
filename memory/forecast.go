package memory

// warnForecastShort is the hook of a sliced pool whose cap is a forecast:
// each page past the cap is a spill, and the first warns.
func (m *Manager) warnForecastShort(pool int) func(capPages, held uint64) {
	return func(capPages, held uint64) {
		m.spills++
		if m.warned[pool] {
			return
		}
		m.warned[pool] = true
		if capPages == 0 {
			m.logger.Warn("memory: a reservation larger than every planned page goes to the plan's way out",
				"pool", pool, "pages", held)
			return
		}
		m.logger.Warn("memory: a planned pool needs more pages than its plan expected; it grows",
			"pool", pool, "planned_pages", capPages, "pages", held)
	}
}
