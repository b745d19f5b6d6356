package main

import "github.com/vkrt/vkrt/internal/devtest"

// The command's tests run on Vulkan where the build links it (cgo), else on
// the pure-Go cpu device.
func init() { devtest.SelectDevice() }
