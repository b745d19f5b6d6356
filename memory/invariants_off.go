//go:build !invariants

package memory

// invariantsEnabled is off in normal builds; build with -tags invariants to
// check every pool's structure after each operation.
const invariantsEnabled = false
