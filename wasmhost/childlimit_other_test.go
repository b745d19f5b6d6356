//go:build !linux

package wasmhost

import "testing"

const hostileChildEnv = "VKRT_WASMHOST_LIMITED_CHILD"

// runLimitedChild needs a limit on the address space, which these tests
// set on Linux only.
func runLimitedChild(t *testing.T, _ string) {
	t.Skip("the limited child process runs on Linux only")
}

func limitAddressSpace(t testing.TB, _ uint64) {
	t.Skip("the address space is limited on Linux only")
}

func limitAddressSpaceOnce(t testing.TB, extra uint64) { limitAddressSpace(t, extra) }
