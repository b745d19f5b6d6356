package kernel

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/vkrt/vkrt/kernel/glsl"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Binding is one storage buffer a kernel reads or writes.
type Binding struct {
	Name   string `json:"name"`
	Elem   string `json:"elem"`   // element type: "f32" or "u32"
	Access string `json:"access"` // "read" or "write"
}

// PushField is one 4-byte field of a kernel's push constants.
type PushField struct {
	Name   string `json:"name"`
	Type   string `json:"type"` // "u32" or "f32"
	Offset uint32 `json:"offset"`
}

// Kernel is one compute kernel of the catalogue: what it computes, the
// buffers it binds (binding i is descriptor binding i of set 0), its push
// constants (little-endian, in the order listed) and its work-group size.
type Kernel struct {
	Name      string      `json:"name"`
	Doc       string      `json:"doc"`
	Bindings  []Binding   `json:"bindings"`
	Push      []PushField `json:"push"`
	WorkGroup [3]uint32   `json:"work_group"`
	// Grid says how to size the grid for the kernel.
	Grid string `json:"grid"`

	// need is the least byte size of each binding the push constants (and,
	// for per-group outputs, the grid) call for.
	need func(push pushValues, grid [3]uint32) []uint64
	// work is what the launch computes, in the kernel's own unit (elements,
	// output values); 0 is an empty launch.
	work func(push pushValues) uint64
	// steps, where set, is the launch's arithmetic where it is more than
	// its work (a matmul's output values each take K multiply-adds): what
	// Cost counts.
	steps func(push pushValues) uint64
	// busy is the most work groups that find work of their own (an
	// element, a row, a tile): a grid of more runs the rest idle.
	busy func(push pushValues) uint64
	// writesEmpty: an empty launch still writes (reduce_sum's work groups
	// each write their sum of no element).
	writesEmpty bool
	// checkGrid, where set, rejects grids that leave work undone or that
	// the shader's 32-bit index arithmetic would wrap on.
	checkGrid func(push pushValues, grid [3]uint32) error
	// inPlace[i] says binding i may be the written binding itself (same
	// storage, same offset): the shader reads each element of it only in
	// the invocation that then writes that element. Any other overlap of
	// the bytes a written binding and another binding take is refused.
	inPlace []bool
	// revisits, where set, says the grid's indices wrap, so that some
	// elements are taken twice; idempotent kernels compute the same then
	// even in place, the others are refused in place.
	revisits   func(push pushValues, grid [3]uint32) bool
	idempotent bool
}

// PushSize is the byte size of the kernel's push constants.
func (k Kernel) PushSize() uint32 { return uint32(4 * len(k.Push)) }

type pushValues []byte

func (p pushValues) u32(i int) uint64 { return uint64(binary.LittleEndian.Uint32(p[4*i:])) }

// words is the byte size of n 32-bit words, saturating instead of wrapping.
func words(n uint64) uint64 { return product(4, n) }

// product multiplies, saturating at the largest uint64 instead of wrapping,
// so sizes computed from hostile push constants cannot pass as small.
func product(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

const elementGroup = 256

var (
	in  = func(name string) Binding { return Binding{Name: name, Elem: "f32", Access: "read"} }
	out = func(name string) Binding { return Binding{Name: name, Elem: "f32", Access: "write"} }
	u32 = func(name string, off uint32) PushField { return PushField{Name: name, Type: "u32", Offset: off} }
	f32 = func(name string, off uint32) PushField { return PushField{Name: name, Type: "f32", Offset: off} }
)

const gridElements = "any, of at least one work group where n > 0; ElementGrid(n) gives one invocation per element (the kernel loops with the grid's stride)"
const gridRows = "any, of at least one work group where rows x cols > 0; RowGrid(rows) gives one work group per row (the kernel loops with the grid's stride)"

func elementwise(name, doc string, bindings []Binding, push ...PushField) Kernel {
	return Kernel{
		Name: name, Doc: doc, Bindings: bindings,
		Push:      append([]PushField{u32("n", 0)}, push...),
		WorkGroup: [3]uint32{elementGroup, 1, 1},
		Grid:      gridElements,
		need: func(p pushValues, _ [3]uint32) []uint64 {
			sizes := make([]uint64, len(bindings))
			for i := range sizes {
				sizes[i] = words(p.u32(0))
			}
			return sizes
		},
		work:      func(p pushValues) uint64 { return p.u32(0) },
		busy:      elementGroups,
		checkGrid: func(p pushValues, grid [3]uint32) error { return stepLoops(p.u32(0), grid, elementGroup) },
		revisits:  elementRevisits,
		inPlace:   everyBinding(len(bindings)),
	}
}

func everyBinding(n int) []bool {
	in := make([]bool, n)
	for i := range in {
		in[i] = true
	}
	return in
}

// indexSpace is the range of the shaders' indices: they are 32-bit
// unsigned integers, and wrap past it.
const indexSpace = 1 << 32

// groups is the grid's work-group count; z is at most 1 once checked.
func groups(grid [3]uint32) uint64 { return uint64(grid[0]) * uint64(grid[1]) }

// The element kernels start each invocation at its global index (256 per
// work group) and step over n elements with the grid's invocation count,
// the row kernels each work group at its index, stepping over the rows with
// the work-group count, all in 32-bit arithmetic. Past 2^32 the indices
// wrap: a step that wraps to 0 loops forever, an index that wraps below n
// is taken a second time (harmless where the second pass writes what the
// first did), and the copy's unrolled step wraps past its bindings.

// stridedStep is the step of a strided kernel: the invocations, or the
// work groups, the grid runs, saturating at the largest uint64: on a device
// that allows 2^32 - 1 work groups in x and y a grid may run more than
// 2^64 invocations.
func stridedStep(grid [3]uint32, perGroup uint64) uint64 { return product(groups(grid), perGroup) }

// stepLoops reports a step that wraps to 0 over a non-empty range. The
// step is taken modulo 2^32, as the shader takes it: counted in 64 bits,
// 2^28 x 2^28 work groups of 256 wrapped to 0 there too, and passed as a
// grid of no invocation.
func stepLoops(n uint64, grid [3]uint32, perGroup uint64) error {
	if g := groups(grid); n > 0 && g > 0 && g%indexSpace*perGroup%indexSpace == 0 {
		return fmt.Errorf("grid %v runs %d work groups of %d invocations, a step that wraps to 0 in 32 bits: the invocations with work would loop forever", grid, g, perGroup)
	}
	return nil
}

// revisits reports whether a strided kernel's grid takes some of its n
// elements (or rows) more than once.
func revisits(n uint64, grid [3]uint32, perGroup uint64) bool {
	step := stridedStep(grid, perGroup)
	return n > 0 && (step >= indexSpace || step+n > indexSpace)
}

// wrapError refuses a grid whose indices would wrap, with the most work
// groups whose indices cannot.
func wrapError(grid [3]uint32, what string, most uint64) error {
	return fmt.Errorf("grid %v of %d work groups: its 32-bit indices wrap, so %s (at most %d work groups cannot wrap)", grid, groups(grid), what, most)
}

func elementRevisits(p pushValues, grid [3]uint32) bool {
	return revisits(p.u32(0), grid, elementGroup)
}

var catalogue = []Kernel{
	idempotentKernel(elementwise("fill", "out[i] = value for i < n; value is a 32-bit pattern (math.Float32bits for floats)",
		[]Binding{{Name: "out", Elem: "u32", Access: "write"}}, u32("value", 4))),
	idempotentKernel(withGrid(elementwise("copy", "out[i] = src[i] for i < n 32-bit words, moved 16 bytes at a time, four loads in flight per invocation",
		[]Binding{{Name: "src", Elem: "u32", Access: "read"}, {Name: "out", Elem: "u32", Access: "write"}}),
		// Four 16-byte words a stride apart per step: the shader adds three
		// strides to an index before comparing it with n / 4, so past 2^30
		// invocations one can wrap below it from an index far past the
		// bindings, which the step then loads and stores.
		func(p pushValues, grid [3]uint32) error {
			if p.u32(0) > 0 && stridedStep(grid, 4*elementGroup) > indexSpace {
				return wrapError(grid, "the copy's unrolled step would load and store past its bindings", indexSpace/4/elementGroup)
			}
			return nil
		})),
	elementwise("add", "out[i] = a[i] + b[i] for i < n", []Binding{in("a"), in("b"), out("out")}),
	elementwise("mul", "out[i] = a[i] * b[i] for i < n", []Binding{in("a"), in("b"), out("out")}),
	elementwise("scale", "out[i] = alpha * x[i] for i < n", []Binding{in("x"), out("out")}, f32("alpha", 4)),
	idempotentKernel(elementwise("relu", "out[i] = max(x[i], 0) for i < n; -0 gives +0, a NaN stays NaN where the device preserves NaNs (the cpu device, lavapipe; NVIDIA gives 0)", []Binding{in("x"), out("out")})),
	elementwise("gelu", "out[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) for x = x[i], i < n; "+
		"within 1e-6 (1 + |r|) of r, the float64 result rounded to f32 (a NaN gives NaN, ±Inf gives ±Inf or NaN as r does)",
		[]Binding{in("x"), out("out")}),
	{
		Name: "softmax",
		Doc: "row-wise softmax of a rows x cols row-major matrix: out[r][c] = exp(x[r][c] - max_r) / sum_c exp(x[r][c] - max_r); " +
			"within 2^-20 (8 + cols / 256) of the float64 result (a row holding NaN or +Inf, or only -Inf, gives NaN)",
		Bindings:  []Binding{in("x"), out("out")},
		Push:      []PushField{u32("rows", 0), u32("cols", 4)},
		WorkGroup: [3]uint32{elementGroup, 1, 1},
		Grid:      gridRows,
		need: func(p pushValues, _ [3]uint32) []uint64 {
			n := words(product(p.u32(0), p.u32(1)))
			return []uint64{n, n}
		},
		work:      rowsTimesCols,
		busy:      rowGroups,
		checkGrid: func(p pushValues, grid [3]uint32) error { return stepLoops(p.u32(0), grid, 1) },
		revisits:  func(p pushValues, grid [3]uint32) bool { return revisits(p.u32(0), grid, 1) },
		inPlace:   []bool{true, true},
	},
	{
		Name: "layernorm",
		Doc: "row-wise layer normalisation of a rows x cols row-major matrix: out[r][c] = (x[r][c] - mean_r) / sqrt(var_r + eps) * gamma[c] + beta[c], var_r biased; " +
			"computed in f32: within 2^-19 (8 + cols / 256) (1 + max_c |x[r][c]| / s_r) (1 + |gamma[c]|) + 2^-22 |beta[c]| of the float64 result, s_r = sqrt(var_r + eps), " +
			"for rows whose sum of |x| and of squared deviations stay under 2^127 and whose var_r + eps is at least 2^-80; " +
			"past that the f32 sums may overflow (a row of values near 1e20 gives beta) and only a NaN the float64 result has is kept",
		Bindings:  []Binding{in("x"), in("gamma"), in("beta"), out("out")},
		Push:      []PushField{u32("rows", 0), u32("cols", 4), f32("eps", 8)},
		WorkGroup: [3]uint32{elementGroup, 1, 1},
		Grid:      gridRows,
		need: func(p pushValues, _ [3]uint32) []uint64 {
			n, cols := words(product(p.u32(0), p.u32(1))), words(p.u32(1))
			return []uint64{n, cols, cols, n}
		},
		work:      rowsTimesCols,
		busy:      rowGroups,
		checkGrid: func(p pushValues, grid [3]uint32) error { return stepLoops(p.u32(0), grid, 1) },
		revisits:  func(p pushValues, grid [3]uint32) bool { return revisits(p.u32(0), grid, 1) },
		// gamma and beta are read by every row, after other work groups
		// wrote theirs: only x may be the output.
		inPlace: []bool{true, false, false, true},
	},
	{
		Name: "reduce_sum",
		Doc: "sum of x[0..n): work group g writes the sum of its grid-strided share to out[g]; a grid of one work group leaves the total in out[0]; " +
			"summed in f32 in no set order: within 2^-23 (m + 8) S_g + (m + 256) 2^-126 of the float64 sum, m = ceil(n / (256 x groups)) the elements an invocation adds, S_g the sum of |x| of group g's share, " +
			"where S_g is under 2^127; past that partial sums may overflow to either infinity (or NaN), and only a NaN the float64 sum has is kept",
		Bindings:  []Binding{in("x"), out("out")},
		Push:      []PushField{u32("n", 0)},
		WorkGroup: [3]uint32{elementGroup, 1, 1},
		Grid:      "any, of at least one work group where n > 0; out holds one f32 per work group (grid x * y)",
		need: func(p pushValues, grid [3]uint32) []uint64 {
			return []uint64{words(p.u32(0)), words(product(uint64(grid[0]), uint64(grid[1])))}
		},
		work:        func(p pushValues) uint64 { return p.u32(0) },
		busy:        elementGroups,
		writesEmpty: true,
		// An element taken twice is summed twice.
		checkGrid: func(p pushValues, grid [3]uint32) error {
			if n := p.u32(0); revisits(n, grid, elementGroup) {
				return wrapError(grid, fmt.Sprintf("some of the %d elements would be summed twice", n), (indexSpace-n)/elementGroup)
			}
			return nil
		},
		inPlace: []bool{false, true},
	},
	{
		Name: "matmul",
		Doc: "c = a b for row-major a (M x K), b (K x N), c (M x N); tiled 128 x 128 per work group, 8 x 8 per invocation, " +
			"a work group taking tiles with the grid's stride; " +
			"f32 fused multiply-adds in order of k: c[i][j] within 2^-23 (K + 2) S_ij + (K + 1) 2^-126 of the float64 result, S_ij = sum_k |a[i][k] b[k][j]|, " +
			"where S_ij is under 2^127; past that partial sums may overflow (a +Inf and a -Inf make NaN), and only a NaN the float64 result has is kept",
		Bindings:  []Binding{in("a"), in("b"), out("c")},
		Push:      []PushField{u32("M", 0), u32("N", 4), u32("K", 8)},
		WorkGroup: [3]uint32{256, 1, 1},
		Grid:      "any, of at least one work group where M x N > 0; MatMul(M, N, K) gives one per 128 x 128 tile, up to 65535 in x and y (the kernel loops with the grid's stride)",
		need: func(p pushValues, _ [3]uint32) []uint64 {
			m, n, k := p.u32(0), p.u32(1), p.u32(2)
			return []uint64{words(product(m, k)), words(product(k, n)), words(product(m, n))}
		},
		// The output: with K = 0 it is all zeros, still to be written.
		work:    func(p pushValues) uint64 { return product(p.u32(0), p.u32(1)) },
		steps:   func(p pushValues) uint64 { return product(product(p.u32(0), p.u32(1)), max(p.u32(2), 1)) },
		busy:    func(p pushValues) uint64 { return tileGroups(p.u32(0), p.u32(1), matmulTile) },
		inPlace: []bool{false, false, true},
	},
	{
		Name:      "transpose",
		Doc:       "out = transpose(x) for a rows x cols row-major x, out cols x rows (not overlapping x); 32 x 32 tiles through shared memory",
		Bindings:  []Binding{in("x"), out("out")},
		Push:      []PushField{u32("rows", 0), u32("cols", 4)},
		WorkGroup: [3]uint32{256, 1, 1},
		Grid:      "any, of at least one work group where rows x cols > 0; Transpose(rows, cols) gives one per 32 x 32 tile, up to 65535 in x and y (the kernel loops with the grid's stride)",
		need: func(p pushValues, _ [3]uint32) []uint64 {
			n := words(product(p.u32(0), p.u32(1)))
			return []uint64{n, n}
		},
		work:    rowsTimesCols,
		busy:    func(p pushValues) uint64 { return tileGroups(p.u32(0), p.u32(1), transposeTile) },
		inPlace: []bool{false, true},
	},
}

// elementGroups is the work groups of an element kernel that find an
// element of their own, 256 to a group.
func elementGroups(p pushValues) uint64 { return ceilDiv(p.u32(0), elementGroup) }

// rowGroups is the work groups of a row kernel that find a row of their
// own: none where the rows have no columns.
func rowGroups(p pushValues) uint64 {
	if p.u32(1) == 0 {
		return 0
	}
	return p.u32(0)
}

// tileGroups is the tiles of side tile over a rows x cols matrix: the
// work groups that find one of their own.
func tileGroups(rows, cols, tile uint64) uint64 {
	if rows == 0 || cols == 0 {
		return 0
	}
	return ceilDiv(rows, tile) * ceilDiv(cols, tile)
}

const matmulTile = 128

// rowsTimesCols is the work of a kernel over a rows x cols matrix.
func rowsTimesCols(p pushValues) uint64 { return product(p.u32(0), p.u32(1)) }

func idempotentKernel(k Kernel) Kernel {
	k.idempotent = true
	return k
}

func withGrid(k Kernel, check func(p pushValues, grid [3]uint32) error) Kernel {
	k.checkGrid = check
	return k
}

// transposeTile is the side of the square tile a transpose work group moves.
const transposeTile = 32

// All is the catalogue of compute kernels, sorted by name. Each is the
// caller's own copy, as ByName's is.
func All() []Kernel {
	ks := make([]Kernel, len(catalogue))
	for i, k := range catalogue {
		ks[i] = k.own()
	}
	slices.SortFunc(ks, func(a, b Kernel) int { return cmp.Compare(a.Name, b.Name) })
	return ks
}

// ByName finds a kernel of the catalogue; an unknown name matches
// runtime.ErrNotFound. The kernel is the caller's own copy: changing its
// bindings or push constants changes no other, and not the catalogue.
func ByName(name string) (Kernel, error) {
	for _, k := range catalogue {
		if k.Name == name {
			return k.own(), nil
		}
	}
	names := make([]string, len(catalogue))
	for i, k := range catalogue {
		names[i] = k.Name
	}
	slices.Sort(names)
	return Kernel{}, fmt.Errorf("vkrt: no kernel %q (the catalogue has %v): %w", name, names, vkruntime.ErrNotFound)
}

// own is k with bindings and push constants of its own. Handed out
// sharing the catalogue's arrays, a caller's change to a binding (an out
// marked read) changed the catalogue Validate checks every launch by: a
// transpose in place, which gives wrong results, passed.
func (k Kernel) own() Kernel {
	k.Bindings, k.Push = slices.Clone(k.Bindings), slices.Clone(k.Push)
	return k
}

// SPIRV is the kernel's compiled module.
func (k Kernel) SPIRV() ([]byte, error) { return glsl.SPIRV(k.Name) }

// ErrInvalidDispatch: a dispatch that fails its checks (bindings, push
// constants, grid); it never reaches the driver. The typed form is
// *DispatchError.
var ErrInvalidDispatch = errors.New("vkrt: invalid dispatch")

// DispatchError says why a dispatch of Kernel was refused.
type DispatchError struct {
	Kernel string
	Reason string
}

func (e *DispatchError) Error() string {
	return fmt.Sprintf("vkrt: invalid dispatch of kernel %q: %s", e.Kernel, e.Reason)
}

// Is makes a *DispatchError match ErrInvalidDispatch.
func (e *DispatchError) Is(target error) bool { return target == ErrInvalidDispatch }

// Limits are the device facts a dispatch is checked against.
type Limits struct {
	Alignment                uint64 // binding offsets are multiples of this
	MaxStorageBufferRange    uint64
	MaxPushConstantsSize     uint32
	MaxComputeWorkGroupCount [3]uint32
	// MaxLoopIterations, where not 0, is how many loop iterations the
	// device runs in one shader invocation before it leaves the loops
	// (lavapipe: 65,535); a launch with work that LoopTrips says may need
	// more is refused rather than left part unwritten.
	MaxLoopIterations uint64
}

// BusyGroups is the most work groups of a launch of k with push that find
// work of their own (an element, a row, a tile); a grid of more runs the
// rest idle. It is 0 for an empty launch, and for a kernel not of the
// catalogue or push constants not of its size, which [Validate] refuses.
func BusyGroups(k Kernel, push []byte) uint64 {
	canon, ok := catalogued(k, push)
	if !ok {
		return 0
	}
	return canon.busy(pushValues(push))
}

// catalogued is the catalogue's kernel of k's name, where push is of its
// size: what BusyGroups and NoOp read push by.
func catalogued(k Kernel, push []byte) (Kernel, bool) {
	canon, found := catalogueKernel(k.Name)
	return canon, found && uint64(len(push)) == uint64(canon.PushSize())
}

// CheckIdleGroups refuses a grid of more work groups than a launch of k
// with push keeps busy, past the grid the catalogue's typed launches make
// for that many ([RowGrid] of them): the extra ones find nothing to do,
// and only hold the device (65535 x 65535 of them, for a fill of one
// element, held lavapipe for half an hour). [Validate] takes such grids,
// as the kernels' contract does; a host that runs launches for others
// under a deadline refuses them, since no device stops a dispatch once
// submitted. An empty launch passes on any grid, as it does Validate,
// since none is run ([NoOp]); but one that still writes (reduce_sum of no
// element writes each work group's sum of nothing) is run, and it keeps
// one work group busy: past that grid, a guest held the device for as
// long as a million idle groups took. The error is a *[DispatchError].
func CheckIdleGroups(k Kernel, grid [3]uint32, push []byte) error {
	canon, ok := catalogued(k, push)
	if !ok {
		return nil // Validate's to refuse
	}
	busy := canon.busy(pushValues(push))
	if busy == 0 {
		if !canon.writesEmpty {
			return nil
		}
		busy = 1 // the empty total
	}
	most := max(busy, groups(RowGrid(busy)))
	// z past 1 is Validate's to refuse. The push constants are told by
	// the catalogue's fields: k's own, in a kernel built by hand, may lie
	// past push (an offset past it panicked).
	if runs := groups(grid); runs > most {
		return &DispatchError{Kernel: k.Name, Reason: fmt.Sprintf(
			"grid %v runs %d work groups, and at most %d of them find work for the push constants %s: the rest would only hold the device",
			grid, runs, busy, pushString(canon, push))}
	}
	return nil
}

// Cost estimates what a launch of k with push on grid keeps the device
// busy for, in invocation steps: the larger of the invocations its grid
// runs (work groups times the work-group size, idle ones too) and its
// arithmetic (its elements or output values; a matmul's M x N x K). A
// device compares launches by it to learn its own pace, so that it can
// submit work in pieces that each end soon (see vk's Dispatch). It
// saturates at the largest uint64 rather than wrap.
func Cost(k Kernel, grid [3]uint32, push []byte) uint64 {
	invocations := product(product(groups(grid), uint64(grid[2])), product(product(uint64(k.WorkGroup[0]), uint64(k.WorkGroup[1])), uint64(k.WorkGroup[2])))
	canon, ok := catalogued(k, push)
	if !ok {
		return invocations
	}
	steps := canon.work
	if canon.steps != nil {
		steps = canon.steps
	}
	return max(invocations, steps(pushValues(push)))
}

// NoOp says whether a launch writes nothing, so that a device need not
// run it: a grid with a dimension of 0 runs no work group, and an empty
// launch writes nothing but for reduce_sum's sums of no element. A launch
// is checked ([Validate]) whether or not it is one.
func NoOp(k Kernel, grid [3]uint32, push []byte) bool {
	if grid[0] == 0 || grid[1] == 0 || grid[2] == 0 {
		return true
	}
	canon, ok := catalogued(k, push)
	return ok && !canon.writesEmpty && canon.work(pushValues(push)) == 0
}

// Validate checks a dispatch without a device: that k is a kernel of the
// catalogue as the catalogue has it, the number of bindings, their
// alignment, their sizes against what the push constants call for and the
// storage-buffer range, the push-constant size, the grid against the limits
// and the kernel (grids that would wrap the shader's 32-bit indices where
// that loops, runs past a binding or changes the result are refused, and
// so is a grid that runs no work group, a dimension being 0, for a launch
// with work: see the package documentation on empty launches), and
// that a written binding shares no bytes with another but where the kernel
// allows it in place (same storage, same offset). It does not check that
// the handles name live allocations (a device's Dispatch does).
func Validate(k Kernel, grid [3]uint32, bindings []vkruntime.StorageHandle, push []byte, limits Limits) error {
	fail := func(format string, args ...any) error {
		return &DispatchError{Kernel: k.Name, Reason: fmt.Sprintf(format, args...)}
	}
	// The devices run the kernel of the catalogue that bears k's name, so
	// k must be that kernel, not one renamed or with other bindings or push
	// constants: checked by its own rules it could ask for less than the
	// shader that runs touches.
	canon, found := catalogueKernel(k.Name)
	if k.need == nil || !found || !sameKernel(&k, &canon) {
		return fail("not a kernel of the catalogue")
	}
	k = canon
	if len(bindings) != len(k.Bindings) {
		return fail("%d bindings given, the kernel has %d (%s)", len(bindings), len(k.Bindings), bindingNames(k))
	}
	if uint64(len(push)) != uint64(k.PushSize()) {
		return fail("%d B of push constants given, the kernel takes %d B (%s)", len(push), k.PushSize(), pushNames(k))
	}
	if k.PushSize() > limits.MaxPushConstantsSize {
		return fail("the kernel's %d B of push constants exceed the device's %d B", k.PushSize(), limits.MaxPushConstantsSize)
	}
	for i, g := range grid {
		if g > limits.MaxComputeWorkGroupCount[i] {
			return fail("grid %v: dimension %d exceeds the device's %d work groups", grid, i, limits.MaxComputeWorkGroupCount[i])
		}
	}
	if grid[2] > 1 {
		return fail("grid %v: the kernel's grid is two-dimensional, z must be 1", grid)
	}
	// An empty launch writes nothing, so loops ended early leave nothing
	// unwritten: it passes on any grid, as the package documentation says.
	if most := limits.MaxLoopIterations; most != 0 && k.work(pushValues(push)) > 0 {
		if trips := LoopTrips(k, grid, push); trips > most {
			return fail("grid %v leaves each invocation up to %d loop iterations, and the device ends a shader's loops after %d: "+
				"the rest of the output would stay unwritten (a grid of more work groups spreads the work)", grid, trips, most)
		}
	}
	need := k.need(pushValues(push), grid)
	for i, h := range bindings {
		b := k.Bindings[i]
		if limits.Alignment != 0 && h.Offset%limits.Alignment != 0 {
			return fail("binding %d (%s): %v: offset is not a multiple of the device's %d B alignment", i, b.Name, h, limits.Alignment)
		}
		if h.Offset > math.MaxUint64-h.Size {
			return fail("binding %d (%s): %v overflows", i, b.Name, h)
		}
		if h.Size > limits.MaxStorageBufferRange {
			return fail("binding %d (%s): %v: %d B exceed the device's storage-buffer range of %d B", i, b.Name, h, h.Size, limits.MaxStorageBufferRange)
		}
		if h.Size < need[i] {
			return fail("binding %d (%s): %v holds %d B, the push constants %s call for %d B", i, b.Name, h, h.Size, pushString(k, push), need[i])
		}
	}
	// A grid with a dimension of 0 runs no work group, as vkCmdDispatch
	// does: an empty launch is a no-op, but one with work would leave its
	// output unwritten and report success.
	if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) && k.work(pushValues(push)) > 0 {
		return fail("grid %v runs no work group (a dimension is 0), which leaves the work the push constants %s call for undone", grid, pushString(k, push))
	}
	if k.checkGrid != nil {
		if err := k.checkGrid(pushValues(push), grid); err != nil {
			return fail("%v", err)
		}
	}
	// Work groups run in no set order, so a written binding that overlaps
	// another one races with it: only the exact in-place bindings the
	// kernel allows are safe. Handles of storage 0 (sizes alone, as a
	// check ahead of allocation passes) name no memory and are not compared.
	for w, b := range k.Bindings {
		if b.Access != "write" {
			continue
		}
		hw := bindings[w]
		for i, h := range bindings {
			if i == w || h.ID != hw.ID || h.ID == 0 || need[i] == 0 || need[w] == 0 {
				continue
			}
			if h.Offset >= hw.Offset+need[w] || hw.Offset >= h.Offset+need[i] {
				continue // the bytes the kernel touches are apart
			}
			if h.Offset == hw.Offset && k.inPlace[i] {
				if !k.idempotent && k.revisits != nil && k.revisits(pushValues(push), grid) {
					return fail("binding %d (%s) is binding %d (%s), in place, and grid %v takes some elements twice (its 32-bit indices wrap): the second pass would compute on the first one's output",
						w, b.Name, i, k.Bindings[i].Name, grid)
				}
				continue
			}
			what := "is not one the kernel may write in place"
			if h.Offset != hw.Offset {
				what = "overlaps it at another offset"
			}
			return fail("binding %d (%s): %v, written, and binding %d (%s): %v share bytes, and binding %d %s",
				w, b.Name, hw, i, k.Bindings[i].Name, h, i, what)
		}
	}
	return nil
}

// BindingSizes is, for each binding of a launch of k, the bytes from its
// start that the kernel reads or writes: what Validate requires the binding
// to hold. A device need move no more of a binding than that (the cpu device
// copied all of a virtual range's handle, up to 4 GiB, to fill one word of
// it). Nil for a kernel outside the catalogue or push constants of another
// size than it takes.
func BindingSizes(k Kernel, grid [3]uint32, push []byte) []uint64 {
	canon, ok := catalogueKernel(k.Name)
	if !ok || uint64(len(push)) != uint64(canon.PushSize()) {
		return nil
	}
	return canon.need(pushValues(push), grid)
}

func catalogueKernel(name string) (Kernel, bool) {
	for _, k := range catalogue {
		if k.Name == name {
			return k, true
		}
	}
	return Kernel{}, false
}

// sameKernel compares what the catalogue says of a kernel.
func sameKernel(a, b *Kernel) bool {
	return a.Name == b.Name && a.Doc == b.Doc && a.Grid == b.Grid && a.WorkGroup == b.WorkGroup &&
		slices.Equal(a.Bindings, b.Bindings) && slices.Equal(a.Push, b.Push)
}

func bindingNames(k Kernel) string {
	s := ""
	for i, b := range k.Bindings {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s %s", b.Name, b.Access, b.Elem)
	}
	return s
}

func pushNames(k Kernel) string {
	s := ""
	for i, f := range k.Push {
		if i > 0 {
			s += ", "
		}
		s += f.Name + " " + f.Type
	}
	return s
}

func pushString(k Kernel, push []byte) string {
	s := "{"
	for i, f := range k.Push {
		if i > 0 {
			s += " "
		}
		v := binary.LittleEndian.Uint32(push[f.Offset:])
		if f.Type == "f32" {
			s += fmt.Sprintf("%s=%g", f.Name, math.Float32frombits(v))
		} else {
			s += fmt.Sprintf("%s=%d", f.Name, v)
		}
	}
	return s + "}"
}

// Launch is a kernel with its grid and packed push constants: what the
// typed helpers (Add, MatMul, …) compute from element counts.
type Launch struct {
	Kernel Kernel
	Grid   [3]uint32
	Push   []byte
}

// With pairs the launch with its bindings.
func (l Launch) With(bindings ...vkruntime.StorageHandle) Op {
	return Op{Kernel: l.Kernel, Grid: l.Grid, Bindings: bindings, Push: l.Push}
}

// Op is one dispatch of a batch.
type Op struct {
	Kernel   Kernel
	Grid     [3]uint32
	Bindings []vkruntime.StorageHandle
	Push     []byte
}

// OwnedOps is a batch of ops copied by [OwnOps]: a device checks and runs
// its own copy, so that a caller changing ops from another goroutine once
// they were checked cannot have it run values it never checked (a binding
// moved past its allocation).
type OwnedOps struct {
	ops      []ownedOp
	bindings []vkruntime.StorageHandle
	push     []byte
	// kernels holds one copy of each catalogue kernel the batch launches
	// as the catalogue has it, shared by its ops, and a copy of each other
	// kernel (which Validate refuses) for its op alone; byCatalogue[i] is
	// the index in it of catalogue[i]'s copy, plus 1 (0: none yet).
	kernels     []Kernel
	byCatalogue []int
}

// ownedOp is an op with its kernel kept aside, and its bindings and push
// constants where they start in the batch's arrays (they end where the
// next op's start): it holds no pointer, so that the copy of a batch of
// 10,000 launches of one kernel is not 10,000 kernels for the collector
// to scan.
type ownedOp struct {
	kernel         int
	grid           [3]uint32
	bindings, push int
}

// OwnOps copies ops into memory of its own: their bindings and push
// constants each in one array for the whole batch, their kernels once.
func OwnOps(ops []Op) OwnedOps {
	var nb, np int
	for i := range ops {
		nb, np = nb+len(ops[i].Bindings), np+len(ops[i].Push)
	}
	o := OwnedOps{
		ops:         make([]ownedOp, len(ops)),
		bindings:    make([]vkruntime.StorageHandle, 0, nb),
		push:        make([]byte, 0, np),
		byCatalogue: make([]int, len(catalogue)),
	}
	for i := range ops {
		// The caller's op may change meanwhile: what the copy holds is
		// what was read of it, which is then checked.
		op := &ops[i]
		o.ops[i] = ownedOp{kernel: o.own(&op.Kernel), grid: op.Grid, bindings: len(o.bindings), push: len(o.push)}
		o.bindings = append(o.bindings, op.Bindings...)
		o.push = append(o.push, op.Push...)
	}
	return o
}

// own is the index in o.kernels of the copy of k its op runs.
func (o *OwnedOps) own(k *Kernel) int {
	name := k.Name
	for i := range catalogue {
		canon := &catalogue[i]
		if canon.Name != name {
			continue
		}
		// What Validate takes as the catalogue's kernel, as it is checked:
		// one copy serves every op of it.
		if k.need != nil && sameKernel(k, canon) {
			if o.byCatalogue[i] == 0 {
				o.kernels = append(o.kernels, clipped(canon.own()))
				o.byCatalogue[i] = len(o.kernels)
			}
			return o.byCatalogue[i] - 1
		}
		break
	}
	o.kernels = append(o.kernels, clipped(k.own()))
	return len(o.kernels) - 1
}

// clipped is k with bindings and push fields an append cannot extend in
// place.
func clipped(k Kernel) Kernel {
	k.Bindings, k.Push = slices.Clip(k.Bindings), slices.Clip(k.Push)
	return k
}

// Len is the number of ops.
func (o OwnedOps) Len() int { return len(o.ops) }

// Op is op i as it was copied. Its slices are the batch's own, and an
// append to one cannot write over another's: ops of one kernel share the
// kernel's bindings and push fields, and none may be written.
func (o OwnedOps) Op(i int) Op {
	op := o.ops[i]
	bindings, push := len(o.bindings), len(o.push)
	if i+1 < len(o.ops) {
		bindings, push = o.ops[i+1].bindings, o.ops[i+1].push
	}
	return Op{Kernel: o.kernels[op.kernel], Grid: op.grid,
		Bindings: o.bindings[op.bindings:bindings:bindings], Push: o.push[op.push:push:push]}
}

// portableGroups is the work-group count every Vulkan device allows per
// grid dimension.
const portableGroups = 65535

// ElementGrid covers n elements with one invocation each (256 per work
// group), spilling into y past 65535 work groups so it fits any device.
func ElementGrid(n uint64) [3]uint32 {
	return RowGrid(ceilDiv(n, elementGroup))
}

// RowGrid is a grid of groups work groups, spilling into y past 65535. It
// fits any device: past 65535 x 65535 it is that many, and the kernels that
// stride over their grid loop over the rest.
func RowGrid(groups uint64) [3]uint32 {
	if groups <= portableGroups {
		return [3]uint32{uint32(groups), 1, 1}
	}
	return [3]uint32{portableGroups, uint32(min(ceilDiv(groups, portableGroups), portableGroups)), 1}
}

// ceilDiv is a / b rounded up, without the wrap of (a + b - 1) / b.
func ceilDiv(a, b uint64) uint64 { return a/b + min(a%b, 1) }

func pack(values ...uint32) []byte {
	b := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

func mustKernel(name string) Kernel {
	k, err := ByName(name)
	if err != nil {
		panic(err)
	}
	return k
}

func elementLaunch(name string, n uint32, extra ...uint32) Launch {
	return Launch{Kernel: mustKernel(name), Grid: ElementGrid(uint64(n)), Push: pack(append([]uint32{n}, extra...)...)}
}

// FillWords sets n 32-bit words to value. Bindings: out.
func FillWords(n, value uint32) Launch { return elementLaunch("fill", n, value) }

// copyPerInvocation is how many 16-byte words each invocation of the copy
// moves: two measured fastest on an H200 (4.09 TB/s against 3.78 for one
// and 3.93 for eight, 1 GiB copies).
const copyPerInvocation = 2

// CopyWords copies n 32-bit words, 16 bytes per load and store, two such
// loads per invocation. Bindings: src, out.
func CopyWords(n uint32) Launch {
	l := elementLaunch("copy", n)
	per := uint64(elementGroup * copyPerInvocation)
	l.Grid = RowGrid(((uint64(n)+3)/4 + per - 1) / per)
	return l
}

// Add is out = a + b over n floats. Bindings: a, b, out.
func Add(n uint32) Launch { return elementLaunch("add", n) }

// Mul is out = a * b over n floats. Bindings: a, b, out.
func Mul(n uint32) Launch { return elementLaunch("mul", n) }

// Scale is out = alpha * x over n floats. Bindings: x, out.
func Scale(n uint32, alpha float32) Launch {
	return elementLaunch("scale", n, math.Float32bits(alpha))
}

// ReLU is out = max(x, 0) over n floats. Bindings: x, out.
func ReLU(n uint32) Launch { return elementLaunch("relu", n) }

// GELU is out = gelu(x) (tanh approximation) over n floats. Bindings: x, out.
func GELU(n uint32) Launch { return elementLaunch("gelu", n) }

// Softmax is the row-wise softmax of a rows x cols matrix. Bindings: x, out.
func Softmax(rows, cols uint32) Launch {
	return Launch{Kernel: mustKernel("softmax"), Grid: RowGrid(uint64(rows)), Push: pack(rows, cols)}
}

// LayerNorm is the row-wise layer normalisation of a rows x cols matrix.
// Bindings: x, gamma (cols), beta (cols), out.
func LayerNorm(rows, cols uint32, eps float32) Launch {
	return Launch{Kernel: mustKernel("layernorm"), Grid: RowGrid(uint64(rows)), Push: pack(rows, cols, math.Float32bits(eps))}
}

// ReduceSum sums n floats into out[0] with one work group. Bindings: x,
// out (one float).
func ReduceSum(n uint32) Launch {
	return Launch{Kernel: mustKernel("reduce_sum"), Grid: [3]uint32{1, 1, 1}, Push: pack(n)}
}

// MatMul is c = a b for a (m x k), b (k x n), c (m x n), row-major.
// Bindings: a, b, c.
func MatMul(m, n, k uint32) Launch {
	tiles := func(n uint32) uint32 { return min(n/matmulTile+min(n%matmulTile, 1), portableGroups) }
	grid := [3]uint32{tiles(n), tiles(m), 1}
	return Launch{Kernel: mustKernel("matmul"), Grid: grid, Push: pack(m, n, k)}
}

// Transpose is out = transpose(x) for x rows x cols, row-major; out is
// cols x rows and must not overlap x. Bindings: x, out.
func Transpose(rows, cols uint32) Launch {
	tiles := func(n uint32) uint32 { return min(n/transposeTile+min(n%transposeTile, 1), portableGroups) }
	grid := [3]uint32{tiles(cols), tiles(rows), 1}
	return Launch{Kernel: mustKernel("transpose"), Grid: grid, Push: pack(rows, cols)}
}
