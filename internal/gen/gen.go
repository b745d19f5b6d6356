// Package gen makes model-like allocation streams from a seed, for judging
// the planner on more streams than the shipped ones: transformer training,
// KV-cache generation, dynamic-shape inference and convolutional training.
package gen

import (
	"fmt"
	"math/rand/v2"

	"github.com/vkrt/vkrt/dryrun/trace"
)

// Shape is the kind of model workload Trace imitates.
type Shape int

const (
	// TransformerTraining: weights, a forward pass saving activations layer
	// by layer, a backward pass freeing them in reverse and allocating
	// gradients, optimizer state made on the first step, several steps.
	TransformerTraining Shape = iota
	// Generation: prefill then token-by-token decoding with KV caches that
	// grow by reallocation (or are preallocated), several requests of
	// different batch and prompt sizes.
	Generation
	// DynamicInference: forward passes with a random batch and sequence
	// length each, activations freed as soon as they are consumed.
	DynamicInference
	// ConvTraining: a convolutional network whose spatial size halves as its
	// channels double, with convolution workspaces and momentum buffers.
	ConvTraining
)

// Shapes lists every Shape.
func Shapes() []Shape {
	return []Shape{TransformerTraining, Generation, DynamicInference, ConvTraining}
}

func (s Shape) String() string {
	switch s {
	case TransformerTraining:
		return "transformer_training"
	case Generation:
		return "generation"
	case DynamicInference:
		return "dynamic_inference"
	case ConvTraining:
		return "conv_training"
	}
	return fmt.Sprintf("Shape(%d)", int(s))
}

// Trace makes a model-like allocation stream of the given shape. The model
// dimensions, batch and sequence sizes and step counts are drawn from seed:
// the same seed and shape give the same stream. Generated events carry line 0.
// Streams stay small enough (thousands to tens of thousands of allocations)
// to plan many of them in a test.
func Trace(seed uint64, shape Shape) *trace.Trace { return Run(seed, shape, 0) }

// Run is another run of the workload Trace(seed, shape) imitates: the same
// model (its dimensions and weights), with the batch and sequence sizes,
// image shapes, prompts and step counts of run drawn afresh, as a user runs
// a workload again after planning from a dry run. Run 0 is Trace.
func Run(seed uint64, shape Shape, run uint64) *trace.Trace {
	name := fmt.Sprintf("%s_%d", shape, seed)
	if run != 0 {
		name = fmt.Sprintf("%s_run%d", name, run)
	}
	g := &generator{rng: rand.New(rand.NewPCG(seed, 0x5eed0000+uint64(shape))), t: &trace.Trace{Name: name},
		seed: seed, run: run}
	switch shape {
	case TransformerTraining:
		g.transformerTraining()
	case Generation:
		g.generation()
	case DynamicInference:
		g.dynamicInference()
	case ConvTraining:
		g.convTraining()
	default:
		panic(fmt.Sprintf("gen: unknown shape %d", int(shape)))
	}
	return g.t
}

type generator struct {
	rng       *rand.Rand
	t         *trace.Trace
	seed, run uint64
}

// model ends the draws of the model's own dimensions: what follows is the
// run's, drawn from the run's own stream unless it is run 0.
func (g *generator) model() {
	if g.run != 0 {
		g.rng = rand.New(rand.NewPCG(g.seed^0x72756e00, g.run))
	}
}

func (g *generator) alloc(bytes uint64) int32 {
	id := int32(g.t.Allocations)
	g.t.Events = append(g.t.Events, trace.Event{Op: trace.OpAlloc, Index: id, Size: max(bytes, 1)})
	g.t.Allocations++
	return id
}

func (g *generator) free(ids ...int32) {
	for _, id := range ids {
		g.t.Events = append(g.t.Events, trace.Event{Op: trace.OpFree, Index: id})
	}
}

// scratch makes and frees a few small short-lived buffers: the scalars,
// index tensors and reductions real kernels leave between the big ones.
func (g *generator) scratch() {
	for range g.rng.IntN(3) {
		g.free(g.alloc(uint64(4 << g.rng.IntN(11))))
	}
}

func (g *generator) pick(options ...uint64) uint64 { return options[g.rng.IntN(len(options))] }

func (g *generator) between(lo, hi int) uint64 { return uint64(lo + g.rng.IntN(hi-lo+1)) }

// transformer are the dimensions of a generated transformer.
type transformer struct {
	layers, hidden, heads, kvHeads, vocab, dtype uint64
}

func (g *generator) transformerDims() transformer {
	hidden := g.pick(256, 512, 768, 1024, 2048)
	heads := hidden / 64
	kv := heads
	if g.rng.IntN(2) == 0 {
		kv = max(1, heads/4) // grouped-query attention
	}
	return transformer{layers: g.between(2, 8), hidden: hidden, heads: heads, kvHeads: kv,
		vocab: g.between(8000, 50000), dtype: g.pick(2, 2, 4)}
}

// weights allocates a transformer's parameters, never freed; it returns
// their sizes so optimizer state can mirror them.
func (g *generator) weights(m transformer) []uint64 {
	h, d := m.hidden, m.dtype
	sizes := []uint64{m.vocab * h * d}
	for range m.layers {
		kvDim := m.kvHeads * 64
		sizes = append(sizes, h*d, h*d, (h+2*kvDim)*h*d, (h+2*kvDim)*d, h*h*d, h*d, h*d, h*d, 4*h*h*d, 4*h*d, 4*h*h*d, h*d)
	}
	sizes = append(sizes, h*d, h*d)
	for _, s := range sizes {
		g.alloc(s)
	}
	return sizes
}

func (g *generator) transformerTraining() {
	m := g.transformerDims()
	g.model()
	params := g.weights(m)
	batch, seq := g.between(1, 16), g.pick(128, 256, 512, 1024)
	tok := batch * seq
	h, d := m.hidden, m.dtype
	var optimizer []int32
	for step := range g.between(2, 4) {
		input := g.alloc(tok * 8)
		x := g.alloc(tok * h * d)
		type saved struct{ ids []int32 }
		layers := make([]saved, m.layers)
		for l := range m.layers {
			ln := g.alloc(tok * h * d)
			qkv := g.alloc(tok * (h + 2*m.kvHeads*64) * d)
			scores := g.alloc(batch * m.heads * seq * seq * d)
			probs := g.alloc(batch * m.heads * seq * seq * d)
			g.free(scores)
			ctx := g.alloc(tok * h * d)
			proj := g.alloc(tok * h * d)
			x2 := g.alloc(tok * h * d)
			g.free(proj)
			g.scratch()
			ln2 := g.alloc(tok * h * d)
			fc1 := g.alloc(4 * tok * h * d)
			act := g.alloc(4 * tok * h * d)
			fc2 := g.alloc(tok * h * d)
			x3 := g.alloc(tok * h * d)
			g.free(fc2)
			layers[l].ids = []int32{ln, qkv, probs, ctx, x2, ln2, fc1, act, x}
			x = x3
		}
		logits := g.alloc(tok * m.vocab * 4)
		loss := g.alloc(4)
		g.scratch()
		grad := g.alloc(tok * m.vocab * 4)
		g.free(logits, loss)
		dx := g.alloc(tok * h * d)
		g.free(grad, x)
		var grads []int32
		grads = append(grads, g.alloc(params[len(params)-1]), g.alloc(params[len(params)-2]))
		for l := int(m.layers) - 1; l >= 0; l-- {
			dAct := g.alloc(4 * tok * h * d)
			grads = append(grads, g.alloc(4*h*h*d), g.alloc(h*d))
			dFc1 := g.alloc(4 * tok * h * d)
			g.free(dAct)
			grads = append(grads, g.alloc(4*h*h*d), g.alloc(4*h*d))
			dLn2 := g.alloc(tok * h * d)
			g.free(dFc1)
			dProbs := g.alloc(batch * m.heads * seq * seq * d)
			dScores := g.alloc(batch * m.heads * seq * seq * d)
			g.free(dProbs)
			dQKV := g.alloc(tok * (h + 2*m.kvHeads*64) * d)
			g.free(dScores)
			grads = append(grads, g.alloc((h+2*m.kvHeads*64)*h*d), g.alloc(h*h*d))
			next := g.alloc(tok * h * d)
			g.free(dQKV, dLn2, dx)
			g.free(layers[l].ids...)
			g.scratch()
			dx = next
		}
		grads = append(grads, g.alloc(params[0]))
		g.free(dx, input)
		if step == 0 { // Adam's two moments, made on the first step
			for _, s := range params {
				optimizer = append(optimizer, g.alloc(s), g.alloc(s))
			}
		}
		for _, s := range params { // a fused update's temporaries, a chunk at a time
			if g.rng.IntN(4) == 0 {
				g.free(g.alloc(s))
			}
		}
		g.free(grads...) // zero_grad(set_to_none)
	}
	_ = optimizer // held to the end, as an optimizer holds its state
}

func (g *generator) generation() {
	m := g.transformerDims()
	g.model()
	g.weights(m)
	h, d := m.hidden, m.dtype
	static := g.rng.IntN(3) == 0 // a preallocated cache instead of a growing one
	for range g.between(2, 4) {
		batch, prompt, tokens := g.between(1, 8), g.between(32, 512), g.between(8, 48)
		kvBytes := func(length uint64) uint64 { return batch * m.kvHeads * 64 * length * d }
		caches := make([]int32, 2*m.layers)
		// prefill
		x := g.alloc(batch * prompt * h * d)
		for l := range m.layers {
			if static {
				caches[2*l], caches[2*l+1] = g.alloc(kvBytes(prompt+tokens)), g.alloc(kvBytes(prompt+tokens))
			} else {
				caches[2*l], caches[2*l+1] = g.alloc(kvBytes(prompt)), g.alloc(kvBytes(prompt))
			}
			scores := g.alloc(batch * m.heads * prompt * prompt * d)
			ctx := g.alloc(batch * prompt * h * d)
			g.free(scores)
			fc := g.alloc(4 * batch * prompt * h * d)
			out := g.alloc(batch * prompt * h * d)
			g.free(fc, ctx, x)
			x = out
		}
		logits := g.alloc(batch * m.vocab * 4)
		g.free(x, logits)
		// decode, one token at a time
		for t := range tokens {
			length := prompt + t + 1
			x := g.alloc(batch * h * d)
			for l := range m.layers {
				if !static {
					for j := 2 * l; j <= 2*l+1; j++ {
						grown := g.alloc(kvBytes(length))
						g.free(caches[j])
						caches[j] = grown
					}
				}
				scores := g.alloc(batch * m.heads * length * d)
				ctx := g.alloc(batch * h * d)
				g.free(scores)
				g.scratch()
				fc := g.alloc(4 * batch * h * d)
				out := g.alloc(batch * h * d)
				g.free(fc, ctx, x)
				x = out
			}
			logits := g.alloc(batch * m.vocab * 4)
			next := g.alloc(batch * 8)
			g.free(logits, x, next)
		}
		g.free(caches...)
	}
}

func (g *generator) dynamicInference() {
	m := g.transformerDims()
	g.model()
	g.weights(m)
	h, d := m.hidden, m.dtype
	for range g.between(8, 30) {
		batch, seq := g.between(1, 64), g.between(16, 512)
		tok := batch * seq
		mask := g.alloc(batch * seq * 8)
		x := g.alloc(tok * h * d)
		for range m.layers {
			qkv := g.alloc(3 * tok * h * d)
			scores := g.alloc(batch * m.heads * seq * seq * d)
			probs := g.alloc(batch * m.heads * seq * seq * d)
			g.free(scores)
			ctx := g.alloc(tok * h * d)
			g.free(probs, qkv)
			attn := g.alloc(tok * h * d)
			g.free(ctx)
			g.scratch()
			fc1 := g.alloc(4 * tok * h * d)
			act := g.alloc(4 * tok * h * d)
			g.free(fc1)
			fc2 := g.alloc(tok * h * d)
			g.free(act)
			out := g.alloc(tok * h * d)
			g.free(fc2, attn, x)
			x = out
		}
		pooled := g.alloc(batch * h * d)
		g.free(x, mask, pooled)
	}
}

func (g *generator) convTraining() {
	batch := g.between(8, 64)
	channels := g.pick(32, 64)
	side := g.pick(56, 112, 224)
	d := g.pick(2, 4)
	blocks := make([]uint64, 4) // blocks per stage
	var params []uint64
	for s := range blocks {
		blocks[s] = g.between(1, 4)
		c := channels << s
		for range blocks[s] {
			params = append(params, 9*c*c*d, c*d, c*d)
		}
	}
	g.model()
	if g.run != 0 {
		batch, side = g.between(8, 64), g.pick(56, 112, 224)
	}
	for _, p := range params {
		g.alloc(p)
	}
	var momentum []int32
	for step := range g.between(2, 4) {
		type block struct {
			ids  []int32
			size uint64
		}
		var saved []block
		input := g.alloc(batch * 3 * side * side * d)
		x := input
		for s := range blocks {
			c, sd := channels<<s, side>>s
			act := batch * c * sd * sd * d
			for range blocks[s] {
				workspace := g.alloc(g.between(1, 64) << 20)
				conv := g.alloc(act)
				g.free(workspace)
				bn := g.alloc(act)
				relu := g.alloc(act)
				saved = append(saved, block{[]int32{conv, bn, x}, act})
				x = relu
			}
		}
		logits := g.alloc(batch * 1000 * 4)
		grad := g.alloc(batch * 1000 * 4)
		g.free(logits)
		var grads []int32
		dx := g.alloc(batch * (channels << 3) * (side >> 3) * (side >> 3) * d)
		g.free(grad)
		for i := len(saved) - 1; i >= 0; i-- {
			size := saved[i].size
			dBn := g.alloc(size)
			workspace := g.alloc(g.between(1, 64) << 20)
			grads = append(grads, g.alloc(params[len(params)-1-i%len(params)]))
			next := g.alloc(size)
			g.free(workspace, dBn, dx)
			g.free(saved[i].ids...)
			dx = next
		}
		g.free(dx, x)
		if step == 0 {
			for _, p := range params {
				momentum = append(momentum, g.alloc(p))
			}
		}
		g.free(grads...)
	}
	_ = momentum
}
