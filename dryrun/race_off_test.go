//go:build !race

package dryrun

const raceEnabled = false
