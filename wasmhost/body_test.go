package wasmhost

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// instruction is a stack-neutral run of instructions and the control-flow
// points bodyControl counts in it. Immediates are made of bytes that are
// opcodes of control (0x02 block, 0x0b end) where the format allows, so a
// walk that takes one for an instruction miscounts.
type instruction struct {
	what    string
	code    []byte
	control uint64
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// bodyInstructions holds every kind of immediate of the instructions
// wazero accepts with guestFeatures: block types of each encoding, labels,
// indices padded to more bytes than they need, memargs, constants of
// every width, the 0xfc instructions and the 0xfd ones with a memarg, a
// lane, 16 bytes of constant or of lanes, and one of two bytes.
func bodyInstructions() []instruction {
	i32 := []byte{0x41, 0}
	i64 := []byte{0x42, 0}
	f32 := []byte{0x43, 0x0b, 0x0b, 0x0b, 0x0b}
	f64 := []byte{0x44, 2, 2, 2, 2, 2, 2, 2, 2}
	v128 := cat([]byte{0xfd, 0x0c}, bytes.Repeat([]byte{2}, 16))
	memarg := []byte{0, 0x8b, 0x0b} // align 0, offset 1419
	drop := []byte{0x1a}
	ins := []instruction{
		{"nop", []byte{1}, 0},
		{"block unreachable", []byte{2, 0x40, 0, 0x0b}, 1},
		{"block of a result", cat([]byte{2, 0x7f}, i32, []byte{0x0b}, drop), 1},
		{"block of a type index", []byte{2, 0, 0x0b}, 1},
		{"block of a type index of 2 bytes", []byte{2, 0x80, 0, 0x0b}, 1},
		{"loop", []byte{3, 0x40, 0x0b}, 1},
		{"if", cat(i32, []byte{4, 0x40, 0x0b}), 1},
		{"if else", cat(i32, []byte{4, 0x7f}, i32, []byte{5}, i32, []byte{0x0b}, drop), 2},
		{"br", []byte{2, 0x40, 0x0c, 0, 0x0b}, 2},
		{"br_if of a padded label", cat([]byte{2, 0x40}, i32, []byte{0x0d, 0x80, 0x80, 0}, []byte{0x0b}), 2},
		{"br_table", cat([]byte{2, 0x40, 2, 0x40}, i32, []byte{0x0e, 2, 0, 1, 0x80, 0, 0x0b, 0x0b}), 5},
		{"return", []byte{2, 0x40, 0x0f, 0x0b}, 1},
		{"call", []byte{0x10, 0x80, 0x80, 0}, 0},
		{"call_indirect", cat(i32, []byte{0x11, 0, 0}), 0},
		{"select", cat(i32, i32, i32, []byte{0x1b}, drop), 0},
		{"locals", []byte{0x20, 0x80, 0, 0x21, 0, 0x20, 1, 0x22, 1, 0x1a}, 0},
		{"global", []byte{0x23, 0, 0x24, 0x80, 0}, 0},
		{"memory.size", []byte{0x3f, 0, 0x1a}, 0},
		{"memory.grow", cat(i32, []byte{0x40, 0}, drop), 0},
		{"i32.const of 5 bytes", []byte{0x41, 0x80, 0x80, 0x80, 0x80, 0x78, 0x1a}, 0},
		{"i64.const of 10 bytes", []byte{0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f, 0x1a}, 0},
		{"f32.const", cat(f32, drop), 0},
		{"f64.const", cat(f64, drop), 0},
		{"numeric", cat(i32, i32, []byte{0x6a, 0xc0, 0x1a}, i64, []byte{0x7b, 0x1a}, f32, []byte{0xa8, 0x1a}), 0},
		{"i32.trunc_sat_f32_s of a padded opcode", cat(f32, []byte{0xfc, 0x80, 0}, drop), 0},
		{"i64.trunc_sat_f64_u", cat(f64, []byte{0xfc, 7}, drop), 0},
		{"memory.init", cat(i32, i32, i32, []byte{0xfc, 8, 0, 0}), 0},
		{"data.drop", []byte{0xfc, 9, 0}, 0},
		{"memory.copy", cat(i32, i32, i32, []byte{0xfc, 10, 0, 0}), 0},
		{"memory.fill", cat(i32, i32, i32, []byte{0xfc, 11, 0}), 0},
		{"table.init", cat(i32, i32, i32, []byte{0xfc, 12, 0, 0}), 0},
		{"elem.drop", []byte{0xfc, 13, 0}, 0},
		{"table.copy", cat(i32, i32, i32, []byte{0xfc, 14, 0, 0}), 0},
		{"v128.const", cat(v128, drop), 0},
		{"v128.load", cat(i32, []byte{0xfd, 0}, memarg, drop), 0},
		{"v128.load8x8_s", cat(i32, []byte{0xfd, 1}, memarg, drop), 0},
		{"v128.load8_splat", cat(i32, []byte{0xfd, 7}, memarg, drop), 0},
		{"v128.store", cat(i32, v128, []byte{0xfd, 0x0b}, memarg), 0},
		{"v128.load32_zero", cat(i32, []byte{0xfd, 0x5c}, memarg, drop), 0},
		{"i8x16.shuffle", cat(v128, v128, []byte{0xfd, 0x0d}, bytes.Repeat([]byte{0x0b, 2}, 8), drop), 0},
		{"i8x16.extract_lane_s", cat(v128, []byte{0xfd, 0x15, 0x0b}, drop), 0},
		{"i8x16.replace_lane", cat(v128, i32, []byte{0xfd, 0x17, 2}, drop), 0},
		{"f64x2.extract_lane", cat(v128, []byte{0xfd, 0x21, 1}, drop), 0},
		{"v128.load8_lane", cat(i32, v128, []byte{0xfd, 0x54}, memarg, []byte{0x0b}, drop), 0},
		{"v128.store8_lane", cat(i32, v128, []byte{0xfd, 0x58}, memarg, []byte{2}), 0},
		{"i32x4.splat and v128.any_true", cat(i32, []byte{0xfd, 0x11, 0xfd, 0x53}, drop), 0},
		{"i8x16.swizzle", cat(v128, v128, []byte{0xfd, 0x0e}, drop), 0},
		// wazero reads a vector opcode as one byte: i16x8.abs, 0x80 0x01
		// in the format, is i16x8.abs and nop to it.
		{"i16x8.abs", cat(v128, []byte{0xfd, 0x80, 1}, drop), 0},
		{"i64x2.add", cat(v128, v128, []byte{0xfd, 0xce, 1}, drop), 0},
	}
	for op := byte(0x28); op <= 0x35; op++ { // loads
		ins = append(ins, instruction{fmt.Sprintf("load %#x", op), cat(i32, []byte{op}, memarg, drop), 0})
	}
	for op, value := range map[byte][]byte{0x36: i32, 0x37: i64, 0x38: f32, 0x39: f64, 0x3a: i32, 0x3b: i32, 0x3c: i64, 0x3d: i64, 0x3e: i64} {
		ins = append(ins, instruction{fmt.Sprintf("store %#x", op), cat(i32, value, []byte{op}, memarg), 0})
	}
	return ins
}

// bodyModule is a module of one function of type [] -> [] whose body is
// code after locals of each value type, with a table, a memory, a mutable
// global, a passive element segment and a passive data segment for its
// instructions to name.
func bodyModule(code []byte) []byte {
	body := cat([]byte{5, 1, 0x7f, 1, 0x7e, 1, 0x7d, 1, 0x7c, 1, 0x7b}, code, []byte{0x0b})
	return binaryModule(section(sectionType, []byte{1, 0x60, 0, 0}), section(sectionFunction, []byte{1, 0}),
		section(sectionTable, []byte{1, 0x70, 0, 1}), section(sectionMemory, []byte{1, 0, 1}),
		section(sectionGlobal, []byte{1, 0x7f, 1, 0x41, 0, 0x0b}), section(sectionElement, []byte{1, 1, 0, 1, 0}),
		section(sectionDataCount, []byte{1}), section(sectionCode, []byte{1}, leb(uint32(len(body)), 1), body),
		section(sectionData, []byte{1, 1, 1, 'x'}))
}

// validates is nil when wazero compiles wasm as the host does.
func validates(wasm []byte) error {
	return wazeroCompiles(wazero.NewRuntimeConfig().WithCoreFeatures(guestFeatures), wasm)
}

// TestBodyInstructions: the walk reads each run of bodyInstructions, alone
// and after all the others in a random order, to the exact end of the
// body, counting its control-flow points, and wazero accepts each body.
func TestBodyInstructions(t *testing.T) {
	ins := bodyInstructions()
	check := func(t *testing.T, code []byte, control uint64) {
		t.Helper()
		wasm := bodyModule(code)
		m, err := readModule(wasm)
		require.NoError(t, err)
		require.NoError(t, m.unread)
		require.Equal(t, control, m.mostControl)
		require.Equal(t, control*control+control*5*5/controlLocalsWeight, m.controlCost) // 5 locals
		require.NoError(t, validates(wasm))
	}
	for _, in := range ins {
		t.Run(in.what, func(t *testing.T) { check(t, in.code, in.control) })
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 50; i++ {
		var code []byte
		var control uint64
		for _, j := range rng.Perm(len(ins)) {
			code = append(code, ins[j].code...)
			control += ins[j].control
		}
		check(t, code, control)
	}
}

// TestBodyEnds: the walk stops at the end of the function's outermost
// block, and a body that ends before it or has bytes after it is unread,
// as is an instruction cut short.
func TestBodyEnds(t *testing.T) {
	for _, tc := range []struct {
		code []byte
		err  string
	}{
		{[]byte{2, 0x40}, "function 0: unexpected end"},
		{[]byte{0x0b, 1}, "function 0: 2 B after the end of the function"},
		{[]byte{0x41, 0x80, 0x80, 0x80, 0x80, 0x80}, "function 0: instruction 0x41 at byte 11 of the body: an s32 longer than 5 bytes"},
		{[]byte{0xfd, 0x0c, 0, 0}, "function 0: instruction 0xfd at byte 11 of the body: unexpected end"},
		{[]byte{0x0e, 0xff, 0xff, 0xff, 0xff, 0x0f}, "function 0: instruction 0xe at byte 11 of the body: 4294967295 br_table labels cannot fit in the 1 B left (each takes at least 1 B)"},
	} {
		m, err := readModule(bodyModule(tc.code))
		require.NoError(t, err)
		require.EqualError(t, m.unread, tc.err, "% x", tc.code)
	}
}

// TestUnknownInstructions: wazero refuses, as an unknown instruction or
// one of a feature the host leaves off, every instruction the walk does
// not know; the walk reads every other one byte opcode, and every 0xfc
// and 0xfd one, as far as its immediates take it.
func TestUnknownInstructions(t *testing.T) {
	var unknown [][]byte
	try := func(op ...byte) {
		wasm := bodyModule(append(op, make([]byte, 24)...))
		m, err := readModule(wasm)
		require.NoError(t, err)
		if m.unread != nil && bytes.Contains([]byte(m.unread.Error()), []byte(errUnknownInstruction.Error())) {
			unknown = append(unknown, op)
			err := validates(wasm)
			require.Error(t, err, "% x", op)
			require.Regexp(t, "invalid instruction|is disabled|unknown misc opcode", err.Error(), "% x", op)
		}
	}
	for op := 0; op < 256; op++ {
		if op != 0xfc && op != 0xfd {
			try(byte(op))
		}
	}
	for op := 0; op < 128; op++ {
		try(0xfc, byte(op))
		try(0xfd, byte(op))
		try(0xfd, byte(op+128))
	}
	// 69 of one byte (exception handling, typed function references,
	// atomics and unassigned ones) and 0xfc 18 to 127.
	require.Len(t, unknown, 69+110, "unknown: % x", unknown)
}

// TestControlAtTheBounds: a function of maxFunctionControl blocks, and
// three of them (maxModuleControlCost), are read, allowed and compiled;
// a block more in a function, or a fourth function of one block, is
// refused.
func TestControlAtTheBounds(t *testing.T) {
	blocks := func(n int) []byte { return controlBody(bytes.Repeat([]byte{2, 0x40, 0x0b}, n)) }
	typ := section(sectionType, []byte{1, 0x60, 0, 0})
	module := func(bodies ...[]byte) []byte {
		return binaryModule(typ, section(sectionFunction, leb(uint32(len(bodies)), 1), make([]byte, len(bodies))),
			section(sectionCode, leb(uint32(len(bodies)), 1), bytes.Join(bodies, nil)))
	}
	for _, tc := range []struct {
		wasm                 []byte
		most, squares, which uint64
		err                  string
	}{
		{wasm: module(blocks(1), blocks(maxFunctionControl)), most: maxFunctionControl, squares: maxFunctionControl*maxFunctionControl + 1, which: 1},
		{wasm: module(blocks(maxFunctionControl), blocks(maxFunctionControl), blocks(maxFunctionControl)), most: maxFunctionControl, squares: maxModuleControlCost},
		{wasm: module(blocks(1), blocks(maxFunctionControl+1)), most: maxFunctionControl + 1, squares: (maxFunctionControl+1)*(maxFunctionControl+1) + 1, which: 1,
			err: tooMuchControl(1, maxFunctionControl+1)},
		{wasm: module(blocks(maxFunctionControl), blocks(maxFunctionControl), blocks(maxFunctionControl), blocks(1)), most: maxFunctionControl, squares: maxModuleControlCost + 1,
			err: "its functions' control-flow points squared, plus their points times the square of their locals and parameters over 8, make 300000001; the host allows at most 300000000"},
	} {
		m, err := readModule(tc.wasm)
		require.NoError(t, err)
		require.NoError(t, m.unread)
		require.Equal(t, []uint64{tc.most, tc.squares, tc.which}, []uint64{m.mostControl, m.controlCost, uint64(m.mostControlFunc)})
		if tc.err != "" {
			require.EqualError(t, checkControl(m, len(tc.wasm)), tc.err)
			continue
		}
		require.NoError(t, checkControl(m, len(tc.wasm)))
		require.NoError(t, validates(tc.wasm))
	}
}

// TestGoGuestsControl: the walk reads every body of the Go guests to its
// end, and their control flow is well inside the bounds: a function of at
// most a quarter of maxFunctionControl points and a thousandth of
// maxFunctionControlLocals, a module of at most a quarter of
// maxModuleControlCost.
func TestGoGuestsControl(t *testing.T) {
	for _, pkg := range []string{"examples/transformer", "examples/mlp", "wasmhost/testdata/guests/sdk"} {
		m, err := readModule(buildGuest(t, pkg))
		require.NoError(t, err, pkg)
		require.NoError(t, m.unread, pkg)
		require.NoError(t, checkControl(m, 0), pkg) // within the budget of any size
		t.Logf("%s: at most %d control-flow points (function %d), %d points times locals squared (function %d), cost %d",
			pkg, m.mostControl, m.mostControlFunc, m.mostControlLocals, m.mostControlLocalsFunc, m.controlCost)
		require.Positive(t, m.mostControl, pkg)
		require.LessOrEqual(t, m.mostControl, uint64(maxFunctionControl/4), pkg)
		require.LessOrEqual(t, m.mostControlLocals, uint64(maxFunctionControlLocals/1000), pkg)
		require.LessOrEqual(t, m.controlCost, uint64(maxModuleControlCost/4), pkg)
	}
}

// A module larger than 3 MB may cost controlCostPerByte a byte: the
// budget grows with it, as its compile time does.
func TestControlBudgetGrowsWithTheModule(t *testing.T) {
	m := wasmModule{mostControl: 100, controlCost: 4e8}
	require.NoError(t, checkControl(m, 4_000_000))
	require.EqualError(t, checkControl(m, 3_999_999),
		"its functions' control-flow points squared, plus their points times the square of their locals and parameters over 8, make 400000000; the host allows at most 399999900")
	require.EqualError(t, checkControl(m, 1000),
		"its functions' control-flow points squared, plus their points times the square of their locals and parameters over 8, make 400000000; the host allows at most 300000000")
}

// TestControlLocalsAtTheBounds: a function whose control-flow points times
// the square of its locals and parameters make maxFunctionControlLocals,
// of locals or of parameters and locals, is allowed and compiled, and two
// of them; one local more, or a third such function, is refused.
func TestControlLocalsAtTheBounds(t *testing.T) {
	ifs := bytes.Repeat([]byte{0x41, 0, 4, 0x40, 0x0b}, 10)
	atBound := localsBody(10000, ifs) // 10 × 10,000²
	// Type 1 has 5,000 parameters.
	typ := section(sectionType, []byte{2, 0x60, 0, 0, 0x60}, leb(5000, 1), bytes.Repeat([]byte{0x7f}, 5000), []byte{0})
	module := func(bodies ...[]byte) []byte {
		return binaryModule(typ, section(sectionFunction, leb(uint32(len(bodies)), 1), make([]byte, len(bodies))),
			section(sectionCode, leb(uint32(len(bodies)), 1), bytes.Join(bodies, nil)))
	}
	const cost = 10*10 + maxFunctionControlLocals/controlLocalsWeight
	for _, tc := range []struct {
		wasm       []byte
		most, cost uint64
		err        string
	}{
		{wasm: module(atBound), most: maxFunctionControlLocals, cost: cost},
		{wasm: binaryModule(typ, section(sectionFunction, []byte{1, 1}), section(sectionCode, []byte{1}, localsBody(5000, ifs))),
			most: maxFunctionControlLocals, cost: cost},
		{wasm: module(atBound, atBound), most: maxFunctionControlLocals, cost: 2 * cost},
		{wasm: module(localsBody(10001, ifs)), most: 10 * 10001 * 10001, cost: 10*10 + 10*10001*10001/controlLocalsWeight,
			err: "function 0: its control-flow points times the square of its locals and parameters make 1000200010; the host allows at most 1000000000"},
		{wasm: module(atBound, atBound, atBound), most: maxFunctionControlLocals, cost: 3 * cost,
			err: "its functions' control-flow points squared, plus their points times the square of their locals and parameters over 8, make 375000300; the host allows at most 300000000"},
	} {
		m, err := readModule(tc.wasm)
		require.NoError(t, err)
		require.NoError(t, m.unread)
		require.Equal(t, []uint64{tc.most, tc.cost}, []uint64{m.mostControlLocals, m.controlCost})
		if tc.err != "" {
			require.EqualError(t, checkControl(m, len(tc.wasm)), tc.err)
			continue
		}
		require.NoError(t, checkControl(m, len(tc.wasm)))
		require.NoError(t, validates(tc.wasm))
	}
}
