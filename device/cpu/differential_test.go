package cpu_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// The differential test's knobs.
const (
	// diffSeedEnv fixes the seed; by default it is taken from the clock and
	// printed, so any failure can be replayed.
	diffSeedEnv = "VKRT_DIFF_SEED"
	// diffLaunchesEnv sets how many launches are drawn (default
	// diffDefaultLaunches).
	diffLaunchesEnv = "VKRT_DIFF_LAUNCHES"
	// diffOnlyEnv runs only the launches of these indices (comma-separated)
	// of the seed's sequence: each launch draws from its own stream
	// (seed, index), so one launch replays alone.
	diffOnlyEnv = "VKRT_DIFF_ONLY"

	diffDefaultLaunches = 300
	// diffMaxWords bounds every binding to 4 MiB.
	diffMaxWords = 1 << 20
	// diffMaxMACs bounds a matmul's multiply-adds, which lavapipe runs on
	// the CPU.
	diffMaxMACs = 1 << 23
	// diffMaxGroups bounds a grid: lavapipe runs a million empty work
	// groups in seconds.
	diffMaxGroups = 1 << 16
)

// Random valid launches of every kernel run on the cpu device and on the
// first Vulkan device (lavapipe where there is no GPU) and must agree:
// bit for bit where the kernel is exact (fill, copy, transpose, add, mul,
// scale, relu; any NaN matches any NaN, whose payload is not kept), within
// the tolerance each kernel's Doc states otherwise (gelu, softmax,
// layernorm, matmul, reduce_sum), and where the Doc leaves a result to
// float32's range (sums that can overflow) only a NaN must stay NaN. Shapes, grids, push constants, special floats,
// in-place and aliased bindings and offsets inside larger pages are drawn
// at random; every byte of every page but the outputs the launch writes
// must come back as it was uploaded.
//
// VKRT_DIFF_SEED=s replays seed s (printed on every run), VKRT_DIFF_ONLY=i
// one launch of it, VKRT_DIFF_LAUNCHES=n draws more (or fewer).
func TestDifferentialAgainstVulkan(t *testing.T) {
	if openVulkan == nil {
		t.Skip("built without cgo: no Vulkan device to compare with")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(diffSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, diffSeedEnv)
		seed = v
	}
	launches := diffDefaultLaunches
	if s := os.Getenv(diffLaunchesEnv); s != "" {
		v, err := strconv.Atoi(s)
		require.NoError(t, err, diffLaunchesEnv)
		launches = v
	}
	var only []int
	if s := os.Getenv(diffOnlyEnv); s != "" {
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, diffOnlyEnv)
			only = append(only, v)
		}
	} else {
		for i := range launches {
			only = append(only, i)
		}
	}
	t.Logf("seed %d, %d launches (replay with %s=%d)", seed, len(only), diffSeedEnv, seed)

	vkd := openVulkan(t)
	cpud := newDevice(t, cpu.WithAlignment(vkd.Properties().Alignment))
	limits := []kernel.Limits{cpud.Limits(), vkd.Limits()}
	// A device may flush subnormal floats to zero (NVIDIA's do; lavapipe
	// keeps them), as the kernels' docs allow: then the launches get no
	// subnormal input, and a subnormal result is the device's zero.
	flush := flushesSubnormals(t, vkd)
	if flush {
		t.Logf("%s flushes subnormal floats to zero", vkd.Name())
	}
	// Vulkan does not require a shader to keep NaNs: relu's comparison
	// gives 0 for one on NVIDIA, NaN on lavapipe and the cpu device.
	reluNaNs := reluKeepsNaN(t, vkd)
	if !reluNaNs {
		t.Logf("%s turns relu's NaNs into 0", vkd.Name())
	}

	stats := map[string]*diffStats{}
	failures := 0
	for _, i := range only {
		c := drawCase(rand.New(rand.NewPCG(seed, uint64(i))), vkd.Properties().Alignment, limits)
		c.flush, c.reluZeroesNaN = flush, !reluNaNs
		if flush {
			c.flushSubnormalInputs()
		}
		st := stats[c.k.Name]
		if st == nil {
			st = &diffStats{}
			stats[c.k.Name] = st
		}
		st.launches++
		start := time.Now()
		problems := c.run(t.Context(), cpud, vkd, st)
		if d := time.Since(start); d > time.Second {
			t.Logf("launch %d took %v: %s", i, d.Round(time.Millisecond), c)
		}
		if len(problems) > 0 {
			failures++
			if failures <= 20 {
				t.Errorf("seed %d launch %d (%s=%d %s=%d): %s\n\t%s", seed, i, diffSeedEnv, seed, diffOnlyEnv, i,
					c, strings.Join(problems, "\n\t"))
			}
		}
	}
	for _, k := range kernel.All() {
		if st := stats[k.Name]; st != nil {
			t.Logf("%-10s %4d launches, worst error %.3g of its tolerance", k.Name, st.launches, st.worst)
		}
	}
	if failures > 0 {
		t.Errorf("seed %d: %d of %d launches disagree (replay with %s=%d)", seed, failures, len(only), diffSeedEnv, seed)
	}
}

type diffStats struct {
	launches int
	worst    float64 // the largest |cpu - vulkan| / tolerance seen
}

// diffBinding is where one binding lies: a byte range of one page.
type diffBinding struct {
	page       int
	off, size  uint64
	need       uint64
	valuesKind string // how an input's values were drawn
}

type diffCase struct {
	k        kernel.Kernel
	grid     [3]uint32
	push     []byte
	bindings []diffBinding
	pages    [][]byte // the pages' contents before the launch
	layout   string
	flush    bool // the Vulkan device flushes subnormal floats to zero
	// reluZeroesNaN: the Vulkan device's relu gives 0 for a NaN.
	reluZeroesNaN bool
}

// reluKeepsNaN probes d: relu of a NaN is NaN where the device keeps NaNs.
func reluKeepsNaN(t *testing.T, d device.Device) bool {
	l := kernel.ReLU(1)
	c := &diffCase{k: l.Kernel, grid: [3]uint32{1, 1, 1}, push: l.Push,
		bindings: []diffBinding{{page: 0, off: 0, size: 4, need: 4}, {page: 0, off: 256, size: 4, need: 4}},
		pages:    [][]byte{make([]byte, 512)}}
	binary.LittleEndian.PutUint32(c.pages[0], 0x7fc00000)
	out, err := c.runOn(t.Context(), d)
	require.NoError(t, err)
	return isNaN(math.Float32frombits(binary.LittleEndian.Uint32(out[0][256:])))
}

// isSubnormal says whether f is a subnormal float32.
func isSubnormal(f float32) bool {
	b := math.Float32bits(f) & 0x7fffffff
	return b != 0 && b < 0x00800000
}

// flushSubnormalInputs sets every subnormal float of the inputs (and of
// the float push constants) to zero of its sign, for a device that flushes
// them: both devices then compute on the same values.
func (c *diffCase) flushSubnormalInputs() {
	for i, b := range c.k.Bindings {
		if b.Access != "read" {
			continue
		}
		h := c.bindings[i]
		p := c.pages[h.page]
		for j := h.off; j+4 <= h.off+h.size; j += 4 {
			if w := binary.LittleEndian.Uint32(p[j:]); isSubnormal(math.Float32frombits(w)) {
				binary.LittleEndian.PutUint32(p[j:], w&0x80000000)
			}
		}
	}
	var floats []int // the push constants that are floats
	switch c.k.Name {
	case "scale":
		floats = []int{1}
	case "layernorm":
		floats = []int{2}
	}
	for _, i := range floats {
		if w := binary.LittleEndian.Uint32(c.push[4*i:]); isSubnormal(math.Float32frombits(w)) {
			binary.LittleEndian.PutUint32(c.push[4*i:], w&0x80000000)
		}
	}
}

// flushesSubnormals probes d: 1 × the largest subnormal comes back 0 on a
// device that flushes subnormals.
func flushesSubnormals(t *testing.T, d device.Device) bool {
	c := &diffCase{k: kernel.Scale(1, 1).Kernel, grid: [3]uint32{1, 1, 1}, push: kernel.Scale(1, 1).Push,
		bindings: []diffBinding{{page: 0, off: 0, size: 4, need: 4}, {page: 0, off: 256, size: 4, need: 4}},
		pages:    [][]byte{make([]byte, 512)}}
	binary.LittleEndian.PutUint32(c.pages[0], 0x007fffff)
	out, err := c.runOn(t.Context(), d)
	require.NoError(t, err)
	return binary.LittleEndian.Uint32(out[0][256:]) == 0
}

func (c *diffCase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s grid %v push {", c.k.Name, c.grid)
	for i, f := range c.k.Push {
		if i > 0 {
			b.WriteString(" ")
		}
		v := binary.LittleEndian.Uint32(c.push[f.Offset:])
		if f.Type == "f32" {
			fmt.Fprintf(&b, "%s=%g (%#08x)", f.Name, math.Float32frombits(v), v)
		} else {
			fmt.Fprintf(&b, "%s=%d", f.Name, v)
		}
	}
	fmt.Fprintf(&b, "} %s:", c.layout)
	for i, h := range c.bindings {
		fmt.Fprintf(&b, " %s=page%d[%d:+%d]", c.k.Bindings[i].Name, h.page, h.off, h.size)
		if h.valuesKind != "" {
			fmt.Fprintf(&b, "(%s)", h.valuesKind)
		}
	}
	return b.String()
}

func (c *diffCase) u32(i int) int { return int(binary.LittleEndian.Uint32(c.push[4*i:])) }
func (c *diffCase) f32(i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(c.push[4*i:]))
}

// handles are the bindings on pages of the given ids.
func (c *diffCase) handles(ids []vkruntime.StorageID) []vkruntime.StorageHandle {
	hs := make([]vkruntime.StorageHandle, len(c.bindings))
	for i, b := range c.bindings {
		hs[i] = vkruntime.StorageHandle{ID: ids[b.page], Offset: b.off, Size: b.size}
	}
	return hs
}

// input is binding i's first n floats as uploaded.
func (c *diffCase) input(i, n int) []float32 {
	b := c.bindings[i]
	return floatsOf(c.pages[b.page][b.off : b.off+4*uint64(n)])
}

func floatsOf(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// runOn uploads the pages to d, dispatches the launch and reads the pages
// back.
func (c *diffCase) runOn(ctx context.Context, d device.Device) ([][]byte, error) {
	s := d.Storage()
	ids := make([]vkruntime.StorageID, len(c.pages))
	defer func() {
		for _, id := range ids {
			if id != 0 {
				s.Dealloc(id)
			}
		}
		s.Flush()
	}()
	for i, p := range c.pages {
		h, err := s.Alloc(uint64(len(p)))
		if err != nil {
			return nil, err
		}
		ids[i] = h.ID
		if err := d.Upload(ctx, h, p); err != nil {
			return nil, err
		}
	}
	op := kernel.Op{Kernel: c.k, Grid: c.grid, Bindings: c.handles(ids), Push: c.push}
	if err := d.Dispatch(ctx, []kernel.Op{op}); err != nil {
		return nil, err
	}
	out := make([][]byte, len(c.pages))
	for i, p := range c.pages {
		out[i] = make([]byte, len(p))
		if err := d.Download(ctx, vkruntime.StorageHandle{ID: ids[i], Size: uint64(len(p))}, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// run runs the launch on both devices and says how they disagree.
func (c *diffCase) run(ctx context.Context, cpud, vkd device.Device, st *diffStats) []string {
	cpuPages, err := c.runOn(ctx, cpud)
	if err != nil {
		return []string{fmt.Sprintf("cpu device: %v", err)}
	}
	vkPages, err := c.runOn(ctx, vkd)
	if err != nil {
		return []string{fmt.Sprintf("vulkan device: %v", err)}
	}
	var problems []string
	// Every byte outside the written outputs is as uploaded.
	written := make([][]bool, len(c.pages))
	for i, p := range c.pages {
		written[i] = make([]bool, len(p))
	}
	for i, b := range c.bindings {
		if c.k.Bindings[i].Access == "write" {
			for j := b.off; j < b.off+b.need; j++ {
				written[b.page][j] = true
			}
		}
	}
	for p, orig := range c.pages {
		for name, got := range map[string][]byte{"cpu": cpuPages[p], "vulkan": vkPages[p]} {
			for j := range orig {
				if !written[p][j] && got[j] != orig[j] {
					problems = append(problems, fmt.Sprintf("%s changed byte %d of page %d outside the outputs: %#02x, was %#02x", name, j, p, got[j], orig[j]))
					break
				}
			}
		}
	}
	for i, b := range c.bindings {
		if c.k.Bindings[i].Access != "write" || b.need == 0 {
			continue
		}
		cpuOut := cpuPages[b.page][b.off : b.off+b.need]
		vkOut := vkPages[b.page][b.off : b.off+b.need]
		problems = append(problems, c.compare(cpuOut, vkOut, st)...)
	}
	return problems
}

// The tolerances the kernels' docs state, in units of float32's unit
// roundoff u = 2^-24 where they scale with it.
const (
	f32U         = 1.0 / (1 << 24)
	f32MinNormal = 0x1p-126
	// f32Safe bounds the sums a float32 computation may take without
	// overflowing whatever order it adds in.
	f32Safe       = 0x1p127
	geluTolerance = 1e-6 // |cpu - device| <= geluTolerance (1 + |cpu|)
)

// compare checks an output's bytes, cpu against Vulkan.
func (c *diffCase) compare(cpuOut, vkOut []byte, st *diffStats) []string {
	var problems []string
	report := func(i int, format string, args ...any) {
		if len(problems) < 5 {
			problems = append(problems, fmt.Sprintf("element %d: ", i)+fmt.Sprintf(format, args...))
		} else if len(problems) == 5 {
			problems = append(problems, "…")
		}
	}
	cw, vw := floatsOf(cpuOut), floatsOf(vkOut)
	// within compares one element against a tolerance; note records how
	// close it came.
	within := func(i int, tol float64, what func() string) {
		a, b := cw[i], vw[i]
		switch {
		case isNaN(a) || isNaN(b):
			if !(isNaN(a) && isNaN(b)) {
				report(i, "cpu %g, vulkan %g%s", a, b, what())
			}
			return
		case math.IsInf(float64(a), 0) || math.IsInf(float64(b), 0):
			if a != b {
				report(i, "cpu %g, vulkan %g%s", a, b, what())
			}
			return
		}
		d := math.Abs(float64(a) - float64(b))
		if d == 0 {
			return
		}
		if !(d <= tol) {
			report(i, "cpu %g (%#08x), vulkan %g (%#08x): |difference| %g > tolerance %g%s", a, math.Float32bits(a), b, math.Float32bits(b), d, tol, what())
		}
		if tol > 0 {
			st.worst = max(st.worst, d/tol)
		} else {
			st.worst = math.Inf(1)
		}
	}
	none := func() string { return "" }
	// outOfRange is an element whose float32 intermediates can overflow
	// (or lose all precision): any result but NaN for a NaN is allowed,
	// since NaN inputs (and Inf - Inf, Inf x 0 of the inputs themselves)
	// give NaN in any order of evaluation.
	outOfRange := func(i int, what func() string) {
		if isNaN(cw[i]) && !isNaN(vw[i]) {
			report(i, "cpu NaN, vulkan %g%s", vw[i], what())
		}
	}

	switch c.k.Name {
	case "fill", "copy", "transpose":
		if !bytes.Equal(cpuOut, vkOut) {
			for i := range cw {
				if math.Float32bits(cw[i]) != math.Float32bits(vw[i]) {
					report(i, "cpu %#08x, vulkan %#08x", math.Float32bits(cw[i]), math.Float32bits(vw[i]))
				}
			}
		}
	case "add", "mul", "scale", "relu":
		n := len(cw)
		ins := make([][]float32, 0, 2)
		for i, b := range c.k.Bindings {
			if b.Access == "read" {
				ins = append(ins, c.input(i, n))
			}
		}
		for i := range cw {
			a, b := cw[i], vw[i]
			if math.Float32bits(a) == math.Float32bits(b) || isNaN(a) && isNaN(b) {
				continue
			}
			if c.flush && isSubnormal(a) && b == 0 {
				continue // the device flushed a subnormal result
			}
			if c.reluZeroesNaN && c.k.Name == "relu" && isNaN(a) && b == 0 {
				continue // the device does not keep NaNs
			}
			args := ""
			for _, in := range ins {
				args += fmt.Sprintf(" %g (%#08x)", in[i], math.Float32bits(in[i]))
			}
			report(i, "cpu %g (%#08x), vulkan %g (%#08x), inputs%s", a, math.Float32bits(a), b, math.Float32bits(b), args)
		}
	case "gelu":
		x := c.input(0, len(cw))
		for i := range cw {
			within(i, geluTolerance*(1+math.Abs(float64(cw[i]))), func() string { return fmt.Sprintf(", x %g", x[i]) })
		}
	case "softmax":
		tol := softmaxTolerance(c.u32(1))
		for i := range cw {
			within(i, tol, none)
		}
	case "layernorm":
		rows, cols := c.u32(0), c.u32(1)
		x := c.input(0, rows*cols)
		gamma, beta := c.input(1, cols), c.input(2, cols)
		eps := float64(c.f32(2))
		for r := range rows {
			row := x[r*cols : (r+1)*cols]
			tols, inRange := layerNormTolerances(row, gamma, beta, eps)
			for j := range cols {
				i := r*cols + j
				what := func() string { return fmt.Sprintf(", row %d col %d, x %g", r, j, row[j]) }
				if inRange {
					within(i, tols[j], what)
				} else {
					outOfRange(i, what)
				}
			}
		}
	case "reduce_sum":
		n := c.u32(0)
		x := c.input(0, n)
		groups := int(c.grid[0]) * int(c.grid[1])
		abs := make([]float64, groups)
		for i, v := range x {
			abs[(i/256)%groups] += math.Abs(float64(v))
		}
		perInvocation := (n + 256*groups - 1) / (256 * groups)
		for g := range cw {
			what := func() string { return fmt.Sprintf(", sum of |x| %g", abs[g]) }
			if abs[g] <= f32Safe {
				within(g, reduceSumTolerance(perInvocation, abs[g]), what)
			} else {
				outOfRange(g, what)
			}
		}
	case "matmul":
		m, n, k := c.u32(0), c.u32(1), c.u32(2)
		a, b := c.input(0, m*k), c.input(1, k*n)
		absRow := make([]float64, n)
		for i := range m {
			clear(absRow)
			for x := range k {
				av := math.Abs(float64(a[i*k+x]))
				for j, bv := range b[x*n : (x+1)*n] {
					absRow[j] += av * math.Abs(float64(bv))
				}
			}
			for j := range n {
				what := func() string { return fmt.Sprintf(", row %d col %d, sum |a||b| %g", i, j, absRow[j]) }
				if absRow[j] <= f32Safe {
					within(i*n+j, matMulTolerance(k, absRow[j]), what)
				} else {
					outOfRange(i*n+j, what)
				}
			}
		}
	}
	return problems
}

func isNaN(f float32) bool { return f != f }

// The tolerances below are the ones the kernels' docs state.

func softmaxTolerance(cols int) float64 {
	return 0x1p-20 * float64(8+cols/256)
}

// layerNormTolerances is each column's tolerance for one row, and whether
// the row is in float32's range: its sum, its sum of squared deviations
// and its variance plus eps neither overflow nor fall to where float32
// has lost precision.
func layerNormTolerances(row, gamma, beta []float32, eps float64) ([]float64, bool) {
	cols := len(row)
	var mean, q, absSum, absMax float64
	for _, v := range row {
		mean += float64(v)
		absSum += math.Abs(float64(v))
		absMax = max(absMax, math.Abs(float64(v)))
	}
	mean /= float64(cols)
	for _, v := range row {
		q += (float64(v) - mean) * (float64(v) - mean)
	}
	if !(absSum <= f32Safe && q <= f32Safe && q/float64(cols)+eps >= 0x1p-80) {
		return nil, false
	}
	sd := math.Sqrt(q/float64(cols) + eps)
	// The float32 mean and variance are off by some (cols/256 + 8) u of
	// the row's largest magnitude; divided by sd that is the error of each
	// (x - mean) / sd.
	cond := absMax / sd
	tols := make([]float64, cols)
	for j := range cols {
		tols[j] = 0x1p-19*float64(8+cols/256)*(1+cond)*(1+math.Abs(float64(gamma[j]))) + 0x1p-22*math.Abs(float64(beta[j]))
	}
	return tols, true
}

func reduceSumTolerance(perInvocation int, absSum float64) float64 {
	return 2*f32U*float64(perInvocation+8)*absSum + float64(perInvocation+256)*f32MinNormal
}

func matMulTolerance(k int, absSum float64) float64 {
	return 2*f32U*float64(k+2)*absSum + float64(k+1)*f32MinNormal
}

// ---- drawing launches ----

var edgeCounts = []int{1, 2, 3, 4, 5, 7, 8, 13, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257,
	511, 512, 513, 1021, 1023, 1024, 1025, 4093, 4096, 4097, 65521, 65535, 65536, 65537, 262139, 1<<20 - 3, 1 << 20}

func nextPrime(n int) int {
	for ; ; n++ {
		if n < 2 {
			continue
		}
		prime := true
		for d := 2; d*d <= n; d++ {
			if n%d == 0 {
				prime = false
				break
			}
		}
		if prime {
			return n
		}
	}
}

// drawCount draws a count in [0, limit]: edge sizes, primes, small and
// large ones; 0 only when zero allows it.
func drawCount(r *rand.Rand, limit int, zero bool) int {
	if limit <= 0 {
		return 0
	}
	switch p := r.IntN(20); {
	case p == 0 && zero:
		return 0
	case p < 9:
		for {
			if v := edgeCounts[r.IntN(len(edgeCounts))]; v <= limit {
				return v
			}
		}
	case p < 12:
		if v := nextPrime(1 + r.IntN(limit)); v <= limit {
			return v
		}
		return limit
	case p < 13:
		return limit // the largest that fits
	case p < 17:
		return 1 + r.IntN(min(limit, 300))
	default:
		return 1 + r.IntN(limit)
	}
}

var specials = []float32{
	0, float32(math.Copysign(0, -1)),
	math.Float32frombits(1), math.Float32frombits(0x80000001), // the smallest subnormals
	math.Float32frombits(0x007fffff), math.Float32frombits(0x807fffff), // the largest
	math.Float32frombits(0x00400000), math.Float32frombits(0x80012345),
	f32MinNormal, -f32MinNormal,
	math.MaxFloat32, -math.MaxFloat32, 1e38, -3e38, 1e30, -1e20, 1e-30, -1e-38,
	float32(math.Inf(1)), float32(math.Inf(-1)),
	float32(math.NaN()), math.Float32frombits(0xffc00000), math.Float32frombits(0x7fc12345), math.Float32frombits(0xff812345),
	1, -1, 0.5, -2, 65504, 16777216, 16777217, 1.0000001,
}

var valueKinds = []string{"normal", "normal", "normal", "wide", "wide", "special", "special", "bits"}

// drawValue draws one float of the kind.
func drawValue(r *rand.Rand, kind string, scale float32) float32 {
	switch kind {
	case "wide": // every exponent, subnormals included
		f := math.Float32frombits(uint32(r.IntN(255))<<23 | uint32(r.Uint32()&0x7fffff))
		if r.IntN(2) == 0 {
			f = -f
		}
		return f
	case "special": // special values among ordinary ones
		if r.IntN(3) == 0 {
			return specials[r.IntN(len(specials))]
		}
		return (2*r.Float32() - 1) * scale
	case "bits":
		return math.Float32frombits(r.Uint32())
	}
	return (2*r.Float32() - 1) * scale
}

func drawCase(r *rand.Rand, align uint64, limits []kernel.Limits) *diffCase {
	ks := kernel.All()
	k := ks[r.IntN(len(ks))]
	for attempt := 0; ; attempt++ {
		c, ok := drawLaunch(r, k, align)
		if !ok {
			continue
		}
		if c.groups() > diffMaxGroups {
			continue
		}
		hs := c.handles([]vkruntime.StorageID{1, 2, 3, 4, 5})
		valid := true
		for _, l := range limits {
			if err := kernel.Validate(c.k, c.grid, hs, c.push, l); err != nil {
				valid = false
				if attempt > 50 {
					panic(fmt.Sprintf("no valid launch of %s drawn: %v", k.Name, err))
				}
			}
		}
		if valid {
			return c
		}
	}
}

// groups is the launch's work-group count.
func (c *diffCase) groups() int { return int(c.grid[0]) * int(c.grid[1]) * int(c.grid[2]) }

func pack32(v ...uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// drawGrid draws a grid for work that canonical covers: mostly canonical,
// else one work group, a small two-dimensional grid, a larger one than
// needed or (rarely) one of no work group, which kernel.Validate refuses
// unless the launch is empty (drawCase draws again).
func drawGrid(r *rand.Rand, canonical [3]uint32) [3]uint32 {
	switch p := r.IntN(20); {
	case p < 10:
		return canonical
	case p < 12:
		return [3]uint32{1, 1, 1}
	case p < 15:
		return [3]uint32{1 + uint32(r.IntN(40)), 1 + uint32(r.IntN(4)), 1}
	case p < 19:
		return [3]uint32{min(65535, canonical[0]+1+uint32(r.IntN(64))), max(1, canonical[1]) + uint32(r.IntN(2)), 1}
	default:
		return [][3]uint32{{0, 1, 1}, {3, 0, 1}, {2, 2, 0}}[r.IntN(3)]
	}
}

func drawLaunch(r *rand.Rand, k kernel.Kernel, align uint64) (*diffCase, bool) {
	c := &diffCase{k: k}
	var need []uint64
	scale := []float32{1, 4, 100, 1e4}[r.IntN(4)]
	switch k.Name {
	case "fill", "copy", "add", "mul", "scale", "relu", "gelu":
		n := drawCount(r, diffMaxWords, true)
		extra := []uint32{}
		switch k.Name {
		case "fill":
			extra = append(extra, math.Float32bits(drawValue(r, valueKinds[r.IntN(len(valueKinds))], scale)))
		case "scale":
			extra = append(extra, math.Float32bits(drawValue(r, []string{"normal", "wide", "special", "special"}[r.IntN(4)], scale)))
		}
		c.push = pack32(append([]uint32{uint32(n)}, extra...)...)
		canonical := kernel.ElementGrid(uint64(n))
		if k.Name == "copy" {
			canonical = kernel.CopyWords(uint32(n)).Grid
		}
		c.grid = drawGrid(r, canonical)
		for range k.Bindings {
			need = append(need, 4*uint64(n))
		}
	case "softmax", "layernorm":
		cols := drawCount(r, 1<<17, true)
		rows := drawCount(r, diffMaxWords/max(1, cols), true)
		if r.IntN(4) == 0 {
			rows = 1 + r.IntN(min(8, diffMaxWords/max(1, cols)))
		}
		c.push = pack32(uint32(rows), uint32(cols))
		n := 4 * uint64(rows) * uint64(cols)
		need = []uint64{n, n}
		if k.Name == "layernorm" {
			eps := []float32{1e-5, 1e-5, 1e-5, 1e-6, 1e-12, 1, 0.1, 1e-30, f32MinNormal, 1e30}[r.IntN(10)]
			c.push = append(c.push, pack32(math.Float32bits(eps))...)
			need = []uint64{n, 4 * uint64(cols), 4 * uint64(cols), n}
		}
		c.grid = drawGrid(r, kernel.RowGrid(uint64(rows)))
	case "reduce_sum":
		n := drawCount(r, diffMaxWords, true)
		c.push = pack32(uint32(n))
		switch p := r.IntN(6); {
		case p < 2:
			c.grid = [3]uint32{1, 1, 1}
		case p < 4:
			c.grid = [3]uint32{uint32([]int{2, 3, 7, 255, 256, 257}[r.IntN(6)]), 1, 1}
		case p < 5:
			c.grid = [3]uint32{uint32((n+255)/256 + r.IntN(3)), 1, 1}
		default:
			c.grid = [3]uint32{1 + uint32(r.IntN(30)), 1 + uint32(r.IntN(5)), 1}
		}
		need = []uint64{4 * uint64(n), 4 * uint64(c.grid[0]) * uint64(c.grid[1])}
	case "matmul":
		dims := func() int {
			if r.IntN(3) == 0 {
				return []int{1, 2, 3, 4, 5, 7, 8, 31, 32, 33, 127, 128, 129, 255, 256, 257}[r.IntN(16)]
			}
			return drawCount(r, 600, true)
		}
		m, n, kk := dims(), dims(), dims()
		if m*n*kk > diffMaxMACs || m*kk > diffMaxWords || kk*n > diffMaxWords || m*n > diffMaxWords {
			return nil, false
		}
		c.push = pack32(uint32(m), uint32(n), uint32(kk))
		want := kernel.MatMul(uint32(m), uint32(n), uint32(kk)).Grid
		switch p := r.IntN(5); {
		case p < 3:
			c.grid = want
		case p < 4:
			c.grid = [3]uint32{want[0] + uint32(r.IntN(3)), want[1] + uint32(r.IntN(3)), 1}
		default:
			if m == 0 || n == 0 {
				c.grid = [3]uint32{uint32(r.IntN(2)), uint32(r.IntN(2)), uint32(r.IntN(2))}
			} else {
				c.grid = [3]uint32{want[0] + 1, want[1], 1}
			}
		}
		need = []uint64{4 * uint64(m*kk), 4 * uint64(kk*n), 4 * uint64(m*n)}
	case "transpose":
		rows := drawCount(r, diffMaxWords, true)
		cols := drawCount(r, diffMaxWords/max(1, rows), true)
		c.push = pack32(uint32(rows), uint32(cols))
		switch p := r.IntN(6); {
		case p < 3:
			c.grid = kernel.Transpose(uint32(rows), uint32(cols)).Grid
		case p < 4:
			c.grid = [3]uint32{1, 1, 1}
		default:
			c.grid = [3]uint32{1 + uint32(r.IntN(40)), 1 + uint32(r.IntN(40)), 1}
		}
		need = []uint64{4 * uint64(rows) * uint64(cols), 4 * uint64(rows) * uint64(cols)}
	default:
		panic("the differential test does not know kernel " + k.Name)
	}
	c.layout = c.place(r, need, align)
	c.fill(r, scale)
	return c, true
}

// inPlaceInputs are the inputs a kernel's output may be, in place, as
// kernel.Validate allows.
var inPlaceInputs = map[string][]int{
	"copy": {0}, "add": {0, 1}, "mul": {0, 1}, "scale": {0}, "relu": {0}, "gelu": {0},
	"softmax": {0}, "layernorm": {0},
}

// place lays the bindings out: each on a page of its own, or all on one
// page, at aligned offsets past a random gap, with random slack after
// them; an output may be one of its inputs (in place) and two inputs may
// be one range.
func (c *diffCase) place(r *rand.Rand, need []uint64, align uint64) string {
	n := len(need)
	c.bindings = make([]diffBinding, n)
	slack := func() uint64 {
		return []uint64{0, 0, 0, 4, 12, 16, 252, 4 * uint64(r.IntN(300))}[r.IntN(8)]
	}
	// same[i] = j < i: binding i is binding j's range.
	same := make([]int, n)
	for i := range same {
		same[i] = i
	}
	var layout []string
	out := -1
	for i, b := range c.k.Bindings {
		if b.Access == "write" {
			out = i
		}
	}
	if ins := inPlaceInputs[c.k.Name]; len(ins) > 0 && r.IntN(4) == 0 {
		in := ins[r.IntN(len(ins))]
		same[out] = in
		layout = append(layout, fmt.Sprintf("%s in place of %s", c.k.Bindings[out].Name, c.k.Bindings[in].Name))
	}
	var reads []int
	for i, b := range c.k.Bindings {
		if b.Access == "read" {
			reads = append(reads, i)
		}
	}
	if len(reads) >= 2 && r.IntN(5) == 0 {
		i, j := reads[0], reads[1]
		if c.k.Name == "layernorm" {
			i, j = 1, 2
		}
		if same[out] == j {
			same[out] = i
		}
		same[j] = i
		layout = append(layout, fmt.Sprintf("%s is %s", c.k.Bindings[j].Name, c.k.Bindings[i].Name))
	}
	size := make([]uint64, n)
	for i := range n {
		size[same[i]] = max(size[same[i]], need[i])
	}
	onePage := r.IntN(2) == 0
	if onePage {
		layout = append(layout, "one page")
	} else {
		layout = append(layout, "a page each")
	}
	var pageSize []uint64
	for i := range n {
		if same[i] != i {
			continue
		}
		sz := size[i] + slack()
		gap := align * uint64([]int{0, 0, 1, 1, 2, 5, 16}[r.IntN(7)])
		if !onePage || len(pageSize) == 0 {
			pageSize = append(pageSize, 0)
		}
		p := len(pageSize) - 1
		off := (pageSize[p]+align-1)/align*align + gap
		c.bindings[i] = diffBinding{page: p, off: off, size: sz}
		pageSize[p] = off + sz
	}
	for i := range n {
		b := c.bindings[same[i]]
		b.need = need[i]
		c.bindings[i] = b
	}
	c.pages = make([][]byte, len(pageSize))
	for p, sz := range pageSize {
		sz += []uint64{0, 4, 100, align}[r.IntN(4)]
		c.pages[p] = make([]byte, max(sz, 4))
	}
	return strings.Join(layout, ", ")
}

// fill writes random bytes over every page, then each input's values.
func (c *diffCase) fill(r *rand.Rand, scale float32) {
	for _, p := range c.pages {
		for i := 0; i+4 <= len(p); i += 4 {
			binary.LittleEndian.PutUint32(p[i:], r.Uint32())
		}
		for i := len(p) / 4 * 4; i < len(p); i++ {
			p[i] = byte(r.Uint32())
		}
	}
	done := map[[2]uint64]bool{}
	for i, b := range c.k.Bindings {
		h := c.bindings[i]
		if b.Access != "read" || done[[2]uint64{uint64(h.page), h.off}] {
			continue
		}
		done[[2]uint64{uint64(h.page), h.off}] = true
		kind := valueKinds[r.IntN(len(valueKinds))]
		if (c.k.Name == "layernorm" && i > 0) || c.k.Name == "softmax" && kind == "bits" {
			kind = "normal"
		}
		c.bindings[i].valuesKind = kind
		for j := uint64(0); j < h.size/4; j++ {
			binary.LittleEndian.PutUint32(c.pages[h.page][h.off+4*j:], math.Float32bits(drawValue(r, kind, scale)))
		}
	}
	for i := range c.bindings {
		for j := range c.bindings {
			if c.bindings[j].page == c.bindings[i].page && c.bindings[j].off == c.bindings[i].off && c.bindings[j].valuesKind != "" {
				c.bindings[i].valuesKind = c.bindings[j].valuesKind
			}
		}
	}
}
