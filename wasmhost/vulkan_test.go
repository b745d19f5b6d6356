//go:build cgo

package wasmhost

import _ "github.com/vkrt/vkrt/vk" // the Vulkan backend: guests run on the first Vulkan device
