//go:build !race

package tracetest

// RaceEnabled: the race detector slows planning about tenfold (see Quick).
const RaceEnabled = false
