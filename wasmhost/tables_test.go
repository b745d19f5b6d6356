package wasmhost

import (
	"bytes"
	"context"
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

// TestReadTables reads the tables of modules in every encoding the binary
// format (as wazero decodes it) allows, and refuses what it cannot read.
func TestReadTables(t *testing.T) {
	noMax := func(min uint32) wasmTable { return wasmTable{min: min} }
	custom := section(0, wasmName("note"), []byte{1, 2, 3})
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
			err: "table 0 has an initial value and 1 tables follow it"},
		{name: "custom sections around the table", wasm: binaryModule(custom, section(sectionTable, []byte{1, 0x70, 0x00, 0x02}), custom),
			want: wasmTables{defined: []wasmTable{noMax(2)}}},
		{name: "every other kind of import", wasm: binaryModule(everyOtherImport, section(sectionTable, []byte{1, 0x70, 0x00, 0x03})),
			want: wasmTables{defined: []wasmTable{noMax(3)}}},
		{name: "an imported table", wasm: binaryModule(importSection(imp(importFunc, 0), imp(importTable, 0x70, 0x00, 0x01), imp(0x7f))),
			want: wasmTables{imported: "m.n"}},

		{name: "not WebAssembly", wasm: []byte("\x00asm\x02\x00\x00\x00"), err: "not a WebAssembly 1 binary"},
		{name: "a section past the end", wasm: append(binaryModule(), sectionTable, 10, 1, 0x70), err: "section 4 of 10 B: unexpected end"},
		{name: "a section size that overflows", wasm: append(binaryModule(), sectionTable, 0xff, 0xff, 0xff, 0xff, 0x7f), err: "section 4: a u32 that overflows"},
		{name: "a size of 6 bytes", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00})), err: "a u32 longer than 5 bytes"},
		{name: "limits flags 4", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x04, 0x01})), err: "limits flags 0x4"},
		{name: "a table cut short", wasm: binaryModule(section(sectionTable, []byte{1, 0x70, 0x01, 0x01})), err: "table 0: unexpected end"},
		{name: "an unknown import kind", wasm: binaryModule(importSection(imp(0x7f))), err: "import 0 (m.n): import kind 0x7f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readTables(tc.wasm)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestCheckTables: the refusals, with their numbers, without compiling
// anything; 2^27 entries is the most wazero allows, 1 GiB of host memory.
func TestCheckTables(t *testing.T) {
	table := func(min uint32) []byte {
		return binaryModule(section(sectionTable, []byte{1, 0x70, 0x00}, leb(min, 1)))
	}
	require.NoError(t, checkTables(table(DefaultMaxTableEntries), DefaultMaxTableEntries))
	require.NoError(t, checkTables(binaryModule(), 0))
	require.EqualError(t, checkTables(table(1<<27), DefaultMaxTableEntries),
		"it declares a table of 134217728 entries (1073741824 B of host memory); the host allows at most 1048576")
	require.EqualError(t, checkTables(table(1), 0), "it declares a table of 1 entries (8 B of host memory); the host allows at most 0")
	require.EqualError(t, checkTables(binaryModule(section(sectionTable, []byte{2, 0x70, 0x00, 0x01, 0x70, 0x00, 0x01})), DefaultMaxTableEntries),
		"it defines 2 tables; a guest has at most one")
	require.EqualError(t, checkTables(binaryModule(section(sectionTable, []byte{1, 0x70})), DefaultMaxTableEntries),
		"its tables could not be read: table section, table 0: unexpected end")
}

// goGuests are the Go guests the repository builds and runs.
var goGuests = []string{
	"examples/mlp", "examples/transformer",
	"wasmhost/testdata/guests/sdk", "wasmhost/testdata/guests/bomb", benchGuest,
}

// TestGoGuestTables: every Go guest declares one table, far below the
// default limit, and loads on a host with it; below its table's size the
// same guest is refused, naming both numbers. (Running them is up to
// TestExamples, TestGoGuestThroughTheSDK, TestGoGuestsEndingBadly and the
// benchmarks; the bench guest runs here once.)
func TestGoGuestTables(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	for _, pkg := range goGuests {
		wasm := buildGuest(t, pkg)
		ts, err := readTables(wasm)
		require.NoError(t, err, pkg)
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

// FuzzReadTables feeds the table reader arbitrary bytes: it never panics,
// and every module wazero decodes and validates with the host's features it
// reads, finding at most one table.
//
// wazero's decoder is not hardened against such bytes: it makes a slice as
// long as each count it reads before checking that the bytes are there, so
// a count near 2^32 in a 20-byte module is a fatal out-of-memory error of
// the process, and a code body whose size is less than its locals take
// panics (makeslice: len out of range). wazero only sees inputs whose
// LEB128 numbers are at most 2 bytes (below 2^14), and its panics count as
// refusals.
func FuzzReadTables(f *testing.F) {
	f.Add(binaryModule())
	f.Add(binaryModule(section(sectionTable, []byte{1, 0x70, 0x01}, leb(5, 5), leb(9, 1))))
	f.Add(binaryModule(section(sectionTable, []byte{1, 0x40, 0x00, 0x70, 0x00, 0x07, 0xd2, 0x00, 0x0b})))
	f.Add(binaryModule(section(sectionImport, []byte{2}, wasmName("m"), wasmName("g"), []byte{importGlobal, refNullable, 0x70, 0x00},
		wasmName("m"), wasmName("t"), []byte{importTable, 0x70, 0x00, 0x01})))
	for _, src := range []string{
		`(module (table 3 funcref) (func (export "_start")))`,
		`(module (import "m" "t" (table 1 2 funcref)) (import "m" "f" (func)) (func (export "_start")))`,
		`(module (import "m" "g" (global i32)) (import "m" "mem" (memory 1 2)) (table 2 funcref) (elem (i32.const 0) $f $f) (func $f) (func (export "_start")))`,
		`(module (table 1 funcref) (table 1 funcref))`,
	} {
		f.Add(wat(f, src))
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(guestFeatures).WithMemoryLimitPages(16))
	f.Cleanup(func() { rt.Close(ctx) })
	f.Fuzz(func(t *testing.T, wasm []byte) {
		ts, err := readTables(wasm)
		_ = checkTables(wasm, DefaultMaxTableEntries)
		if len(wasm) > 4096 || hasLongLEB(wasm) {
			return
		}
		cm, ok := wazeroCompiles(ctx, rt, wasm)
		if !ok {
			return
		}
		cm.Close(ctx)
		require.NoError(t, err, "wazero accepts the module")
		require.LessOrEqual(t, len(ts.defined), 1)
	})
}

// hasLongLEB reports whether b holds two bytes with the continuation bit in
// a row, which any LEB128 of 3 bytes or more has.
func hasLongLEB(b []byte) bool {
	for i := 1; i < len(b); i++ {
		if b[i-1]&0x80 != 0 && b[i]&0x80 != 0 {
			return true
		}
	}
	return false
}

// wazeroCompiles compiles wasm on rt, a panic counting as a refusal.
func wazeroCompiles(ctx context.Context, rt wazero.Runtime, wasm []byte) (cm wazero.CompiledModule, ok bool) {
	defer func() {
		if recover() != nil {
			cm, ok = nil, false
		}
	}()
	cm, err := rt.CompileModule(ctx, wasm)
	return cm, err == nil
}
