package trace

// MaxLine is maxTraceLine for the external tests.
const MaxLine = maxTraceLine

// SetMaxCheckedRest sets maxCheckedRest and returns what it was.
func SetMaxCheckedRest(n int64) int64 {
	was := maxCheckedRest
	maxCheckedRest = n
	return was
}
