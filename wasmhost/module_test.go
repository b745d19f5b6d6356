package wasmhost

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// leb is v as an unsigned LEB128, padded to at least n bytes.
func leb(v uint32, n int) []byte {
	var b []byte
	for i := 0; v >= 0x80 || i < n-1; i++ {
		b = append(b, byte(v&0x7f)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// section is a section of the binary format: its id, size and body.
func section(id byte, body ...[]byte) []byte {
	b := bytes.Join(body, nil)
	return append(append([]byte{id}, leb(uint32(len(b)), 1)...), b...)
}

// binaryModule is the header and the sections.
func binaryModule(sections ...[]byte) []byte {
	return append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Join(sections, nil)...)
}

func wasmName(s string) []byte { return append(leb(uint32(len(s)), 1), s...) }

// TestReadModule reads the tables of modules in every encoding the binary
// format (as wazero decodes it) allows, and refuses what it cannot read.
func TestReadModule(t *testing.T) {
	noMax := func(min uint32) wasmTable { return wasmTable{min: min} }
	custom := section(sectionCustom, wasmName("note"), []byte{1, 2, 3})
	importSection := func(entries ...[]byte) []byte {
		return section(sectionImport, append([][]byte{leb(uint32(len(entries)), 1)}, entries...)...)
	}
	imp := func(kind byte, desc ...byte) []byte {
		return bytes.Join([][]byte{wasmName("m"), wasmName("n"), {kind}, desc}, nil)
	}
	everyOtherImport := importSection(
		imp(importFunc, leb(200, 3)...),
		imp(importMemory, 0x01, 0x01, 0x02),
		imp(importMemory, 0x03, 0x01, 0x02),
		imp(importGlobal, 0x7f, 0x00),
		imp(importGlobal, refNullable, 0x70, 0x01),
		imp(importGlobal, refNonNullable, 0x8a, 0x80, 0x80, 0x80, 0x00, 0x00), // a concrete heap type, padded
		imp(importTag, 0x00, 0x05),
	)
	for _, tc := range []struct {
		name string
		wasm []byte
		want wasmTables
		err  string
	}{
		{name: "no sections", wasm: binaryModule()},
		{name: "one table", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x00, 0x10})), want: wasmTables{defined: []wasmTable{noMax(16)}}},
		{name: "a table with a maximum", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x01}, leb(5, 1), leb(0xffffffff, 1))),
			want: wasmTables{defined: []wasmTable{{min: 5, max: 0xffffffff, hasMax: true}}}},
		{name: "sizes padded to 5 bytes", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x01}, leb(1<<27, 5), leb(1<<27, 5))),
			want: wasmTables{defined: []wasmTable{{min: 1 << 27, max: 1 << 27, hasMax: true}}}},
		{name: "two tables", wasm: binaryModule(section(sectionTable, []byte{2, 0x70, 0x00, 0x01, 0x6f, 0x00}, leb(1<<20, 1))),
			want: wasmTables{defined: []wasmTable{noMax(1), noMax(1 << 20)}}},
		{name: "(ref null func)", wasm: binaryModule(section(sectionTable, []byte{1, refNullable, 0x70, 0x00}, leb(300, 1))),
			want: wasmTables{defined: []wasmTable{noMax(300)}}},
		{name: "a table with an initial value", wasm: binaryModule(section(sectionTable, []byte{1, 0x40, 0x00, 0x70, 0x00}, leb(7, 1), []byte{0xd2, 0x00, 0x0b})),
			want: wasmTables{defined: []wasmTable{noMax(7)}}},
		{name: "a table with an initial value, then another", wasm: binaryModule(section(sectionTable, []byte{2, 0x40, 0x00, 0x70, 0x00, 0x07, 0xd2, 0x00, 0x0b, 0x70, 0x00, 0x01})),
			want: wasmTables{defined: []wasmTable{noMax(7), noMax(1)}}},
		{name: "custom sections around the table", wasm: binaryModule(custom, section(sectionTable, []byte{1, 0x70, 0x00, 0x02}), custom),
			want: wasmTables{defined: []wasmTable{noMax(2)}}},
		{name: "every other kind of import", wasm: binaryModule(everyOtherImport, section(sectionTable, []byte{1, 0x70, 0x00, 0x03})),
			want: wasmTables{defined: []wasmTable{noMax(3)}}},
		{name: "an imported table", wasm: binaryModule(importSection(imp(importFunc, 0), imp(importTable, 0x70, 0x00, 0x01), imp(importTable, 0x70, 0x00, 0x02))),
			want: wasmTables{imported: "m.n"}},

		{name: "not WebAssembly", wasm: []byte("\x00asm\x02\x00\x00\x00"), err: "not a WebAssembly 1 binary"},
		{name: "a section past the end", wasm: append(binaryModule(), sectionTable, 10, 1, 0x70), err: "table section of 10 B cannot fit in the 2 B left"},
		{name: "a section size that overflows", wasm: append(binaryModule(), sectionTable, 0xff, 0xff, 0xff, 0xff, 0x7f), err: "table section: its size: a u32 that overflows"},
		{name: "a size of 6 bytes", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00})), err: "a u32 longer than 5 bytes"},
		{name: "limits flags 4", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x04, 0x01})), err: "table section: tables[0]: limits flags 0x4"},
		{name: "a table cut short", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x01, 0x01})), err: "table section: tables[0]: unexpected end"},
		{name: "an unknown import kind", wasm: binaryModule(importSection(imp(0x7f))), err: "import section: imports[0]: m.n: import kind 0x7f"},
		{name: "a byte after the last table", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x00, 0x01, 0x00})), err: "table section: 1 B after its end"},
		{name: "an unknown section", wasm: binaryModule(section(14, []byte{0})), err: "section 14: an unknown section"},
		{name: "a name longer than its section", wasm: binaryModule(section(sectionImport, []byte{1}, leb(0xffffffff, 1), []byte{0, 0, 0})),
			err: "import section: imports[0]: a name of 4294967295 B cannot fit in the 3 B left"},
		{name: "a custom section's name longer than it", wasm: binaryModule(section(sectionCustom, leb(1000, 1), []byte("name"))),
			err: "custom section: a name of 1000 B cannot fit in the 4 B left"},
		{name: "data longer than its section", wasm: binaryModule(section(sectionData, []byte{1, 1}, leb(0x7fffffff, 1), []byte{1, 2})),
			err: "data section: data segments[0]: its bytes of 2147483647 B cannot fit in the 2 B left"},
		{name: "a function body longer than the section", wasm: binaryModule(section(sectionCode, []byte{1, 40, 0, 0x0b})),
			err: "code section: function bodies[0]: 40 B cannot fit in the 2 B left"},
		{name: "locals past their function's body", wasm: binaryModule(section(sectionCode, []byte{1, 2, 1, 0x01, 0x7f, 0x0b})),
			err: "code section: function bodies[0]: 1 local declarations cannot fit in the 1 B left (each takes at least 2 B)"},
		{name: "a name subsection longer than its size", wasm: binaryModule(section(sectionCustom, wasmName("name"), []byte{1, 2, 1, 0, 0})),
			err: "custom section: name subsection 1: 1 function names cannot fit in the 1 B left (each takes at least 2 B)"},
		{name: "a name subsection shorter than its size", wasm: binaryModule(section(sectionCustom, wasmName("name"), []byte{0, 3, 1, 'a', 0})),
			err: "custom section: name subsection 0: 1 B after its end"},
		{name: "a constant expression wazero does not know", wasm: binaryModule(section(sectionGlobal, []byte{1, 0x7f, 0x00, 0x20, 0x00, 0x0b})),
			err: "global section: globals[0]: instruction 0x20 in a constant expression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readModule(tc.wasm)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got.tables)
		})
	}
}

// TestCheckTables: the refusals, with their numbers, without compiling
// anything; 2^27 entries is the most wazero allows, 1 GiB of host memory.
func TestCheckTables(t *testing.T) {
	table := func(min uint32) wasmTables { return wasmTables{defined: []wasmTable{{min: min}}} }
	require.NoError(t, checkTables(table(DefaultMaxTableEntries), DefaultMaxTableEntries))
	require.NoError(t, checkTables(wasmTables{}, 0))
	require.EqualError(t, checkTables(table(1<<27), DefaultMaxTableEntries),
		"it declares a table of 134217728 entries (1073741824 B of host memory); the host allows at most 1048576")
	require.EqualError(t, checkTables(table(1), 0), "it declares a table of 1 entries (8 B of host memory); the host allows at most 0")
	require.EqualError(t, checkTables(wasmTables{defined: []wasmTable{{min: 1}, {min: 1}}}, DefaultMaxTableEntries),
		"it defines 2 tables; a guest has at most one")
	require.EqualError(t, checkTables(wasmTables{imported: "m.t"}, DefaultMaxTableEntries), "it imports table m.t; a guest defines its own")
}

// goGuests are the Go guests the repository builds and runs.
var goGuests = []string{
	"examples/mlp", "examples/transformer",
	"wasmhost/testdata/guests/sdk", "wasmhost/testdata/guests/bomb", benchGuest,
}

// TestGoGuestTablesAndLocals: every Go guest declares one table, far
// below the default limit, and loads on a host with it; below its table's
// size the same guest is refused, naming both numbers. Its functions
// declare a small fraction of the locals the host allows. (Running them is
// up to TestExamples, TestGoGuestThroughTheSDK, TestGoGuestsEndingBadly and
// the benchmarks; the bench guest runs here once.)
func TestGoGuestTablesAndLocals(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	for _, pkg := range goGuests {
		wasm := buildGuest(t, pkg)
		walk, err := readModule(wasm)
		require.NoError(t, err, pkg)
		require.NoError(t, checkLocals(walk, len(wasm)), pkg)
		t.Logf("%s: %d B, locals: at most %d in a function, %d in all", pkg, len(wasm), walk.mostLocals, walk.locals)
		require.Less(t, walk.mostLocals, uint64(maxFunctionLocals/1000), pkg)
		require.Less(t, walk.locals, uint64(maxModuleLocals/64), pkg)
		ts := walk.tables
		require.Empty(t, ts.imported, pkg)
		require.Len(t, ts.defined, 1, pkg)
		entries := ts.defined[0].min
		t.Logf("%s: a table of %d entries, maximum declared: %v", pkg, entries, ts.defined[0].hasMax)
		require.Less(t, entries, uint32(DefaultMaxTableEntries/16), pkg)
		m := compile(t, h, wasm)

		small, err := New(context.Background(), c, WithMaxTableEntries(entries-1))
		require.NoError(t, err)
		_, err = small.Compile(context.Background(), wasm)
		require.ErrorIs(t, err, ErrRefused)
		require.ErrorContains(t, err, "the host allows at most "+itoa(entries-1), pkg)
		require.ErrorContains(t, err, "a table of "+itoa(entries)+" entries", pkg)
		require.NoError(t, small.Close(context.Background()))

		if pkg == benchGuest {
			_, err := h.Run(context.Background(), m, WithArgs("bench", "sync", "10"), WithClocks())
			require.NoError(t, err)
		}
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// FuzzReadModule feeds the walk arbitrary bytes: it never panics, and
// what it accepts wazero compiles without panicking or allocating more
// than a small multiple of the module's size, finding at most one table.
// wazero only sees inputs the walk accepts of at most 4 KiB (nothing else
// would be safe: its decoder is not hardened), on the host's features and
// engine, in a worker whose address space is limited: a huge allocation
// ends the worker, and the fuzzer reports its input.
func FuzzReadModule(f *testing.F) {
	f.Add(binaryModule())
	f.Add(binaryModule(section(sectionTable, []byte{1, 0x70, 0x01}, leb(5, 5), leb(9, 1))))
	f.Add(binaryModule(section(sectionTable, []byte{1, 0x40, 0x00, 0x70, 0x00, 0x07, 0xd2, 0x00, 0x0b})))
	f.Add(binaryModule(section(sectionImport, []byte{2}, wasmName("m"), wasmName("g"), []byte{importGlobal, refNullable, 0x70, 0x00},
		wasmName("m"), wasmName("t"), []byte{importTable, 0x70, 0x00, 0x01})))
	for _, tc := range hostileModules() {
		f.Add([]byte(tc.wasm))
	}
	for _, src := range []string{
		`(module (table 3 funcref) (func (export "_start")))`,
		`(module (import "m" "t" (table 1 2 funcref)) (import "m" "f" (func)) (func (export "_start")))`,
		`(module (import "m" "g" (global i32)) (import "m" "mem" (memory 1 2)) (table 2 funcref) (elem (i32.const 0) $f $f) (func $f) (func (export "_start")))`,
		`(module (table 1 funcref) (table 1 funcref))`,
		`(module (type (func (param i32 i64) (result f32)))
			(global $g (mut i32) (i32.const 7)) (global f64 (f64.const 1.5)) (global i64 (i64.const -9))
			(memory 1) (data (i32.const 8) "abc") (data "passive")
			(table 4 funcref) (elem (i32.const 1) func $f) (elem func $f) (elem declare func $f)
			(func $f (param i32 i64) (result f32) (local i32 i32 f64) (local v128) (f32.const 0))
			(func (export "_start") (local $x i32) (local.set $x (global.get $g)))
			(start 1))`,
	} {
		f.Add(wat(f, src))
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(guestFeatures).WithMemoryLimitPages(16))
	f.Cleanup(func() { rt.Close(ctx) })
	f.Fuzz(func(t *testing.T, wasm []byte) {
		walk, err := checkBinary(wasm)
		if err != nil || len(wasm) > 4096 {
			return
		}
		limitAddressSpaceOnce(t, 4<<30)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		cm, err := compileModule(ctx, rt, wasm)
		runtime.ReadMemStats(&after)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(256<<20), "wazero's allocations compiling a module of %d B", len(wasm))
		if err != nil {
			require.NotContains(t, err.Error(), "wazero failed on it", "wazero panicked on a module the walk accepted")
			return
		}
		cm.Close(ctx)
		require.LessOrEqual(t, len(walk.tables.defined), 1)
	})
}

// WithMaxTableEntries(0) is a limit, as documented: it allows no table,
// so a guest that declares none, or an empty one, loads and runs, and one
// that declares a table of one entry is refused by Compile, naming both
// numbers.
func TestATableLimitOfZeroAllowsNoTable(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c, WithMaxTableEntries(0))
	for _, src := range []string{
		`(module (memory (export "memory") 1) (func (export "_start")))`,
		`(module (memory (export "memory") 1) (table 0 funcref) (func (export "_start")))`,
	} {
		_, err := h.Run(context.Background(), compile(t, h, wat(t, src)))
		require.NoError(t, err, src)
	}
	_, err := h.Compile(context.Background(), wat(t, `(module (memory (export "memory") 1) (table 1 funcref) (func (export "_start")))`))
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "it declares a table of 1 entries (8 B of host memory); the host allows at most 0")
}
