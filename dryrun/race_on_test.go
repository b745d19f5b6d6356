//go:build race

package dryrun

// raceEnabled: the race detector slows planning about tenfold, so the
// longest stream is left to the plain test run.
const raceEnabled = true
