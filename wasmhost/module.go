package wasmhost

import (
	"errors"
	"fmt"
)

// A module's binary is read before wazero sees it: see sections.go.
//
// Tables are host memory that the guest's memory limit does not cover:
// wazero allocates 8 bytes per entry of every table a module defines when
// the module is loaded, and table.grow adds more while it runs. The host
// runs guests without the reference-types feature, so a module has at most
// one table and no instruction grows one (table.grow, table.fill and
// table.size are invalid); what is left is the table's initial size, which
// wazero accepts up to 2^27 entries (1 GiB) and which checkTables bounds.
// wazero exposes nothing of a compiled module's tables, so the walk reads
// them too.

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

// left is how many bytes are left to read.
func (r *wasmReader) left() uint64 { return uint64(len(r.b) - r.off) }

func (r *wasmReader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *wasmReader) bytes(n uint32) ([]byte, error) {
	if uint64(n) > r.left() {
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
	b, err := r.blob("a name")
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

// table reads a table type, with the initial value (0x40 0x00 tabletype
// expr) the function-references encoding allows.
func (r *wasmReader) table() (t wasmTable, err error) {
	c, err := r.byte()
	if err != nil {
		return t, err
	}
	initial := c == 0x40
	if initial {
		if c, err = r.byte(); err != nil {
			return t, err
		}
		if c != 0 {
			return t, fmt.Errorf("table prefix 0x40 %#x", c)
		}
		if c, err = r.byte(); err != nil {
			return t, err
		}
	}
	if c == refNullable || c == refNonNullable {
		if err := r.s33(); err != nil {
			return t, err
		}
	}
	if t, err = r.limits(); err == nil && initial {
		err = r.constExpr()
	}
	return t, err
}

// Section and import kinds of the binary format.
const (
	sectionCustom    = 0
	sectionType      = 1
	sectionImport    = 2
	sectionFunction  = 3
	sectionTable     = 4
	sectionMemory    = 5
	sectionGlobal    = 6
	sectionExport    = 7
	sectionStart     = 8
	sectionElement   = 9
	sectionCode      = 10
	sectionData      = 11
	sectionDataCount = 12
	sectionTag       = 13

	importFunc   = 0
	importTable  = 1
	importMemory = 2
	importGlobal = 3
	importTag    = 4
)

// readModule walks a module's binary: its sections in full, the code
// section up to each function's locals, custom sections but "name" by
// their sizes. Anything it cannot read or that does not fit is an error,
// never a guess.
func readModule(wasm []byte) (m wasmModule, err error) {
	r := &wasmReader{b: wasm}
	if head, err := r.bytes(8); err != nil || string(head) != "\x00asm\x01\x00\x00\x00" {
		return m, errors.New("not a WebAssembly 1 binary")
	}
	for !r.done() {
		id, _ := r.byte()
		size, err := r.u32()
		if err != nil {
			return m, fmt.Errorf("%s: its size: %w", sectionName(id), err)
		}
		left := r.left()
		body, err := r.bytes(size)
		if err != nil {
			return m, fmt.Errorf("%s of %d B cannot fit in the %d B left", sectionName(id), size, left)
		}
		s := &wasmReader{b: body}
		if err = m.readSection(id, s); err == nil && !s.done() {
			err = fmt.Errorf("%d B after its end", s.left())
		}
		if err != nil {
			return m, fmt.Errorf("%s: %w", sectionName(id), err)
		}
	}
	return m, nil
}

// readImports reads an import section, keeping the first table imported as
// module.name and counting the functions.
func (m *wasmModule) readImports(r *wasmReader) error {
	return vector(r, "imports", minImport, func(uint32) error {
		mod, err := r.name()
		if err != nil {
			return err
		}
		name, err := r.name()
		if err != nil {
			return err
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		switch kind {
		case importTable:
			if m.tables.imported == "" {
				m.tables.imported = abbreviate([]byte(mod)) + "." + abbreviate([]byte(name))
			}
			_, err = r.table()
		case importFunc:
			m.importedFuncs++
			_, err = r.u32()
		case importMemory:
			_, err = r.limits()
		case importGlobal:
			m.noteOtherImport("global", mod, name)
			if err = r.valueType(); err == nil {
				_, err = r.byte() // mutability
			}
		case importTag:
			m.noteOtherImport("tag", mod, name)
			if _, err = r.byte(); err == nil { // attribute
				_, err = r.u32()
			}
		default:
			err = fmt.Errorf("import kind %#x", kind)
		}
		if err != nil {
			return fmt.Errorf("%s.%s: %w", abbreviate([]byte(mod)), abbreviate([]byte(name)), err)
		}
		return nil
	})
}

// noteOtherImport keeps the first import of a global or a tag, which the
// host provides none of.
func (m *wasmModule) noteOtherImport(kind, mod, name string) {
	if m.otherImport == "" {
		m.otherImport = kind + " " + abbreviate([]byte(mod)) + "." + abbreviate([]byte(name))
	}
}

// checkOtherImports refuses a module that imports a global or a tag (other
// names the first): the host provides functions only, and a guest defines
// its own memory and table.
func checkOtherImports(other string) error {
	if other != "" {
		return fmt.Errorf("it imports %s; the host provides functions only", other)
	}
	return nil
}

// checkTables refuses a module that imports a table (the host provides
// none), defines more than one, or defines one of more than maxEntries
// entries.
func checkTables(ts wasmTables, maxEntries uint32) error {
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

// checkMemories refuses a module whose memory starts larger than the host's
// limit of maxPages, with a MemoryLimitError. wazero refuses it too, but
// rounds both sizes to the same "1 Gi" where they lie close.
func checkMemories(mems []wasmTable, maxPages uint32) error {
	for _, m := range mems {
		if m.min > maxPages {
			return &MemoryLimitError{Pages: m.min, MaxPages: maxPages}
		}
	}
	return nil
}

// wasmPageBytes is the size of a WebAssembly memory page.
const wasmPageBytes = 64 << 10

// tableEntryBytes is what one table entry costs the host in wazero.
const tableEntryBytes = 8
