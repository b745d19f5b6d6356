//go:build cgo

package devtest

// cgoBuild: the test binary was built with cgo, so a Vulkan backend could
// have been linked in.
const cgoBuild = true
