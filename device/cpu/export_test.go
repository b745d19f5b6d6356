package cpu

// SetAfterCheck has f called once each batch's ops are checked, before any
// runs, until the test ends.
func SetAfterCheck(t interface{ Cleanup(func()) }, f func()) {
	afterCheck = f
	t.Cleanup(func() { afterCheck = nil })
}

// SetAfterBindCheck has f called once each Bind has checked its binds,
// before any is applied, until the test ends.
func SetAfterBindCheck(t interface{ Cleanup(func()) }, f func()) {
	afterBindCheck = f
	t.Cleanup(func() { afterBindCheck = nil })
}
