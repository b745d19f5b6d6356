package wasmhost

import (
	"errors"
	"fmt"
	"math"
)

// A module's binary is walked before wazero sees it. wazero's decoder is not
// hardened against hostile bytes: it makes each vector as long as the count
// it reads before checking that the bytes are there (a count near 2^32 in a
// 24-byte module is a fatal out-of-memory error of the whole process, which
// no recover catches), reads a section past its declared end before
// comparing the two, and allocates 8 bytes for each local a function
// declares, up to 2^32 - 1 of them. readModule reads every section as
// wazero's decoder does, in the same framing, and refuses a module whose
// vectors' counts cannot fit in what is left of their sections, each element
// taking at least the bytes the smallest valid one of its kind takes: what
// wazero then allocates decoding the module is bounded by the module's size.
// Locals are counted, for checkLocals to bound, and each function body's
// control-flow points, for checkControl (see body.go). The walk validates
// nothing wazero validates; it accepts every module wazero decodes that is
// valid.

// wasmModule is what the walk of a module finds.
type wasmModule struct {
	tables wasmTables
	// memories are the module's own memories, from its memory section, in
	// 64 KiB pages.
	memories []wasmTable
	// otherImport is the first global or tag the module imports, as
	// "global module.name"; "" when it imports none.
	otherImport string
	// importedFuncs is how many functions the module imports: the index
	// of its first own function.
	importedFuncs uint32
	// locals is how many locals the module's functions declare in all;
	// mostLocals the most one of them declares, and mostLocalsFunc that
	// function's index.
	locals, mostLocals uint64
	mostLocalsFunc     uint32
	// mostControl is the most control-flow points (see bodyControl) a
	// function has, and mostControlFunc that function's index;
	// mostControlLocals the most a function's points times the square of
	// its locals and parameters make, and mostControlLocalsFunc that
	// function's index. controlCost sums what the compile of each function
	// costs (see maxModuleControlCost).
	controlCost, mostControl, mostControlLocals uint64
	mostControlFunc, mostControlLocalsFunc      uint32
	// typeParams is how many parameters each type has; funcTypes the type
	// of each of the module's own functions.
	typeParams, funcTypes []uint32
	// unread is why the walk could not read the first body it could not
	// read to its end; wazero refuses such a module.
	unread error
}

// signed skips a signed LEB128 of at most n bytes; its value is wazero's
// to check.
func (r *wasmReader) signed(n int, what string) error {
	for i := 0; i < n; i++ {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c < 0x80 {
			return nil
		}
	}
	return fmt.Errorf("%s longer than %d bytes", what, n)
}

// count reads the length of a vector whose elements take at least min
// bytes each, and refuses one that cannot fit in the bytes left: wazero
// makes the vector before it reads an element.
func (r *wasmReader) count(what string, min uint64) (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, fmt.Errorf("the number of %s: %w", what, err)
	}
	if left := r.left(); uint64(n)*min > left {
		return 0, fmt.Errorf("%d %s cannot fit in the %d B left (each takes at least %d B)", n, what, left, min)
	}
	return n, nil
}

// blob reads a length and as many bytes (a name, a data segment's bytes),
// refusing a length past the bytes left: wazero makes the slice first.
func (r *wasmReader) blob(what string) ([]byte, error) {
	n, err := r.u32()
	if err != nil {
		return nil, fmt.Errorf("the length of %s: %w", what, err)
	}
	if left := r.left(); uint64(n) > left {
		return nil, fmt.Errorf("%s of %d B cannot fit in the %d B left", what, n, left)
	}
	return r.bytes(n)
}

var sectionNames = [...]string{"custom", "type", "import", "function", "table", "memory", "global", "export", "start",
	"element", "code", "data", "data count", "tag"}

func sectionName(id byte) string {
	if int(id) < len(sectionNames) {
		return sectionNames[id] + " section"
	}
	return fmt.Sprintf("section %d", id)
}

// vector reads a count of elements of at least min bytes each and then the
// elements, naming the one that fails.
func vector(r *wasmReader, what string, min uint64, element func(i uint32) error) error {
	n, err := r.count(what, min)
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if err := element(i); err != nil {
			return fmt.Errorf("%s[%d]: %w", what, i, err)
		}
	}
	return nil
}

// The fewest bytes an element of each vector takes in a valid module: what
// a count is checked against.
const (
	minType         = 2 // an empty recursion group: 0x4e and a count
	minFuncType     = 3 // 0x60 and two empty vectors
	minImport       = 5 // a module name of one byte (wazero refuses an empty one), an empty name, a kind and an index
	minTable        = 3 // a reference type, limits flags and a minimum
	minMemory       = 2 // limits flags and a minimum
	minGlobal       = 5 // a value type, its mutability and a constant expression
	minExport       = 3 // an empty name, a kind and an index
	minElement      = 3 // mode 1 or 3, an element kind and an empty vector
	minElementExpr  = 3 // a constant expression: an instruction, its immediate and end
	minCode         = 3 // a size, an empty vector of locals and end
	minLocalDecl    = 2 // a count and a value type
	minData         = 2 // mode 1 and an empty vector
	minTag          = 2 // an attribute and a type index
	minNameAssoc    = 2 // an index and an empty name
	minIndirectName = 2 // a function index and an empty vector of names
)

// readSection reads the body of a section.
func (m *wasmModule) readSection(id byte, s *wasmReader) error {
	switch id {
	case sectionCustom:
		name, err := s.name()
		if err != nil {
			return err
		}
		if name == "name" {
			return readNames(s)
		}
		s.off = len(s.b)
	case sectionType:
		return vector(s, "types", minType, func(uint32) error {
			c, err := s.byte()
			if err != nil {
				return err
			}
			if c == 0x4e { // a recursion group
				return vector(s, "types of a recursion group", minFuncType, func(uint32) error { return m.funcType(s) })
			}
			s.off--
			return m.funcType(s)
		})
	case sectionImport:
		return m.readImports(s)
	case sectionFunction:
		return vector(s, "functions", 1, func(uint32) error {
			t, err := s.u32()
			m.funcTypes = append(m.funcTypes, t)
			return err
		})
	case sectionTable:
		return vector(s, "tables", minTable, func(uint32) error {
			t, err := s.table()
			m.tables.defined = append(m.tables.defined, t)
			return err
		})
	case sectionMemory:
		return vector(s, "memories", minMemory, func(uint32) error {
			t, err := s.limits()
			m.memories = append(m.memories, t)
			return err
		})
	case sectionGlobal:
		return vector(s, "globals", minGlobal, func(uint32) error {
			if err := s.valueType(); err != nil {
				return err
			}
			if _, err := s.byte(); err != nil { // mutability
				return err
			}
			return s.constExpr()
		})
	case sectionExport:
		return vector(s, "exports", minExport, func(uint32) error {
			if _, err := s.name(); err != nil {
				return err
			}
			if _, err := s.byte(); err != nil { // kind
				return err
			}
			_, err := s.u32()
			return err
		})
	case sectionStart, sectionDataCount:
		_, err := s.u32()
		return err
	case sectionElement:
		return vector(s, "element segments", minElement, func(uint32) error { return s.element() })
	case sectionCode:
		return vector(s, "function bodies", minCode, func(i uint32) error { return m.readCode(s, i) })
	case sectionData:
		return vector(s, "data segments", minData, func(uint32) error { return s.data() })
	case sectionTag:
		return vector(s, "tags", minTag, func(uint32) error {
			if _, err := s.byte(); err != nil { // attribute
				return err
			}
			_, err := s.u32()
			return err
		})
	default:
		return errors.New("an unknown section")
	}
	return nil
}

// valueTypes skips a vector of value types, of one byte at least each, and
// returns how many there are.
func (r *wasmReader) valueTypes(what string) (uint32, error) {
	n, err := r.count(what, 1)
	for i := uint32(0); i < n && err == nil; i++ {
		err = r.valueType()
	}
	return n, err
}

// funcType reads a function type, 0x60, its parameters and its results,
// and keeps how many parameters it has.
func (m *wasmModule) funcType(r *wasmReader) error {
	c, err := r.byte()
	if err != nil {
		return err
	}
	if c != 0x60 {
		return fmt.Errorf("a function type starting %#x", c)
	}
	params, err := r.valueTypes("parameters")
	if err != nil {
		return err
	}
	m.typeParams = append(m.typeParams, params)
	_, err = r.valueTypes("results")
	return err
}

// constExpr skips a constant expression up to its end, knowing the
// instructions wazero's decoder knows (the extended-const ones included,
// which it refuses without that feature) and refusing any other.
func (r *wasmReader) constExpr() error {
	for {
		op, err := r.byte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0b: // end
			return nil
		case 0x41: // i32.const
			err = r.signed(5, "an s32")
		case 0x42: // i64.const
			err = r.signed(10, "an s64")
		case 0x43: // f32.const
			_, err = r.bytes(4)
		case 0x44: // f64.const
			_, err = r.bytes(8)
		case 0x23, 0xd2: // global.get, ref.func
			_, err = r.u32()
		case 0xd0: // ref.null: funcref, externref, exnref or a type index
			var c byte
			if c, err = r.byte(); err == nil && c != 0x70 && c != 0x6f && c != 0x69 {
				r.off--
				_, err = r.u32()
			}
		case 0xfd: // v128.const
			var c byte
			if c, err = r.byte(); err == nil {
				if c != 0x0c {
					return fmt.Errorf("vector instruction %#x in a constant expression", c)
				}
				_, err = r.bytes(16)
			}
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // i32 and i64 add, sub, mul
		default:
			return fmt.Errorf("instruction %#x in a constant expression", op)
		}
		if err != nil {
			return err
		}
	}
}

// element skips an element segment of any of the eight modes.
func (r *wasmReader) element() error {
	mode, err := r.u32()
	if err != nil {
		return err
	}
	if mode > 7 {
		return fmt.Errorf("mode %d", mode)
	}
	if mode == 2 || mode == 6 { // a table index
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	if mode&1 == 0 { // active: an offset
		if err := r.constExpr(); err != nil {
			return err
		}
	}
	if mode != 0 && mode != 4 { // an element kind (0x00), or a reference type
		if err := r.valueType(); err != nil {
			return err
		}
	}
	if mode < 4 {
		return vector(r, "function indices", 1, func(uint32) error { _, err := r.u32(); return err })
	}
	return vector(r, "expressions", minElementExpr, func(uint32) error { return r.constExpr() })
}

// data skips a data segment: active (mode 0, or 2 with a memory index) or
// passive (1), then its bytes.
func (r *wasmReader) data() error {
	mode, err := r.u32()
	if err != nil {
		return err
	}
	if mode > 2 {
		return fmt.Errorf("mode %d", mode)
	}
	if mode == 2 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	if mode != 1 {
		if err := r.constExpr(); err != nil {
			return err
		}
	}
	_, err = r.blob("its bytes")
	return err
}

// readCode reads the size of function body i and its locals, which must
// fit in it, and counts the control-flow points of its instructions. A
// body whose instructions the walk cannot read to their end is counted up
// to there and left to wazero, whose validation refuses it before
// compiling anything.
func (m *wasmModule) readCode(r *wasmReader, i uint32) error {
	size, err := r.u32()
	if err != nil {
		return err
	}
	left := r.left()
	body, err := r.bytes(size)
	if err != nil {
		return fmt.Errorf("%d B cannot fit in the %d B left", size, left)
	}
	b := &wasmReader{b: body}
	var locals uint64
	if err := vector(b, "local declarations", minLocalDecl, func(uint32) error {
		n, err := b.u32()
		if err == nil {
			locals += uint64(n)
			err = b.valueType()
		}
		return err
	}); err != nil {
		return err
	}
	m.locals += locals
	if locals > m.mostLocals {
		m.mostLocals, m.mostLocalsFunc = locals, m.importedFuncs+i
	}
	n, err := bodyControl(b)
	if err != nil && m.unread == nil {
		m.unread = fmt.Errorf("function %d: %w", m.importedFuncs+i, err)
	}
	if n > m.mostControl {
		m.mostControl, m.mostControlFunc = n, m.importedFuncs+i
	}
	vars := locals
	if i < uint32(len(m.funcTypes)) && m.funcTypes[i] < uint32(len(m.typeParams)) {
		vars += uint64(m.typeParams[m.funcTypes[i]])
	}
	// Past 2^22 points or 2^20 locals a function is refused whatever the
	// rest: the caps keep the products from overflowing.
	n, vars = min(n, 1<<22), min(vars, 1<<20)
	product := n * vars * vars
	if product > m.mostControlLocals {
		m.mostControlLocals, m.mostControlLocalsFunc = product, m.importedFuncs+i
	}
	m.controlCost = addUpTo(m.controlCost, n*n+product/controlLocalsWeight)
	return nil
}

// addUpTo is a+b, or the largest uint64 if that is less.
func addUpTo(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// readNames reads the "name" section's subsections: the module's name,
// functions' names and locals' names, each of which must fill its size
// exactly (wazero reads them regardless of it), and others, skipped.
func readNames(r *wasmReader) error {
	for !r.done() {
		id, _ := r.byte()
		size, err := r.u32()
		if err != nil {
			return fmt.Errorf("the size of subsection %d: %w", id, err)
		}
		left := r.left()
		body, err := r.bytes(size)
		if err != nil {
			return fmt.Errorf("subsection %d of %d B cannot fit in the %d B left", id, size, left)
		}
		s := &wasmReader{b: body}
		switch id {
		case 0:
			_, err = s.name()
		case 1:
			err = s.nameMap("function names")
		case 2:
			err = vector(s, "functions with local names", minIndirectName, func(uint32) error {
				if _, err := s.u32(); err != nil {
					return err
				}
				return s.nameMap("local names")
			})
		default:
			s.off = len(s.b)
		}
		if err == nil && !s.done() {
			err = fmt.Errorf("%d B after its end", s.left())
		}
		if err != nil {
			return fmt.Errorf("name subsection %d: %w", id, err)
		}
	}
	return nil
}

// nameMap skips a vector of indices and names.
func (r *wasmReader) nameMap(what string) error {
	return vector(r, what, minNameAssoc, func(uint32) error {
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err := r.name()
		return err
	})
}

// Locals cost the host 8 bytes each when wazero decodes a module, and
// compiling a function initialises every one of them. Go guests declare at
// most about 20 in a function and about 10,000 in all.
const (
	// maxFunctionLocals is the most locals one function may declare, as
	// in V8.
	maxFunctionLocals = 50000
	// maxModuleLocals is the most locals a module's functions may declare
	// in all (8 MiB decoded), or one per byte of the module if that is
	// more: without it, functions of 7 bytes declaring 50,000 locals each
	// would cost 400 KiB of host memory apiece.
	maxModuleLocals = 1 << 20
)

// checkLocals refuses a module of size bytes with a function of more than
// maxFunctionLocals locals, or more locals in all than maxModuleLocals and
// its size.
func checkLocals(m wasmModule, size int) error {
	if m.mostLocals > maxFunctionLocals {
		return fmt.Errorf("function %d declares %d locals; the host allows at most %d", m.mostLocalsFunc, m.mostLocals, maxFunctionLocals)
	}
	if limit := max(maxModuleLocals, uint64(size)); m.locals > limit {
		return fmt.Errorf("its functions declare %d locals in all; the host allows at most %d in a module of %d B", m.locals, limit, size)
	}
	return nil
}

// checkControl refuses a module of size bytes with a function of more
// than maxFunctionControl control-flow points, or whose points times the
// square of its locals and parameters make more than
// maxFunctionControlLocals, or whose functions cost more than
// maxModuleControlCost in all (or controlCostPerByte a byte, if that is
// more).
func checkControl(m wasmModule, size int) error {
	if m.mostControl > maxFunctionControl {
		return fmt.Errorf("function %d has %d control-flow points (block, loop, if, else, br, br_if, br_table labels); the host allows at most %d",
			m.mostControlFunc, m.mostControl, maxFunctionControl)
	}
	if m.mostControlLocals > maxFunctionControlLocals {
		return fmt.Errorf("function %d: its control-flow points times the square of its locals and parameters make %d; the host allows at most %d",
			m.mostControlLocalsFunc, m.mostControlLocals, maxFunctionControlLocals)
	}
	if limit := max(maxModuleControlCost, controlCostPerByte*uint64(size)); m.controlCost > limit {
		return fmt.Errorf("its functions' control-flow points squared, plus their points times the square of their locals and parameters over %d, make %d; the host allows at most %d",
			controlLocalsWeight, m.controlCost, limit)
	}
	return nil
}
