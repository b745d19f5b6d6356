package wasmhost

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// hostileModules are modules whose counts would make wazero's decoder
// allocate far more than their size, or panic, or its compiler take
// seconds to minutes; the walk refuses each.
// None of them may reach wazero in this process.
func hostileModules() []struct{ name, wasm, err string } {
	// locals is a function declaring n locals of type i32 in one entry.
	locals := func(n uint32) []byte {
		b := bytes.Join([][]byte{{1}, leb(n, 1), {0x7f, 0x0b}}, nil)
		return append(leb(uint32(len(b)), 1), b...)
	}
	typ := section(sectionType, []byte{1, 0x60, 0, 0})
	manyFunctions := func(n int, body []byte) string {
		return string(binaryModule(typ, section(sectionFunction, leb(uint32(n), 1), make([]byte, n)),
			section(sectionCode, leb(uint32(n), 1), bytes.Repeat(body, n))))
	}
	return []struct{ name, wasm, err string }{
		// wazero reads an import count of about 4e9 and makes a slice of
		// that many imports: a fatal out-of-memory error.
		{"an import count of 4e9 (24 B)", "\x00asm\x01\x00\x00\x00\x020\xdc\xdc\xdc\xdc\x0e\x0e\x0e0\x010\x010\x010",
			"import section of 48 B cannot fit in the 14 B left"},
		// wazero panics: makeslice: len out of range.
		{"a code section shorter than its locals (17 B)", "\x00asm\x01\x00\x00\x00\n00\x04\x010c\x960",
			"code section of 48 B cannot fit in the 7 B left"},
		{"a function of 2^32 - 1 locals", string(binaryModule(typ, section(sectionFunction, []byte{1, 0}), section(sectionCode, []byte{1}, locals(0xffffffff)))),
			"function 0 declares 4294967295 locals; the host allows at most 50000"},
		{"a function of 50,001 locals", string(binaryModule(typ, section(sectionFunction, []byte{1, 0}), section(sectionCode, []byte{1}, locals(maxFunctionLocals+1)))),
			"function 0 declares 50001 locals; the host allows at most 50000"},
		{"21 functions of 50,000 locals", manyFunctions(21, locals(maxFunctionLocals)),
			"its functions declare 1050000 locals in all; the host allows at most 1048576 in a module of 189 B"},
		{"an import count of 2^32 - 1 in a section that holds it", string(binaryModule(section(sectionImport, leb(0xffffffff, 1), []byte{0, 0, 0, 0}))),
			"import section: 4294967295 imports cannot fit in the 4 B left (each takes at least 5 B)"},
		{"a parameter count of 2^32 - 1", string(binaryModule(section(sectionType, []byte{1, 0x60}, leb(0xffffffff, 1), []byte{0x7f, 0}))),
			"type section: types[0]: 4294967295 parameters cannot fit in the 2 B left (each takes at least 1 B)"},
		{"a function-name count of 2^32 - 1", string(binaryModule(section(sectionCustom, wasmName("name"), []byte{1, 6}, leb(0xffffffff, 1), []byte{0}))),
			"custom section: name subsection 1: 4294967295 function names cannot fit in the 1 B left (each takes at least 2 B)"},
		{"data of 2^32 - 1 bytes", string(binaryModule(section(sectionData, []byte{1, 1}, leb(0xffffffff, 1), []byte{0}))),
			"data section: data segments[0]: its bytes of 4294967295 B cannot fit in the 1 B left"},
		// wazero's compiler takes time quadratic in a function's control
		// flow: seconds to minutes for each of these.
		{"20,000 blocks", control(0, bytes.Repeat([]byte{2, 0x40, 0x0b}, 20000)),
			tooMuchControl(0, 20000)},
		{"50,000 blocks", control(0, bytes.Repeat([]byte{2, 0x40, 0x0b}, 50000)),
			tooMuchControl(0, 50000)},
		{"200,000 nested blocks", control(0, append(bytes.Repeat([]byte{2, 0x40}, 200000), bytes.Repeat([]byte{0x0b}, 200000)...)),
			tooMuchControl(0, 200000)},
		{"20,000 ifs", control(0, bytes.Repeat([]byte{0x41, 0, 4, 0x40, 0x0b}, 20000)),
			tooMuchControl(0, 20000)},
		{"20,000 br_ifs", control(0, bytes.Join([][]byte{{2, 0x40}, bytes.Repeat([]byte{0x41, 0, 0x0d, 0}, 20000), {0x0b}}, nil)),
			tooMuchControl(0, 20001)},
		{"a br_table of 100,000 labels", control(0, bytes.Join([][]byte{{2, 0x40, 0x41, 0, 0x0e}, leb(100000, 1), make([]byte, 100001), {0x0b}}, nil)),
			tooMuchControl(0, 100002)},
		{"10,001 loops after an imported function", control(1, bytes.Repeat([]byte{3, 0x40, 0x0b}, maxFunctionControl+1)),
			tooMuchControl(1, 10001)},
		{"4 functions of 10,000 loops", manyFunctions(4, controlBody(bytes.Repeat([]byte{3, 0x40, 0x0b}, maxFunctionControl))),
			"its functions' control-flow points squared, plus their points times the square of their locals and parameters over 8, make 400000000; the host allows at most 300000000"},
		// Locals multiply it: 28 s and 34 s.
		{"1,000 ifs and then 5,000 locals read (25 KB)", string(localsControl(0, 5000, ifsThenReads(1000, 5000))),
			"function 0: its control-flow points times the square of its locals and parameters make 25000000000; the host allows at most 1000000000"},
		{"100 nested loops around 20,000 locals", string(localsControl(0, 20000, nestedAround(100, 20000))),
			"function 0: its control-flow points times the square of its locals and parameters make 40000000000; the host allows at most 1000000000"},
		{"1,000 ifs and then 5,000 parameters read", string(localsControl(5000, 0, ifsThenReads(1000, 5000))),
			"function 0: its control-flow points times the square of its locals and parameters make 25000000000; the host allows at most 1000000000"},
		{"3 functions of 1,000 ifs and 1,000 locals", manyFunctions(3, localsBody(1000, ifsThenReads(1000, 1000))),
			"its functions' control-flow points squared, plus their points times the square of their locals and parameters over 8, make 378000000; the host allows at most 300000000"},
	}
}

// localsBody is a function body declaring locals i32 locals whose
// instructions are code.
func localsBody(locals uint32, code []byte) []byte {
	b := bytes.Join([][]byte{{1}, leb(locals, 1), {0x7f}, code, {0x0b}}, nil)
	return append(leb(uint32(len(b)), 1), b...)
}

// localsControl is a module of one function of params i32 parameters and
// locals i32 locals whose instructions are code.
func localsControl(params, locals uint32, code []byte) []byte {
	typ := section(sectionType, []byte{1, 0x60}, leb(params, 1), bytes.Repeat([]byte{0x7f}, int(params)), []byte{0})
	return binaryModule(typ, section(sectionFunction, []byte{1, 0}), section(sectionCode, []byte{1}, localsBody(locals, code)))
}

// ifsThenReads is n empty ifs and then a read of each of the first vars
// locals.
func ifsThenReads(n, vars int) []byte {
	code := bytes.Repeat([]byte{0x41, 0, 4, 0x40, 0x0b}, n)
	for i := 0; i < vars; i++ {
		code = append(append(append(code, 0x20), leb(uint32(i), 1)...), 0x1a)
	}
	return code
}

// nestedAround is n nested loops around a read and a write of each of the
// first vars locals.
func nestedAround(n, vars int) []byte {
	code := bytes.Repeat([]byte{3, 0x40}, n)
	for i := 0; i < vars; i++ {
		code = append(append(append(append(code, 0x20), leb(uint32(i), 1)...), 0x21), leb(uint32(i), 1)...)
	}
	return append(code, bytes.Repeat([]byte{0x0b}, n)...)
}

// tooMuchControl is the walk's refusal of function i of n control-flow
// points.
func tooMuchControl(i, n int) string {
	return fmt.Sprintf("function %d has %d control-flow points (block, loop, if, else, br, br_if, br_table labels); the host allows at most %d", i, n, maxFunctionControl)
}

// controlBody is a function body of no locals whose instructions are code.
func controlBody(code []byte) []byte {
	b := append(append([]byte{0}, code...), 0x0b)
	return append(leb(uint32(len(b)), 1), b...)
}

// control is a module of one function whose instructions are code, after
// imports imported functions.
func control(imports int, code []byte) string {
	typ := section(sectionType, []byte{1, 0x60, 0, 0})
	var imported []byte
	if imports > 0 {
		imported = section(sectionImport, leb(uint32(imports), 1), bytes.Repeat(bytes.Join([][]byte{wasmName("m"), wasmName("f"), {importFunc, 0}}, nil), imports))
	}
	return string(binaryModule(typ, imported, section(sectionFunction, []byte{1, 0}), section(sectionCode, []byte{1}, controlBody(code))))
}

// TestHostileModulesWalk: the walk refuses every hostile module, without
// wazero.
func TestHostileModulesWalk(t *testing.T) {
	for _, tc := range hostileModules() {
		t.Run(tc.name, func(t *testing.T) {
			m, err := readModule([]byte(tc.wasm))
			if err == nil {
				err = checkLocals(m, len(tc.wasm))
			}
			if err == nil {
				err = checkControl(m, len(tc.wasm))
			}
			require.EqualError(t, err, tc.err)
		})
	}
}

// TestHostileModules compiles every hostile module on a host, which
// refuses each, and then compiles and runs a guest. It runs in a child
// process of the test binary whose address space is limited to 4 GiB more
// than it holds when the host is up: were a module to reach wazero's
// decoder, the child would die of it, not the machine.
func TestHostileModules(t *testing.T) {
	if os.Getenv(hostileChildEnv) != "1" {
		runLimitedChild(t, "^TestHostileModules$")
		return
	}
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	guest := guestWAT(t, isolationWAT, `(call $fillAndFree) (call $checkZeros)`)
	limitAddressSpace(t, 4<<30)
	for _, tc := range hostileModules() {
		_, err := h.Compile(context.Background(), []byte(tc.wasm))
		require.ErrorIs(t, err, ErrRefused, tc.name)
		require.ErrorContains(t, err, tc.err, tc.name)
	}
	_, err := h.Run(context.Background(), compile(t, h, guest))
	require.NoError(t, err, "the host runs guests after refusing the hostile modules")
}

// TestCompilePanics: a panic of wazero's CompileModule is an error; the
// 17-byte module, which the walk refuses, makes wazero's decoder panic.
func TestCompilePanics(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(guestFeatures))
	defer rt.Close(ctx)
	_, err := compileModule(ctx, rt, []byte("\x00asm\x01\x00\x00\x00\n00\x04\x010c\x960"))
	require.EqualError(t, err, "wazero failed on it: runtime error: makeslice: len out of range")
}

// What a guest names itself reaches the errors that refuse or end it
// escaped: an escape sequence in an import's name or in a function's name
// (its name section, which a trap's stack trace shows) went raw to the
// terminal showing vkrt run's error, and cleared its screen.
func TestGuestChosenNamesAreEscapedInErrors(t *testing.T) {
	h := newHost(t, context.Background(), openClient(t))
	_, err := h.Compile(context.Background(), wat(t, `(module (import "vkrt_v1" "\1b[2J" (func (result i32))) (func (export "_start")))`))
	require.ErrorIs(t, err, ErrRefused)
	require.NotContains(t, err.Error(), "\x1b")
	require.Contains(t, err.Error(), `it imports vkrt_v1.\x1b[2J, which ABI version 1 does not have`)

	fn := append(leb(1, 1), append(leb(0, 1), wasmName("\x1b[2J")...)...)
	names := section(sectionCustom, wasmName("name"), []byte{1}, leb(uint32(len(fn)), 1), fn)
	trap := append(wat(t, `(module (func unreachable) (func (export "_start") (call 0)))`), names...)
	_, err = h.Run(context.Background(), compile(t, h, trap))
	require.ErrorIs(t, err, ErrTrapped)
	require.NotContains(t, err.Error(), "\x1b")
	require.Contains(t, err.Error(), "wasm stack trace:\n\t.\\x1b[2J()\n\t.$1()")
}

// An import the host refuses is named by at most 64 bytes of its module
// and its name, whatever it imports: an unknown function of vkrt_v1, a
// table or a memory were named in full, a name of 5,000 bytes making an
// error of 5,000.
func TestRefusedImportsAreNamedShort(t *testing.T) {
	h := newHost(t, context.Background(), openClient(t))
	long := strings.Repeat("B", 5000)
	for _, imp := range []string{
		`(import "vkrt_v1" "` + long + `" (func (result i32)))`,
		`(import "` + long + `" "` + long + `" (table 1 funcref))`,
		`(import "` + long + `" "` + long + `" (memory 1))`,
	} {
		_, err := h.Compile(context.Background(), wat(t, `(module `+imp+` (func (export "_start")))`))
		require.ErrorIs(t, err, ErrRefused)
		require.Less(t, len(err.Error()), 300, err.Error())
		require.Contains(t, err.Error(), strings.Repeat("B", 64)+"…")
	}
}
