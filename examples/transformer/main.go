// Command transformer is an example vkrt guest: one pre-norm transformer
// block (layernorm, single-head attention with softmax, residual,
// layernorm, GELU MLP, residual) run over sequences whose length changes
// every step, each step one batched submission of 16 kernels. Every output
// is checked against a CPU reference; a mismatch exits 1, and a closing
// line that cannot be written to stdout exits 2.
//
//	GOOS=wasip1 GOARCH=wasm go build -o transformer.wasm ./examples/transformer
//	vkrt plan --verify transformer.wasm
//	vkrt plan --out plan.json transformer.wasm && vkrt run --layout plan.json transformer.wasm -- --scale 2
package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"github.com/vkrt/vkrt/examples/internal/workload"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/wasmhost/guest"
)

const (
	model = 64  // width of the residual stream
	ffn   = 256 // width of the MLP
	eps   = 1e-5
)

// lengths are the sequence lengths of the steps, in order, before --scale.
var lengths = []int{8, 24, 16, 40, 5, 33, 64, 12, 96, 20}

type weights struct {
	q, k, v, o, up, down []float32
	g1, b1, g2, b2       []float32
}

func main() {
	sizes := workload.ParseSizes("transformer", len(lengths))
	// The kernels count elements in u32: scores hold n*n of them, and
	// past 65535 tokens t*t would wrap and launch on a fraction of them.
	if n := sizes.Largest(lengths); uint64(n)*uint64(n) > math.MaxUint32 {
		fmt.Fprintf(os.Stderr, "transformer: a sequence of %d tokens has %d attention scores, more than a launch counts (2^32 - 1): lower --scale\n", n, uint64(n)*uint64(n))
		os.Exit(2)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	scale := float32(1 / math.Sqrt(model))
	w := weights{
		q: workload.Random(rng, model*model, scale), k: workload.Random(rng, model*model, scale),
		v: workload.Random(rng, model*model, scale), o: workload.Random(rng, model*model, scale),
		up: workload.Random(rng, model*ffn, scale), down: workload.Random(rng, ffn*model, float32(1/math.Sqrt(ffn))),
		g1: workload.Constant(model, 1), b1: workload.Constant(model, 0),
		g2: workload.Random(rng, model, 1), b2: workload.Random(rng, model, 0.1),
	}
	var params workload.Buffers
	workload.Doing("making the weights")
	workload.Check(guest.BeginPersistent())
	wq, wk, wv, wo := params.Floats(w.q), params.Floats(w.k), params.Floats(w.v), params.Floats(w.o)
	wup, wdown := params.Floats(w.up), params.Floats(w.down)
	g1, b1, g2, b2 := params.Floats(w.g1), params.Floats(w.b1), params.Floats(w.g2), params.Floats(w.b2)
	workload.Check(guest.EndPersistent())

	tokens := 0
	for step := range sizes.Steps {
		n := sizes.Size(lengths, step)
		workload.Doing("step %d (sequence of %d)", step, n)
		t := uint32(n)
		var bs workload.Buffers
		xv := workload.Random(rng, n*model, 1)
		x := bs.Floats(xv)
		ln1, q, k, v, kt := bs.Empty(n*model), bs.Empty(n*model), bs.Empty(n*model), bs.Empty(n*model), bs.Empty(n*model)
		scores, scaled, probs := bs.Empty(n*n), bs.Empty(n*n), bs.Empty(n*n)
		att, o, x1, ln2 := bs.Empty(n*model), bs.Empty(n*model), bs.Empty(n*model), bs.Empty(n*model)
		up, act, down, y := bs.Empty(n*ffn), bs.Empty(n*ffn), bs.Empty(n*model), bs.Empty(n*model)
		workload.Check(guest.Run(
			guest.LayerNorm(t, model, eps, x, g1, b1, ln1),
			guest.MatMul(t, model, model, ln1, wq, q),
			guest.MatMul(t, model, model, ln1, wk, k),
			guest.MatMul(t, model, model, ln1, wv, v),
			guest.Transpose(t, model, k, kt),
			guest.MatMul(t, t, model, q, kt, scores),
			guest.Scale(t*t, float32(1/math.Sqrt(model)), scores, scaled),
			guest.Softmax(t, t, scaled, probs),
			guest.MatMul(t, model, t, probs, v, att),
			guest.MatMul(t, model, model, att, wo, o),
			guest.Add(t*model, x, o, x1),
			guest.LayerNorm(t, model, eps, x1, g2, b2, ln2),
			guest.MatMul(t, ffn, model, ln2, wup, up),
			guest.GELU(t*ffn, up, act),
			guest.MatMul(t, model, ffn, act, wdown, down),
			guest.Add(t*model, x1, down, y),
		))
		workload.Expect(fmt.Sprintf("step %d (sequence of %d): block output", step, n), y, func() []float32 { return reference(w, xv, n) })
		bs.Free()
		tokens += n
	}
	workload.Doing("freeing the weights")
	params.Free()
	workload.Finish("transformer", fmt.Sprintf("transformer: %d steps, %d tokens, width %d, MLP %d", sizes.Steps, tokens, model, ffn))
}

// referenceRows is how many query rows the CPU reference takes at once.
const referenceRows = 64

// reference is the block on the CPU, referenceRows query rows at a time:
// past the keys and values, which every row attends to, a row's output
// depends on its own row alone, and the scores of a whole sequence (n*n
// float32s, three times) ran the guest out of memory where the device held
// them well (1000 tokens under 12 MiB of guest memory, 9600 under the
// default 1 GiB).
func reference(w weights, x []float32, n int) []float32 {
	ln1 := cpuref.LayerNorm(x, w.g1, w.b1, n, model, eps)
	kt := cpuref.Transpose(cpuref.MatMul(ln1, w.k, n, model, model), n, model)
	v := cpuref.MatMul(ln1, w.v, n, model, model)
	out := make([]float32, 0, n*model)
	for r := 0; r < n; r += referenceRows {
		m := min(referenceRows, n-r)
		rows := func(a []float32) []float32 { return a[r*model : (r+m)*model] }
		q := cpuref.MatMul(rows(ln1), w.q, m, model, model)
		scores := cpuref.MatMul(q, kt, m, n, model)
		probs := cpuref.Softmax(cpuref.Scale(scores, float32(1/math.Sqrt(model))), m, n)
		o := cpuref.MatMul(cpuref.MatMul(probs, v, m, model, n), w.o, m, model, model)
		x1 := cpuref.Add(rows(x), o)
		ln2 := cpuref.LayerNorm(x1, w.g2, w.b2, m, model, eps)
		down := cpuref.MatMul(cpuref.GELU(cpuref.MatMul(ln2, w.up, m, ffn, model)), w.down, m, model, ffn)
		out = append(out, cpuref.Add(x1, down)...)
	}
	return out
}
