// Command mlp is an example vkrt guest: a two-layer perceptron
// (matmul, ReLU, matmul, softmax, one batched submission per step) over
// batches of varying size, its weights in a persistent window. Every
// step's class probabilities are checked against a CPU reference; a
// mismatch exits 1, and a closing line that cannot be written to stdout
// exits 2.
//
//	GOOS=wasip1 GOARCH=wasm go build -o mlp.wasm ./examples/mlp
//	vkrt run mlp.wasm -- --steps 20 --scale 4   # 20 steps, batches 4x the base sizes
package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/vkrt/vkrt/examples/internal/workload"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/wasmhost/guest"
)

const (
	inputs  = 64
	hidden  = 256
	classes = 10
)

// batches are the batch sizes of the steps, in order, before --scale.
var batches = []int{1, 7, 32, 64, 13, 128, 5, 96, 200, 3}

func main() {
	sizes := workload.ParseSizes("mlp", len(batches))
	rng := rand.New(rand.NewPCG(1, 2))
	w1v := workload.Random(rng, inputs*hidden, 0.125)
	w2v := workload.Random(rng, hidden*classes, 0.0625)

	var weights workload.Buffers
	workload.Doing("making the weights")
	workload.Check(guest.BeginPersistent())
	w1, w2 := weights.Floats(w1v), weights.Floats(w2v)
	workload.Check(guest.EndPersistent())

	samples := 0
	for step := range sizes.Steps {
		b := sizes.Size(batches, step)
		workload.Doing("step %d (batch %d)", step, b)
		var bs workload.Buffers
		xv := workload.Random(rng, b*inputs, 1)
		x := bs.Floats(xv)
		h, a := bs.Empty(b*hidden), bs.Empty(b*hidden)
		logits, probs := bs.Empty(b*classes), bs.Empty(b*classes)
		bb := uint32(b)
		workload.Check(guest.Run(
			guest.MatMul(bb, hidden, inputs, x, w1, h),
			guest.ReLU(bb*hidden, h, a),
			guest.MatMul(bb, classes, hidden, a, w2, logits),
			guest.Softmax(bb, classes, logits, probs),
		))
		workload.Expect(fmt.Sprintf("step %d (batch %d): probabilities", step, b), probs, func() []float32 {
			return reference(xv, w1v, w2v, b)
		})
		bs.Free()
		samples += b
	}
	workload.Doing("freeing the weights")
	weights.Free()
	workload.Finish("mlp", fmt.Sprintf("mlp: %d steps, %d samples, %d -> %d -> %d", sizes.Steps, samples, inputs, hidden, classes))
}

// referenceRows is how many samples the CPU reference takes at once.
const referenceRows = 1024

// reference is the perceptron on the CPU, referenceRows samples at a time:
// a sample's probabilities depend on its own row alone, and the hidden
// activations of a whole batch (1 KiB a sample, twice) ran the guest out
// of memory where the device held them well (--scale 100 under 32 MiB of
// guest memory, --scale 5000 under the default 1 GiB).
func reference(x, w1, w2 []float32, b int) []float32 {
	out := make([]float32, 0, b*classes)
	for r := 0; r < b; r += referenceRows {
		n := min(referenceRows, b-r)
		h := cpuref.ReLU(cpuref.MatMul(x[r*inputs:(r+n)*inputs], w1, n, hidden, inputs))
		out = append(out, cpuref.Softmax(cpuref.MatMul(h, w2, n, classes, hidden), n, classes)...)
	}
	return out
}
