package cpu

// SetAfterCheck has f called once each batch's ops are checked, before any
// runs, until the test ends.
func SetAfterCheck(t interface{ Cleanup(func()) }, f func()) {
	afterCheck = f
	t.Cleanup(func() { afterCheck = nil })
}
