package wasmhost

import (
	"errors"
	"fmt"
)

// wazero's optimizing compiler takes time quadratic in a function's control
// flow (building its loop nesting forest asks, for each block, whether it
// is dominated by another, up the dominator tree): a function of 20,000
// empty blocks (60 KB) compiled in 1.8 to 3.2 s on a 2-core machine, 50,000
// in 15 to 24 s, and 200,000 nested blocks (600 KB) in more than two
// minutes, with no deadline of the host's covering it. So the walk decodes
// each function body's instructions too, skipping every immediate as
// wazero's validator reads it, and counts the control-flow points the
// compiler pays for: block, loop, if and else, br and br_if, and each label
// of a br_table (its default included). Compile times of one function on
// that machine, by kind (count, seconds):
//
//	block         5,000 0.13  10,000 0.54  20,000 1.83
//	loop          5,000 0.44  10,000 1.92  20,000 8.30
//	if            5,000 0.45  10,000 1.87  20,000 11.07
//	if else      10,000 0.42  20,000 1.70  40,000 9.58
//	br_if         5,000 0.47  10,000 1.38  20,000 5.40
//	block br 0   10,000 0.12  20,000 0.47  40,000 1.88
//	br_table     10,000 0.06  20,000 0.25
//
// Spread over functions the cost stays about that of the points' squares:
// 3 functions of 10,000 loops compiled in 5.1 s, 30 of 3,162 in 4.7 s, 300
// of 1,000 in 5.2 s (ifs: 5.0, 5.0, 5.8 s).
//
// Locals multiply it: each control-flow point the compiler carries a local
// through costs in proportion to the function's locals and parameters.
// 1,000 ifs and then a read of each of 5,000 locals (25 KB) compiled in 28
// s, 100 nested loops around 20,000 locals (127 KB) in 34 s. The time
// follows points × (locals and parameters)²: at 10^9, 10 ifs and 10,000
// locals compiled in 1.8 s, 100 and 3,162 in 3.5 s, 1,000 and 1,000 in
// 1.3 to 4.0 s (nested loops 2.3, 2.7, 2.8 s), 10,000 ifs and 316 locals
// in 4.9 s (10,000 ifs alone 1.9 s), on that machine under other work: a
// point squared costs about what 5 to 15 of that product do, and the
// product counts for an eighth of one.
//
// The Go guests the host runs (examples/transformer.wasm and mlp.wasm, the
// tests' guests) count at most 2,181 points in a function (one of Go's
// runtime) and 3.7 to 5.2×10^7 for the sum of their functions' squares;
// their points times the square of their locals and parameters make at
// most 340,011 in a function and 1.3×10^7 in all. The walk takes 8 ms beside the 1.1 to 2.2 s
// transformer.wasm compiles in. checkControl allows maxFunctionControl
// points in a function, 4.6 times Go's most (1.9 s of loops, the worst
// kind), maxFunctionControlLocals for its points times the square of its
// locals and parameters, 2,900 times Go's most, and maxModuleControlCost
// for the sum over the functions of their points squared plus that product
// over controlLocalsWeight, 5.6 times Go's most: about 5 s of compile
// however it is spread (2 functions of 5,000 ifs and then reads of 447
// locals, 3.0×10^8, compiled in 4.0 s; 10,000 ifs and 316 locals,
// 2.2×10^8, in 3.9 s).
//
// A larger module may cost controlCostPerByte for each of its bytes if that
// is more, as its compile takes longer anyway: the Go guests cost 13 to 15
// a byte (4.05×10^7 for transformer.wasm's 3 MB), so a Go guest of any
// size stays 6 times inside it, and a hostile module costs about 2 s of
// compile a megabyte past 3 MB (a function of maxFunctionControl points
// takes some 30 KB of blocks, loops or ifs).
const (
	maxFunctionControl       = 10000
	maxFunctionControlLocals = 1_000_000_000
	controlLocalsWeight      = 8
	maxModuleControlCost     = 3 * maxFunctionControl * maxFunctionControl
	controlCostPerByte       = 100
)

// errUnknownInstruction stops the walk of a body at an instruction it does
// not know: none that wazero accepts with the host's features (see
// guestFeatures), so wazero's validation, which runs before any function is
// compiled, refuses the module.
var errUnknownInstruction = errors.New("an unknown instruction")

// bodyControl reads the instructions of a function body after its locals
// up to the end of the function, and returns how many control-flow points
// it holds. It reads as wazero's validator does, LEB128 where wazero reads
// one and a byte where it reads a byte, so that it never takes an
// immediate for an instruction wazero reads as one; what it cannot read
// (an unknown instruction, a malformed immediate, bytes after the end)
// is an error, with the count up to there: wazero refuses such a body.
func bodyControl(r *wasmReader) (uint64, error) {
	var n uint64
	depth := 0
	for {
		at := r.off
		op, err := r.byte()
		if err != nil {
			return n, err
		}
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			n++
			depth++
			err = r.blockType()
		case op == 0x05: // else
			n++
		case op == 0x0b: // end
			if depth == 0 {
				if !r.done() {
					return n, fmt.Errorf("%d B after the end of the function", r.left())
				}
				return n, nil
			}
			depth--
		case op == 0x0c || op == 0x0d: // br, br_if
			n++
			_, err = r.u32()
		case op == 0x0e: // br_table: its labels and the default
			var labels uint32
			labels, err = r.count("br_table labels", 1)
			for i := uint32(0); i <= labels && err == nil; i++ {
				_, err = r.u32()
			}
			n += uint64(labels) + 1
		case op == 0x00, op == 0x01, op == 0x0f, op == 0x1a, op == 0x1b: // unreachable, nop, return, drop, select
		case op == 0x10, op == 0x12, op == 0xd2: // call, return_call, ref.func
			_, err = r.u32()
		case op == 0x11, op == 0x13: // call_indirect, return_call_indirect: a type and a table
			if _, err = r.u32(); err == nil {
				_, err = r.u32()
			}
		case op == 0x1c: // select of a type: wazero reads a byte, 1, and the type
			var c byte
			if c, err = r.byte(); err == nil {
				if c != 1 {
					return n, fmt.Errorf("select with %d types", c)
				}
				if c, err = r.byte(); err == nil && (c == refNullable || c == refNonNullable) {
					_, err = r.s33Value()
				}
			}
		case op >= 0x20 && op <= 0x26: // locals, globals, table.get and table.set
			_, err = r.u32()
		case op >= 0x28 && op <= 0x3e: // loads and stores
			err = r.memArg()
		case op == 0x3f || op == 0x40: // memory.size, memory.grow
			_, err = r.u32()
		case op == 0x41: // i32.const
			err = r.signed(5, "an s32")
		case op == 0x42: // i64.const
			err = r.signed(10, "an s64")
		case op == 0x43: // f32.const
			_, err = r.bytes(4)
		case op == 0x44: // f64.const
			_, err = r.bytes(8)
		case op >= 0x45 && op <= 0xc4: // numeric, sign extension included
		case op == 0xd0: // ref.null: funcref, externref, exnref or a type index
			var c byte
			if c, err = r.byte(); err == nil && c != 0x70 && c != 0x6f && c != 0x69 {
				r.off--
				_, err = r.u32()
			}
		case op == 0xd1: // ref.is_null
		case op == 0xfc:
			err = r.miscInstruction()
		case op == 0xfd:
			err = r.vectorInstruction()
		default:
			err = errUnknownInstruction
		}
		if err != nil {
			return n, fmt.Errorf("instruction %#x at byte %d of the body: %w", op, at, err)
		}
	}
}

// blockType skips a block's type: a signed LEB128 of 33 bits of at most 5
// bytes (wazero reads a fifth byte whatever its top bit) and, after one
// that is -29 or -28 (ref null, ref), a heap type of the same encoding.
func (r *wasmReader) blockType() error {
	v, err := r.s33Value()
	if err == nil && (v == -29 || v == -28) {
		_, err = r.s33Value()
	}
	return err
}

// s33Value reads a signed LEB128 of 33 bits as wazero's
// leb128.DecodeInt33AsInt64 does, overflow checks included.
func (r *wasmReader) s33Value() (int64, error) {
	var v, b int64
	shift, read := 0, 0
	for shift < 35 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		b = int64(c)
		v |= (b & 0x7f) << shift
		shift += 7
		read++
		if b&0x80 == 0 {
			break
		}
	}
	const mask = 1<<33 - 1
	if shift < 33 && b&0x40 != 0 {
		v |= mask << shift
	}
	v &= mask
	if v&(1<<32) != 0 {
		v -= 1 << 33
	}
	if read == 5 && (v < 0 && b&0x20 == 0 || v >= 0 && b&0x20 != 0) {
		return 0, errors.New("an s33 that overflows")
	}
	return v, nil
}

// memArg skips an alignment and an offset.
func (r *wasmReader) memArg() error {
	if _, err := r.u32(); err != nil {
		return err
	}
	_, err := r.u32()
	return err
}

// miscInstruction skips an instruction after 0xfc: its opcode, a u32, and
// its immediates.
func (r *wasmReader) miscInstruction() error {
	op, err := r.u32()
	if err != nil {
		return err
	}
	immediates := 0
	switch {
	case op <= 7: // saturating truncations
	case op == 9 || op == 11 || op == 13 || op >= 15 && op <= 17:
		// data.drop, memory.fill, elem.drop, table.grow, table.size, table.fill
		immediates = 1
	case op == 8 || op == 10 || op == 12 || op == 14:
		// memory.init, memory.copy, table.init, table.copy
		immediates = 2
	default:
		return errUnknownInstruction
	}
	for i := 0; i < immediates && err == nil; i++ {
		_, err = r.u32()
	}
	return err
}

// vectorInstruction skips an instruction after 0xfd: its opcode, which
// wazero reads as one byte, and its immediates.
func (r *wasmReader) vectorInstruction() error {
	op, err := r.byte()
	if err != nil {
		return err
	}
	switch {
	case op <= 0x0b || op == 0x5c || op == 0x5d: // loads and store: a memarg
		return r.memArg()
	case op == 0x0c || op == 0x0d: // v128.const, i8x16.shuffle: 16 bytes
		_, err = r.bytes(16)
	case op >= 0x15 && op <= 0x22: // extract_lane and replace_lane: a lane
		_, err = r.byte()
	case op >= 0x54 && op <= 0x5b: // load_lane and store_lane: a memarg and a lane
		if err = r.memArg(); err == nil {
			_, err = r.byte()
		}
	}
	// Every other opcode of a byte is an operation of no immediates, or
	// none at all, which wazero refuses.
	return err
}
