package trace

// MaxLine is maxTraceLine for the external tests.
const MaxLine = maxTraceLine
