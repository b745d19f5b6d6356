package conformance

import (
	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/vk"
)

// The kernel catalogue and the launches the checks make.
type launch = vk.Launch

var (
	allKernels      = vk.Kernels
	fillWords       = vk.FillWords
	copyWords       = vk.CopyWords
	addLaunch       = vk.Add
	mulLaunch       = vk.Mul
	scaleLaunch     = vk.Scale
	reluLaunch      = vk.ReLU
	geluLaunch      = vk.GELU
	softmaxLaunch   = vk.Softmax
	layerNormLaunch = vk.LayerNorm
	reduceSumLaunch = vk.ReduceSum
	matMulLaunch    = vk.MatMul
	transposeLaunch = vk.Transpose
)

// deviceStorage is the storage target of a client's device: its storage,
// the client's properties and the device's transfers.
func deviceStorage(cl *client.Client) StorageTarget {
	d := cl.Device()
	return StorageTarget{Storage: d.Storage(), Properties: cl.Properties(), Memory: d, Held: d.Storage().Allocated}
}

// deviceName names the client's device in a report.
func deviceName(cl *client.Client) string { return cl.Device().Info().Name }
