package client

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
)

// graph builds a model on the calling stream of ctx, keeping the first error
// so the model code reads as a sequence of operations.
type graph struct {
	ctx  context.Context
	c    *Client
	bufs []*Buffer
	err  error
}

// matrix is a row-major f32 matrix on the device.
type matrix struct {
	buf        *Buffer
	rows, cols int
}

func (g *graph) keep(b *Buffer, err error) *Buffer {
	if g.err == nil && err != nil {
		g.err = err
	}
	if b != nil {
		g.bufs = append(g.bufs, b)
	}
	return b
}

func (g *graph) upload(rows, cols int, data []float32) matrix {
	return matrix{g.keep(g.c.Create(g.ctx, cpuref.Bytes(data))), rows, cols}
}

func (g *graph) empty(rows, cols int) matrix {
	return matrix{g.keep(g.c.Empty(g.ctx, uint64(4*rows*cols))), rows, cols}
}

func (g *graph) run(l kernel.Launch, bufs ...*Buffer) {
	if g.err == nil {
		g.err = g.c.Run(g.ctx, l, bufs...)
	}
}

func (g *graph) matmul(a, b matrix) matrix {
	out := g.empty(a.rows, b.cols)
	g.run(kernel.MatMul(uint32(a.rows), uint32(b.cols), uint32(a.cols)), a.buf, b.buf, out.buf)
	return out
}

func (g *graph) add(a, b matrix) matrix {
	out := g.empty(a.rows, a.cols)
	g.run(kernel.Add(uint32(a.rows*a.cols)), a.buf, b.buf, out.buf)
	return out
}

func (g *graph) unary(l func(uint32) kernel.Launch, x matrix) matrix {
	out := g.empty(x.rows, x.cols)
	g.run(l(uint32(x.rows*x.cols)), x.buf, out.buf)
	return out
}

// addBias adds a 1 x cols bias to every row: ones (rows x 1) times the bias
// broadcasts it, with the kernels there are.
func (g *graph) addBias(x, bias, ones matrix) matrix {
	return g.add(x, g.matmul(ones, bias))
}

func (g *graph) transpose(x matrix) matrix {
	out := g.empty(x.cols, x.rows)
	g.run(kernel.Transpose(uint32(x.rows), uint32(x.cols)), x.buf, out.buf)
	return out
}

func (g *graph) read(m matrix) []float32 {
	if g.err != nil {
		return nil
	}
	raw, err := m.buf.Read(g.ctx)
	if err != nil {
		g.err = err
		return nil
	}
	return cpuref.Floats(raw)
}

// free returns every buffer the graph made; the first error wins.
func (g *graph) free() error {
	for _, b := range g.bufs {
		if err := b.Free(); err != nil && g.err == nil {
			g.err = err
		}
	}
	g.bufs = nil
	return g.err
}

func randomMatrix(r *rand.Rand, rows, cols int, scale float32) []float32 {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

func constant(n int, v float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// The CPU reference, in float64.

func refAdd(a, b []float32) []float32 {
	out := make([]float32, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}

func refAddBias(x, bias []float32, cols int) []float32 {
	out := make([]float32, len(x))
	for i := range x {
		out[i] = x[i] + bias[i%cols]
	}
	return out
}

// mlp is a two-layer perceptron: softmax(relu(x W1 + b1) W2 + b2).
type mlp struct {
	batch, in, hidden, out int
	x, w1, b1, w2, b2      []float32
}

func newMLP(seed uint64) *mlp {
	r := rand.New(rand.NewPCG(seed, 1))
	m := &mlp{batch: 48, in: 96, hidden: 256, out: 10}
	m.x = randomMatrix(r, m.batch, m.in, 1)
	m.w1 = randomMatrix(r, m.in, m.hidden, 0.2)
	m.b1 = randomMatrix(r, 1, m.hidden, 0.1)
	m.w2 = randomMatrix(r, m.hidden, m.out, 0.2)
	m.b2 = randomMatrix(r, 1, m.out, 0.1)
	return m
}

func (m *mlp) forward(ctx context.Context, c *Client) ([]float32, error) {
	g := &graph{ctx: ctx, c: c}
	x := g.upload(m.batch, m.in, m.x)
	ones := g.upload(m.batch, 1, constant(m.batch, 1))
	w1, b1 := g.upload(m.in, m.hidden, m.w1), g.upload(1, m.hidden, m.b1)
	w2, b2 := g.upload(m.hidden, m.out, m.w2), g.upload(1, m.out, m.b2)
	h := g.unary(kernel.ReLU, g.addBias(g.matmul(x, w1), b1, ones))
	logits := g.addBias(g.matmul(h, w2), b2, ones)
	probs := g.empty(m.batch, m.out)
	g.run(kernel.Softmax(uint32(m.batch), uint32(m.out)), logits.buf, probs.buf)
	out := g.read(probs)
	return out, g.free()
}

func (m *mlp) reference() []float32 {
	h := cpuref.ReLU(refAddBias(cpuref.MatMul(m.x, m.w1, m.batch, m.hidden, m.in), m.b1, m.hidden))
	logits := refAddBias(cpuref.MatMul(h, m.w2, m.batch, m.out, m.hidden), m.b2, m.out)
	return cpuref.Softmax(logits, m.batch, m.out)
}

// block is a pre-norm transformer block with one attention head:
// x1 = x + softmax(q kᵀ / √d) v Wo with q, k, v = LN1(x) Wq, Wk, Wv, then
// y = x1 + gelu(LN2(x1) W1 + b1) W2 + b2.
type block struct {
	seq, dim, ff                   int
	x, g1, be1, g2, be2            []float32
	wq, wk, wv, wo, w1, b1, w2, b2 []float32
}

const lnEps = 1e-5

func newBlock(seed uint64) *block {
	r := rand.New(rand.NewPCG(seed, 2))
	b := &block{seq: 16, dim: 32, ff: 128}
	d, f := b.dim, b.ff
	b.x = randomMatrix(r, b.seq, d, 1)
	b.g1, b.be1 = randomMatrix(r, 1, d, 1), randomMatrix(r, 1, d, 0.1)
	b.g2, b.be2 = randomMatrix(r, 1, d, 1), randomMatrix(r, 1, d, 0.1)
	b.wq, b.wk, b.wv, b.wo = randomMatrix(r, d, d, 0.3), randomMatrix(r, d, d, 0.3), randomMatrix(r, d, d, 0.3), randomMatrix(r, d, d, 0.3)
	b.w1, b.b1 = randomMatrix(r, d, f, 0.2), randomMatrix(r, 1, f, 0.1)
	b.w2, b.b2 = randomMatrix(r, f, d, 0.2), randomMatrix(r, 1, d, 0.1)
	return b
}

func (b *block) forward(ctx context.Context, c *Client) ([]float32, error) {
	g := &graph{ctx: ctx, c: c}
	s, d, f := b.seq, b.dim, b.ff
	x := g.upload(s, d, b.x)
	ones := g.upload(s, 1, constant(s, 1))
	layerNorm := func(in matrix, gamma, beta []float32) matrix {
		out := g.empty(s, d)
		g.run(kernel.LayerNorm(uint32(s), uint32(d), lnEps), in.buf, g.upload(1, d, gamma).buf, g.upload(1, d, beta).buf, out.buf)
		return out
	}
	h := layerNorm(x, b.g1, b.be1)
	q := g.matmul(h, g.upload(d, d, b.wq))
	k := g.matmul(h, g.upload(d, d, b.wk))
	v := g.matmul(h, g.upload(d, d, b.wv))
	scores := g.empty(s, s)
	g.run(kernel.Scale(uint32(s*s), float32(1/math.Sqrt(float64(d)))), g.matmul(q, g.transpose(k)).buf, scores.buf)
	attn := g.empty(s, s)
	g.run(kernel.Softmax(uint32(s), uint32(s)), scores.buf, attn.buf)
	x1 := g.add(x, g.matmul(g.matmul(attn, v), g.upload(d, d, b.wo)))
	h2 := layerNorm(x1, b.g2, b.be2)
	ff := g.unary(kernel.GELU, g.addBias(g.matmul(h2, g.upload(d, f, b.w1)), g.upload(1, f, b.b1), ones))
	y := g.add(x1, g.addBias(g.matmul(ff, g.upload(f, d, b.w2)), g.upload(1, d, b.b2), ones))
	out := g.read(y)
	return out, g.free()
}

func (b *block) reference() []float32 {
	s, d, f := b.seq, b.dim, b.ff
	h := cpuref.LayerNorm(b.x, b.g1, b.be1, s, d, lnEps)
	q, k, v := cpuref.MatMul(h, b.wq, s, d, d), cpuref.MatMul(h, b.wk, s, d, d), cpuref.MatMul(h, b.wv, s, d, d)
	scores := cpuref.Scale(cpuref.MatMul(q, cpuref.Transpose(k, s, d), s, s, d), float32(1/math.Sqrt(float64(d))))
	attn := cpuref.Softmax(scores, s, s)
	x1 := refAdd(b.x, cpuref.MatMul(cpuref.MatMul(attn, v, s, d, s), b.wo, s, d, d))
	h2 := cpuref.LayerNorm(x1, b.g2, b.be2, s, d, lnEps)
	ff := cpuref.GELU(refAddBias(cpuref.MatMul(h2, b.w1, s, f, d), b.b1, f))
	return refAdd(x1, refAddBias(cpuref.MatMul(ff, b.w2, s, d, f), b.b2, d))
}

type model interface {
	forward(ctx context.Context, c *Client) ([]float32, error)
	reference() []float32
}

func TestMeasuredPlanEndToEnd(t *testing.T) {
	models := map[string]model{"mlp": newMLP(7), "transformer block": newBlock(11)}
	for name, mod := range models {
		for _, strength := range []plan.Strength{plan.Basic, plan.Strong} {
			t.Run(name+"/"+strength.String(), func(t *testing.T) {
				env, err := environment.Open("e2e", environment.WithDir(t.TempDir()))
				require.NoError(t, err)
				defer env.Close()
				c := openClient(t, UseEnvironment(env))
				storage := c.Device().Storage()
				require.Zero(t, storage.Allocated())
				want := mod.reference()

				var got []float32
				workload := func(ctx context.Context) error {
					out, err := mod.forward(ctx, c)
					if !dryrun.Active(ctx) {
						got = out
					} else if err == nil {
						require.Equal(t, make([]float32, len(want)), out, "a dry run reads zeros")
					}
					return err
				}
				m, err := c.MeasurePlan(context.Background(), workload, MeasureOptions{
					Plan: plan.Options{Strength: strength}, Verify: true, Label: name,
				})
				require.NoError(t, err)

				// The dry run held no device memory: every page it carved is
				// unmapped, by the pools' count and the storage's.
				require.Zero(t, m.DeviceBytes)
				var pages, unmapped uint64
				for _, p := range m.DryRun.Dynamic {
					pages += p.Pages
					unmapped += p.PagesUnmapped
				}
				require.Positive(t, pages)
				require.Equal(t, pages, unmapped)
				require.Zero(t, m.DryRun.Usage().NumberAllocs, "the workload frees what it makes")

				// The plan is installed and the real run fit it.
				require.True(t, c.DefaultStream().Layout().Equal(m.Plan))
				require.True(t, m.Verified)
				require.Zero(t, m.Spills)
				devtest.RequireClose(t, want, got, 2e-4, name)

				recs, err := MemoryRecords(context.Background(), env, environment.Query{LabelGlob: name + ": *"})
				require.NoError(t, err)
				require.Len(t, recs, 2)
				require.Equal(t, m.DryRun, recs[0].Value.Report)

				// The plan's pools are no larger than the dry run measured:
				// the real run reserves at most what the growable layout did.
				// The real run held device memory, all of it mapped.
				for _, p := range m.Real.Dynamic {
					require.Zero(t, p.PagesUnmapped)
				}
				require.Positive(t, m.Real.Usage().BytesReserved)
				require.LessOrEqual(t, m.Real.Usage().BytesReserved, peakReserved(m.DryRun),
					"the real run under the plan reserves no more than the dry run's growable pools did at their peak")
				t.Logf("%s, %s plan: dry run peak %d pages (%s), 0 B of device memory; real run reserved %s, %d spills; plan %v",
					name, strength, peakPages(m.DryRun), memory.FormatBytes(peakReserved(m.DryRun)),
					memory.FormatBytes(m.Real.Usage().BytesReserved), m.Spills, m.Plan)
			})
		}
	}
}

func peakPages(r memory.Report) uint64 {
	var n uint64
	for _, p := range r.Dynamic {
		n += p.PagesPeak
	}
	return n
}

// peakReserved bounds the bytes the dynamic pools held at their peaks.
func peakReserved(r memory.Report) uint64 {
	var n uint64
	for _, p := range r.Dynamic {
		if k, ok := p.Kind.(memory.SlicedKind); ok {
			n += p.PagesPeak * k.PageSize
		} else if p.Pages > 0 {
			n += p.Usage.BytesReserved / p.Pages * p.PagesPeak
		}
	}
	return n
}

// TestModelsUnderValidation runs both models, dry and real, with the Khronos
// validation layer watching every Vulkan call: Close reports anything it saw.
func TestModelsUnderValidation(t *testing.T) {
	c, err := Open(context.Background(), WithValidation(true))
	if err != nil {
		openClient(t) // no device at all: the usual skip or failure
		require.NoError(t, err, "the validation layer (vulkan-validationlayers) is needed")
	}
	for _, mod := range []model{newMLP(3), newBlock(5)} {
		_, err := mod.forward(dryrun.With(context.Background()), c)
		require.NoError(t, err)
		got, err := mod.forward(context.Background(), c)
		require.NoError(t, err)
		devtest.RequireClose(t, mod.reference(), got, 2e-4, "forward pass")
	}
	require.NoError(t, c.Close())
}

// A measured plan under the Virtual layout on a device with sparse
// residency: the dry run binds nothing, the plan is virtual, and the real
// run binds memory under its buffers, fits the plan and computes what the
// CPU reference does.
func TestMeasuredVirtualPlanOnASparseDevice(t *testing.T) {
	const granule = 64 << 10
	d, err := cpu.New(cpu.WithSparseGranule(granule))
	require.NoError(t, err)
	ctx := context.Background()
	virtual := memory.VirtualLayout(memory.VirtualPlan{})
	c, err := Open(ctx, WithBackend(d), WithLayout(virtual))
	require.NoError(t, err)
	defer c.Close()
	mod := newBlock(11)
	var got []float32
	workload := func(ctx context.Context) error {
		out, err := mod.forward(ctx, c)
		if !dryrun.Active(ctx) {
			got = out
		}
		return err
	}
	m, err := c.MeasurePlan(ctx, workload, MeasureOptions{Layout: &virtual, Verify: true})
	require.NoError(t, err)
	require.Zero(t, m.DeviceBytes, "the dry run held no device memory")
	_, isVirtual := m.Plan.Virtual()
	require.True(t, isVirtual, "a virtual dry run plans a virtual layout: %v", m.Plan)
	require.Zero(t, m.Spills)
	kind, ok := m.Real.Dynamic[0].Kind.(memory.VirtualKind)
	require.True(t, ok, "the real run's first pool is virtual: %v", m.Real.Dynamic[0].Kind)
	require.Equal(t, uint64(granule), kind.GranuleSize)
	require.Positive(t, c.StorageStats().BindCalls, "the real run bound memory under its buffers")
	devtest.RequireClose(t, mod.reference(), got, 2e-4, "transformer block under a virtual plan")
}
