package wasmhost

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// TestVectorCounts: for every vector wazero makes from a count, a module
// holding the smallest valid elements of its kind, as many as the count
// says, is read and compiled by wazero (with every WebAssembly 2.0
// feature); the same module with the smallest count that cannot fit is
// refused by the walk, naming the count, the bytes left and that smallest
// size. So each kind's minimum is exact: no larger, or that module would be
// refused, and no smaller.
func TestVectorCounts(t *testing.T) {
	typ := section(sectionType, []byte{1, 0x60, 0, 0})
	fn := section(sectionFunction, []byte{1, 0})
	body := section(sectionCode, []byte{1, 2, 0, 0x0b})
	names := func(sub byte, content ...[]byte) []byte {
		c := bytes.Join(content, nil)
		return section(sectionCustom, wasmName("name"), []byte{sub}, leb(uint32(len(c)), 1), c)
	}
	const k = 3
	for _, tc := range []struct {
		what     string
		elem     []byte // the smallest valid element
		n        int    // how many a valid module can have, when not k
		after    int    // the bytes after the vector, to the end of what holds it
		module   func(count, elems []byte) []byte
		noWazero bool // wazero decodes it only with an experimental feature
	}{
		{what: "types", elem: []byte{0x4e, 0}, module: func(c, e []byte) []byte { return binaryModule(section(sectionType, c, e)) }},
		{what: "types of a recursion group", elem: []byte{0x60, 0, 0}, module: func(c, e []byte) []byte {
			return binaryModule(section(sectionType, []byte{1, 0x4e}, c, e))
		}},
		{what: "parameters", elem: []byte{0x7f}, after: 1, module: func(c, e []byte) []byte { return binaryModule(section(sectionType, []byte{1, 0x60}, c, e, []byte{0})) }},
		{what: "results", elem: []byte{0x7f}, module: func(c, e []byte) []byte { return binaryModule(section(sectionType, []byte{1, 0x60, 0}, c, e)) }},
		{what: "imports", elem: []byte{1, 'm', 0, importFunc, 0}, module: func(c, e []byte) []byte { return binaryModule(typ, section(sectionImport, c, e)) }},
		{what: "functions", elem: []byte{0}, module: func(c, e []byte) []byte {
			return binaryModule(typ, section(sectionFunction, c, e), section(sectionCode, []byte{k}, bytes.Repeat([]byte{2, 0, 0x0b}, k)))
		}},
		{what: "tables", elem: []byte{0x70, 0, 0}, n: 1, module: func(c, e []byte) []byte { return binaryModule(section(sectionTable, c, e)) }},
		{what: "memories", elem: []byte{0, 0}, n: 1, module: func(c, e []byte) []byte { return binaryModule(section(sectionMemory, c, e)) }},
		{what: "globals", elem: []byte{0x7f, 0, 0x41, 0, 0x0b}, module: func(c, e []byte) []byte { return binaryModule(section(sectionGlobal, c, e)) }},
		{what: "exports", elem: []byte{0, 0, 0}, n: 1, module: func(c, e []byte) []byte { return binaryModule(typ, fn, section(sectionExport, c, e), body) }},
		{what: "element segments", elem: []byte{1, 0, 0}, module: func(c, e []byte) []byte { return binaryModule(section(sectionElement, c, e)) }},
		{what: "function indices", elem: []byte{0}, module: func(c, e []byte) []byte {
			return binaryModule(typ, fn, section(sectionElement, []byte{1, 1, 0}, c, e), body)
		}},
		{what: "expressions", elem: []byte{0xd2, 0, 0x0b}, module: func(c, e []byte) []byte {
			return binaryModule(typ, fn, section(sectionElement, []byte{1, 5, 0x70}, c, e), body)
		}},
		{what: "function bodies", elem: []byte{2, 0, 0x0b}, module: func(c, e []byte) []byte {
			return binaryModule(typ, section(sectionFunction, []byte{k}, make([]byte, k)), section(sectionCode, c, e))
		}},
		{what: "local declarations", elem: []byte{1, 0x7f}, after: 1, module: func(c, e []byte) []byte {
			b := bytes.Join([][]byte{c, e, {0x0b}}, nil)
			return binaryModule(typ, fn, section(sectionCode, []byte{1}, leb(uint32(len(b)), 1), b))
		}},
		{what: "data segments", elem: []byte{1, 0}, module: func(c, e []byte) []byte { return binaryModule(section(sectionData, c, e)) }},
		{what: "tags", elem: []byte{0, 0}, noWazero: true, module: func(c, e []byte) []byte { return binaryModule(typ, section(sectionTag, c, e)) }},
		{what: "function names", elem: []byte{0, 0}, module: func(c, e []byte) []byte { return binaryModule(typ, fn, body, names(1, c, e)) }},
		{what: "functions with local names", elem: []byte{0, 0}, module: func(c, e []byte) []byte { return binaryModule(typ, fn, body, names(2, c, e)) }},
		{what: "local names", elem: []byte{0, 0}, module: func(c, e []byte) []byte { return binaryModule(typ, fn, body, names(2, []byte{1, 0}, c, e)) }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			n := tc.n
			if n == 0 {
				n = k
			}
			elems := bytes.Repeat(tc.elem, n)
			valid := tc.module(leb(uint32(n), 1), elems)
			_, err := readModule(valid)
			require.NoError(t, err)
			if !tc.noWazero {
				require.NoError(t, wazeroV2Compiles(valid), "the smallest %s are valid", tc.what)
			}
			left := len(elems) + tc.after
			tooMany := left/len(tc.elem) + 1
			_, err = readModule(tc.module(leb(uint32(tooMany), 1), elems))
			require.ErrorContains(t, err, fmt.Sprintf(": %d %s cannot fit in the %d B left (each takes at least %d B)", tooMany, tc.what, left, len(tc.elem)))
		})
	}
}

// wazeroV2Compiles compiles wasm with every WebAssembly 2.0 feature.
func wazeroV2Compiles(wasm []byte) error {
	return wazeroCompiles(wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(api.CoreFeaturesV2), wasm)
}

// wazeroCompiles compiles wasm in a runtime of config rc.
func wazeroCompiles(rc wazero.RuntimeConfig, wasm []byte) error {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, wasm)
	if err == nil {
		cm.Close(ctx)
	}
	return err
}

// TestLocalsAtTheBounds: a function of maxFunctionLocals locals, and
// functions declaring maxModuleLocals in all (or one per byte of a larger
// module), are accepted; one more is refused.
func TestLocalsAtTheBounds(t *testing.T) {
	require.NoError(t, checkLocals(wasmModule{locals: maxFunctionLocals, mostLocals: maxFunctionLocals}, 100))
	require.NoError(t, checkLocals(wasmModule{locals: maxModuleLocals, mostLocals: 20}, 100))
	require.NoError(t, checkLocals(wasmModule{locals: 3 << 20, mostLocals: 20}, 3<<20))
	require.EqualError(t, checkLocals(wasmModule{locals: maxModuleLocals + 1, mostLocals: 20}, 100),
		"its functions declare 1048577 locals in all; the host allows at most 1048576 in a module of 100 B")
	require.EqualError(t, checkLocals(wasmModule{locals: 3<<20 + 1, mostLocals: 20}, 3<<20),
		"its functions declare 3145729 locals in all; the host allows at most 3145728 in a module of 3145728 B")
	require.EqualError(t, checkLocals(wasmModule{locals: maxFunctionLocals + 1, mostLocals: maxFunctionLocals + 1, mostLocalsFunc: 7}, 100),
		"function 7 declares 50001 locals; the host allows at most 50000")

	// A function of 50,000 locals in two declarations, after an imported
	// function, compiles.
	wasm := binaryModule(section(sectionType, []byte{1, 0x60, 0, 0}), section(sectionImport, []byte{1}, wasmName("m"), wasmName("f"), []byte{importFunc, 0}),
		section(sectionFunction, []byte{1, 0}), section(sectionCode, []byte{1, 8, 2}, leb(maxFunctionLocals-1, 1), []byte{0x7f, 1, 0x7e, 0x0b}))
	m, err := readModule(wasm)
	require.NoError(t, err)
	require.Equal(t, wasmModule{importedFuncs: 1, locals: maxFunctionLocals, mostLocals: maxFunctionLocals, mostLocalsFunc: 1,
		typeParams: []uint32{0}, funcTypes: []uint32{0}}, m)
	require.NoError(t, checkLocals(m, len(wasm)))
	require.NoError(t, wazeroV2Compiles(wasm))
}
