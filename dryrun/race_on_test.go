//go:build race

package dryrun

// raceEnabled: the race detector slows planning about tenfold (see quick).
const raceEnabled = true
