//go:build invariants

package memory

// invariantsEnabled turns on a full structural check of every pool after
// each operation that changes one (build tag invariants).
const invariantsEnabled = true
