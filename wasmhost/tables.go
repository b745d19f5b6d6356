package wasmhost

import (
	"errors"
	"fmt"
)

// Tables are host memory that the guest's memory limit does not cover:
// wazero allocates 8 bytes per entry of every table a module defines when
// the module is loaded, and table.grow adds more while it runs. The host
// runs guests without the reference-types feature, so a module has at most
// one table and no instruction grows one (table.grow, table.fill and
// table.size are invalid); what is left is the table's initial size, which
// wazero accepts up to 2^27 entries (1 GiB) and which checkTables bounds.
// wazero exposes nothing of a compiled module's tables, so they are read
// from the module's bytes, after wazero has decoded and validated them.

// wasmTables is what a module declares about tables.
type wasmTables struct {
	// imported is the first table the module imports, as module.name; ""
	// when it imports none.
	imported string
	// defined are the module's own tables, from its table section.
	defined []wasmTable
}

type wasmTable struct {
	min    uint32
	max    uint32
	hasMax bool
}

var errShort = errors.New("unexpected end")

// wasmReader reads the WebAssembly binary format from a byte slice; every
// read is bounds-checked and fails with errShort past the end.
type wasmReader struct {
	b   []byte
	off int
}

func (r *wasmReader) done() bool { return r.off >= len(r.b) }

func (r *wasmReader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *wasmReader) bytes(n uint32) ([]byte, error) {
	if uint64(n) > uint64(len(r.b)-r.off) {
		return nil, errShort
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// u32 reads an unsigned LEB128 of at most 5 bytes whose unused bits are
// zero, as the format (and wazero) requires.
func (r *wasmReader) u32() (uint32, error) {
	var v uint32
	for i := 0; i < 5; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			if i == 4 && c&0xf0 != 0 {
				return 0, errors.New("a u32 that overflows")
			}
			return v, nil
		}
	}
	return 0, errors.New("a u32 longer than 5 bytes")
}

// s33 skips a signed LEB128 of at most 5 bytes (a heap type).
func (r *wasmReader) s33() error {
	for i := 0; i < 5; i++ {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c < 0x80 {
			return nil
		}
	}
	return errors.New("an s33 longer than 5 bytes")
}

func (r *wasmReader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(n)
	return string(b), err
}

// limits reads a limits type: flags 0 or 2 (shared) then min, flags 1 or
// 3 then min and max.
func (r *wasmReader) limits() (t wasmTable, err error) {
	flags, err := r.byte()
	if err != nil {
		return t, err
	}
	if flags > 3 {
		return t, fmt.Errorf("limits flags %#x", flags)
	}
	if t.min, err = r.u32(); err != nil {
		return t, err
	}
	if flags&1 != 0 {
		t.hasMax = true
		t.max, err = r.u32()
	}
	return t, err
}

// Reference type prefixes of the function-references encoding: (ref null
// ht) and (ref ht), each followed by a heap type.
const (
	refNullable    = 0x63
	refNonNullable = 0x64
)

// valueType skips a value type: one byte, or a prefix and a heap type.
func (r *wasmReader) valueType() error {
	c, err := r.byte()
	if err != nil {
		return err
	}
	if c == refNullable || c == refNonNullable {
		return r.s33()
	}
	return nil
}

// table reads a table type. A table with an initial value (0x40 0x00
// tabletype expr) is followed by a constant expression this reader does not
// parse: it reports that through more == false, and the caller reads no
// further.
func (r *wasmReader) table() (t wasmTable, more bool, err error) {
	c, err := r.byte()
	if err != nil {
		return t, false, err
	}
	more = true
	if c == 0x40 {
		if c, err = r.byte(); err != nil {
			return t, false, err
		}
		if c != 0 {
			return t, false, fmt.Errorf("table prefix 0x40 %#x", c)
		}
		more = false
		if c, err = r.byte(); err != nil {
			return t, false, err
		}
	}
	if c == refNullable || c == refNonNullable {
		if err := r.s33(); err != nil {
			return t, false, err
		}
	}
	t, err = r.limits()
	return t, more, err
}

// Section and import kinds of the binary format.
const (
	sectionImport = 2
	sectionTable  = 4

	importFunc   = 0
	importTable  = 1
	importMemory = 2
	importGlobal = 3
	importTag    = 4
)

// readTables reads the tables a module imports and defines from its
// binary. It reads the import and table sections and skips the others by
// their sizes; anything it cannot read is an error, never a guess.
func readTables(wasm []byte) (wasmTables, error) {
	var ts wasmTables
	r := &wasmReader{b: wasm}
	if head, err := r.bytes(8); err != nil || string(head) != "\x00asm\x01\x00\x00\x00" {
		return ts, errors.New("not a WebAssembly 1 binary")
	}
	for !r.done() {
		id, err := r.byte()
		if err != nil {
			return ts, err
		}
		size, err := r.u32()
		if err != nil {
			return ts, fmt.Errorf("section %d: %w", id, err)
		}
		body, err := r.bytes(size)
		if err != nil {
			return ts, fmt.Errorf("section %d of %d B: %w", id, size, err)
		}
		switch id {
		case sectionImport:
			if ts.imported == "" {
				if ts.imported, err = readImportedTable(&wasmReader{b: body}); err != nil {
					return ts, fmt.Errorf("import section: %w", err)
				}
			}
		case sectionTable:
			s := &wasmReader{b: body}
			n, err := s.u32()
			if err != nil {
				return ts, fmt.Errorf("table section: %w", err)
			}
			for i := uint32(0); i < n; i++ {
				t, more, err := s.table()
				if err != nil {
					return ts, fmt.Errorf("table section, table %d: %w", i, err)
				}
				ts.defined = append(ts.defined, t)
				if !more {
					if i+1 < n {
						return ts, fmt.Errorf("table section: table %d has an initial value and %d tables follow it", i, n-i-1)
					}
					break
				}
			}
		}
	}
	return ts, nil
}

// readImportedTable is the first table an import section imports, as
// module.name, or "" when it imports none.
func readImportedTable(r *wasmReader) (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	for i := uint32(0); i < n; i++ {
		mod, err := r.name()
		if err != nil {
			return "", fmt.Errorf("import %d: %w", i, err)
		}
		name, err := r.name()
		if err != nil {
			return "", fmt.Errorf("import %d: %w", i, err)
		}
		kind, err := r.byte()
		if err != nil {
			return "", fmt.Errorf("import %d: %w", i, err)
		}
		switch kind {
		case importTable:
			return mod + "." + name, nil
		case importFunc:
			_, err = r.u32()
		case importMemory:
			_, err = r.limits()
		case importGlobal:
			if err = r.valueType(); err == nil {
				_, err = r.byte() // mutability
			}
		case importTag:
			if _, err = r.byte(); err == nil { // attribute
				_, err = r.u32()
			}
		default:
			err = fmt.Errorf("import kind %#x", kind)
		}
		if err != nil {
			return "", fmt.Errorf("import %d (%s.%s): %w", i, mod, name, err)
		}
	}
	return "", nil
}

// checkTables refuses a module that imports a table (the host provides
// none), defines more than one, or defines one of more than maxEntries
// entries. wasm is the binary wazero compiled.
func checkTables(wasm []byte, maxEntries uint32) error {
	ts, err := readTables(wasm)
	if err != nil {
		return fmt.Errorf("its tables could not be read: %w", err)
	}
	if ts.imported != "" {
		return fmt.Errorf("it imports table %s; a guest defines its own", ts.imported)
	}
	if len(ts.defined) > 1 {
		return fmt.Errorf("it defines %d tables; a guest has at most one", len(ts.defined))
	}
	for _, t := range ts.defined {
		if t.min > maxEntries {
			return fmt.Errorf("it declares a table of %d entries (%d B of host memory); the host allows at most %d",
				t.min, uint64(t.min)*tableEntryBytes, maxEntries)
		}
	}
	return nil
}

// tableEntryBytes is what one table entry costs the host in wazero.
const tableEntryBytes = 8
