package wasmhost

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// hostileModules are modules whose counts would make wazero's decoder
// allocate far more than their size, or panic; the walk refuses each.
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
	}
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
