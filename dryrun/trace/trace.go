// Package trace reads and writes allocation streams: one event a line,
//
//	a <id> <bytes> <stream>   allocate <bytes> on <stream>, name it <id>
//	f <id>                    free the allocation named <id>
//
// plain or gzip-compressed. A parsed [Trace] numbers its allocations densely,
// so a replay or a planner keeps per-allocation state in slices.
package trace

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vkrt/vkrt/internal/printable"
)

// Op is the kind of a trace event.
type Op byte

const (
	// OpAlloc reserves Size bytes on Stream.
	OpAlloc Op = 'a'
	// OpFree releases the allocation with the event's Index.
	OpFree Op = 'f'
)

func (o Op) String() string {
	switch o {
	case OpAlloc:
		return "alloc"
	case OpFree:
		return "free"
	}
	return fmt.Sprintf("Op(%d)", byte(o))
}

// Event is one line of an allocation stream.
type Event struct {
	Op Op
	// Index is dense: the n-th allocation of the trace has Index n, and a free
	// carries the Index of the allocation it releases, so a replay keeps its
	// handles in a slice instead of a map.
	Index  int32
	Size   uint64 // bytes asked (allocations only)
	Stream uint32 // allocations only
	Line   int    // 1-based line number in the source; 0 for generated streams
}

// Where names the event in an error: its line in the source, or, in a
// stream with no source (generated, or recorded from a guest's dry run),
// the allocation it makes or frees, counted from 1.
func (e *Event) Where() string {
	switch {
	case e.Line > 0:
		return fmt.Sprintf("line %d", e.Line)
	case e.Op == OpFree:
		return fmt.Sprintf("free of allocation %d", int64(e.Index)+1)
	default:
		return fmt.Sprintf("allocation %d", int64(e.Index)+1)
	}
}

// Trace is a parsed allocation stream.
type Trace struct {
	Name        string
	Events      []Event
	Allocations int
	// checked is the events and allocations Read found sound: Check of
	// the same passes at once (it cost a replay of llama_generate 6 %,
	// redone on every replay). Check itself writes nothing, so traces are
	// replayed concurrently as before.
	checked checkedAs
}

// checkedAs names a trace's events (the slice, by its first element and
// length) and allocations as checked.
type checkedAs struct {
	first     *Event
	n, allocs int
	sound     bool
}

func (t *Trace) as() checkedAs {
	c := checkedAs{n: len(t.Events), allocs: t.Allocations, sound: true}
	if len(t.Events) > 0 {
		c.first = &t.Events[0]
	}
	return c
}

// ErrMalformed classifies every trace parsing error; the typed form is
// *LineError.
var ErrMalformed = errors.New("trace: malformed")

// ErrNil: a nil *Trace where a trace is wanted. Check and everything
// that checks a trace (a replay, a plan) refuse one with it; it is not
// ErrMalformed, as there is no trace to be malformed.
var ErrNil = errors.New("trace: a nil *Trace, no trace at all")

// ErrTruncated: the trace's compressed stream ends before its end, as a
// copy cut short leaves it. It is also ErrMalformed.
var ErrTruncated error = malformedKind("trace: truncated")

// ErrEmpty: the trace holds no events, so there is nothing to replay or
// plan. It is also ErrMalformed.
var ErrEmpty error = malformedKind("trace: empty")

// malformedKind is a kind of malformed trace: it matches ErrMalformed too.
type malformedKind string

func (k malformedKind) Error() string        { return string(k) }
func (k malformedKind) Is(target error) bool { return target == ErrMalformed }

// LineError names the line of a trace that could not be read and why.
type LineError struct {
	Name   string // the trace's name, may be empty
	Path   string // the file it was read from, by ReadFile; the message names it before Name
	Line   int    // 1-based
	Text   string // the offending line, truncated for the message
	Reason string
}

func (e *LineError) Error() string {
	name := e.Name
	if e.Path != "" {
		name = e.Path
	} else if name == "" {
		name = "trace"
	}
	if e.Text == "" {
		return fmt.Sprintf("trace: %s line %d: %s", name, e.Line, e.Reason)
	}
	return fmt.Sprintf("trace: %s line %d: %s: %q", name, e.Line, e.Reason, e.Text)
}

// Is makes a *LineError match ErrMalformed.
func (e *LineError) Is(target error) bool { return target == ErrMalformed }

// maxTraceLine bounds one line so a garbage input cannot make the reader
// buffer without limit; a well-formed line is under 60 bytes.
const maxTraceLine = 4096

// maxCheckedRest bounds what a bad line in a gzipped trace makes Read
// unpack of the rest of the stream, to tell by its checksum whether the
// compressed bytes are damaged: a stream that never ends (`yes 'a 1 1 0' |
// gzip` into a pipe) was read for ever. Past it the line is blamed, as in
// a stream that checks. A variable so a test need not unpack a gigabyte.
var maxCheckedRest int64 = 1 << 30

// maxAllocations keeps dense indices within int32.
const maxAllocations = 1<<31 - 1

// numberReason says why strconv.ParseUint refused a field of a line that
// it parsed into bits bits: a number past the largest it holds is an
// unsigned decimal integer all the same, and was told it was not one.
func numberReason(field string, bits int, err error) string {
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Sprintf("%s does not fit in %d bits (at most %d)", field, bits, uint64(1)<<bits-1)
	}
	if bits == 64 {
		return field + " is not an unsigned decimal integer"
	}
	return fmt.Sprintf("%s is not an unsigned %d-bit decimal integer", field, bits)
}

// Read parses an allocation stream, one event a line:
//
//	a <id> <bytes> <stream>   allocate <bytes>, name it <id>
//	f <id>                    free the allocation named <id>
//
// Ids are unsigned decimal integers unique within the trace. Blank lines and
// lines starting with '#' are skipped. The input may be gzip-compressed (its
// magic bytes are detected). Every malformed line, free of an unknown or
// already freed id, and repeated id is a *LineError naming the line; one
// refused because the trace is UTF-16 text (a byte-order mark or not) or
// its lines end in \r alone says so. The errors name the trace by name,
// or as "trace" where it is empty.
func Read(name string, r io.Reader) (*Trace, error) { return read(name, "", r) }

// read is Read; path, when not empty, is the file the messages name.
func read(name, path string, r io.Reader) (*Trace, error) {
	where := name
	switch {
	case path != "":
		where = path
	case name == "":
		// As a *LineError of no name says it: "trace: empty:  holds no
		// events" and "trace: truncated: : the gzip stream …" named
		// nothing.
		where = "trace"
	}
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(2)
	var src io.Reader = br
	gzipped := isGzip(magic)
	if gzipped {
		zr, err := gzip.NewReader(br)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// A copy cut short within the header's first bytes is cut
			// short as well as one cut short after them.
			return nil, fmt.Errorf("%w: %s: the gzip stream is cut short in its header: %w", ErrTruncated, where, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: gzip header: %w", ErrMalformed, where, err)
		}
		defer zr.Close()
		zr.Multistream(false)
		src = &gzipMembers{br: br, zr: zr}
	}
	rec := &readRecorder{r: src}
	sc := bufio.NewScanner(rec)
	// The scanner's token holds the line's end ("\r\n" at most) as well.
	sc.Buffer(make([]byte, 0, maxTraceLine+2), maxTraceLine+2)
	sc.Split(rec.lines)

	t := &Trace{Name: name}
	// index of each id; live[index] says whether it is still allocated.
	ids := make(map[uint64]int32)
	var live []bool
	line := 0
	fields := make([][]byte, 0, 8)
	// blame blames line for reason, quoting text (none for a line too
	// long to quote).
	blame := func(text []byte, reason string) error {
		s := string(text)
		if len(s) > 80 {
			s = s[:80] + "…"
		}
		lineErr := &LineError{Name: name, Path: path, Line: line, Text: s, Reason: reason}
		// In a gzipped trace a bad line is most often damage to the
		// compressed bytes, which the checksum at the stream's end tells:
		// say so rather than blame the line.
		if gzipped {
			what := fmt.Sprintf("line %d reads %q", line, s)
			if text == nil {
				what = fmt.Sprintf("line %d: %s", line, reason)
			}
			// At most maxCheckedRest of it: past that the line is blamed.
			_, err := io.Copy(io.Discard, io.LimitReader(src, maxCheckedRest))
			switch {
			case errors.Is(err, io.ErrUnexpectedEOF):
				return fmt.Errorf("%w: %s: the gzip stream is cut short; %s: %w", ErrTruncated, where, what, err)
			case err != nil && corruptGzip(err):
				return fmt.Errorf("%w: %s: corrupt compressed data: %s, and the gzip stream fails its check: %w", ErrMalformed, where, what, err)
			}
		}
		return lineErr
	}
	// fail is blame, but a line refused for being text of another
	// encoding or with other line ends is told so (misread).
	fail := func(text []byte, reason string) error {
		if why := misread(text); why != "" {
			reason = why
		}
		return blame(text, reason)
	}
	// commentCRs: a comment line held carriage returns followed by
	// events, as a trace whose lines end in \r alone reads; said if the
	// trace then holds no event.
	commentCRs := false
	// A line too long is blamed as a bad line is: in a gzipped trace it
	// is most often damage too (a block of the file overwritten).
	tooLong := fmt.Sprintf("line longer than %d bytes", maxTraceLine)
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if len(text) > maxTraceLine {
			if crLines(text) {
				return nil, fail(nil, crOnly)
			}
			return nil, fail(nil, tooLong)
		}
		if line == 1 && bytes.HasPrefix(text, utf8BOM) {
			// The event would be told unknown, shown as "\ufeffa 1 …".
			return nil, blame(text, "the trace starts with a UTF-8 byte-order mark: save it without one")
		}
		if line == 1 && (bytes.HasPrefix(text, utf16LEBOM) || bytes.HasPrefix(text, utf16BEBOM)) {
			// As a shell's redirection writes it on Windows: the event
			// was told unknown, shown as "\xff\xfea\x00 \x001\x00 …".
			return nil, blame(text, "the trace is UTF-16 text (it starts with a UTF-16 byte-order mark): save it as UTF-8 or ASCII")
		}
		fields = splitFields(fields[:0], text)
		if len(fields) == 0 {
			continue
		}
		if fields[0][0] == '#' {
			// Only told of a trace of no events: once one is read,
			// its comments are not looked at.
			if !commentCRs && len(t.Events) == 0 {
				commentCRs = crLines(text)
			}
			continue
		}
		switch {
		case len(fields[0]) == 1 && fields[0][0] == byte(OpAlloc):
			if len(fields) != 4 {
				return nil, fail(text, fmt.Sprintf("an allocation needs 3 fields (id, bytes, stream), got %d", len(fields)-1))
			}
			id, err := strconv.ParseUint(string(fields[1]), 10, 64)
			if err != nil {
				return nil, fail(text, numberReason("id", 64, err))
			}
			size, err := strconv.ParseUint(string(fields[2]), 10, 64)
			if err != nil {
				return nil, fail(text, numberReason("bytes", 64, err))
			}
			if size == 0 {
				return nil, fail(text, "an allocation of 0 bytes")
			}
			stream, err := strconv.ParseUint(string(fields[3]), 10, 32)
			if err != nil {
				return nil, fail(text, numberReason("stream", 32, err))
			}
			if prev, seen := ids[id]; seen {
				return nil, fail(text, fmt.Sprintf("id %d was already used on line %d", id, t.lineOf(OpAlloc, prev)))
			}
			if t.Allocations == maxAllocations {
				return nil, fail(text, fmt.Sprintf("more than %d allocations", maxAllocations))
			}
			index := int32(t.Allocations)
			ids[id] = index
			live = append(live, true)
			t.Allocations++
			t.Events = append(t.Events, Event{Op: OpAlloc, Index: index, Size: size, Stream: uint32(stream), Line: line})
		case len(fields[0]) == 1 && fields[0][0] == byte(OpFree):
			if len(fields) != 2 {
				return nil, fail(text, fmt.Sprintf("a free needs 1 field (id), got %d", len(fields)-1))
			}
			id, err := strconv.ParseUint(string(fields[1]), 10, 64)
			if err != nil {
				return nil, fail(text, numberReason("id", 64, err))
			}
			index, seen := ids[id]
			if !seen {
				return nil, fail(text, fmt.Sprintf("free of id %d, which was never allocated", id))
			}
			if !live[index] {
				return nil, fail(text, fmt.Sprintf("free of id %d, which line %d already freed", id, t.lineOf(OpFree, index)))
			}
			live[index] = false
			t.Events = append(t.Events, Event{Op: OpFree, Index: index, Line: line})
		default:
			return nil, fail(text, `unknown event, want "a <id> <bytes> <stream>" or "f <id>"`)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			line++
			return nil, fail(nil, tooLong)
		}
		if errors.Is(err, errCRLines) {
			line++
			return nil, fail(nil, crOnly)
		}
		if errors.Is(err, errAfterGzip) {
			return nil, fmt.Errorf("%w: %s: %w, after line %d", ErrMalformed, where, err, line)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: %s: the gzip stream is cut short after line %d: %w", ErrTruncated, where, line, err)
		}
		if corruptGzip(err) {
			return nil, fmt.Errorf("%w: %s: corrupt compressed data after line %d: %w", ErrMalformed, where, line, err)
		}
		var pathErr *fs.PathError
		switch {
		case line == 0 && errors.As(err, &pathErr) && pathErr.Path == where:
			// "trace: reading DIR after line 0: read DIR: is a
			// directory" said the path twice, and of a line none read.
			return nil, fmt.Errorf("trace: %w", err)
		case line == 0:
			return nil, fmt.Errorf("trace: reading %s: %w", where, err)
		}
		return nil, fmt.Errorf("trace: reading %s after line %d: %w", where, line, err)
	}
	if len(t.Events) == 0 {
		if commentCRs {
			return nil, fmt.Errorf("%w: %s holds no events (%s): %s, so a comment took the events after it", ErrEmpty, where, printable.Count(line, "line"), crOnly)
		}
		return nil, fmt.Errorf("%w: %s holds no events (%s)", ErrEmpty, where, printable.Count(line, "line"))
	}
	t.checked = t.as() // every line was checked as it was read
	return t, nil
}

// lineOf is the line of the event op of allocation index, which Read
// has taken: a repeated id or free names the line that came first, which
// the user looks for (the dense index was told, counted from 0, which no
// line of the trace shows). It is sought only for the error.
func (t *Trace) lineOf(op Op, index int32) int {
	for _, e := range t.Events {
		if e.Op == op && e.Index == index {
			return e.Line
		}
	}
	return 0
}

// crOnly says a trace's lines end in a carriage return alone.
const crOnly = `its lines end in a carriage return alone (\r, as classic Mac OS ends them), which ends no line here: end them with \n or \r\n`

// errCRLines: a line past maxTraceLine, as crLines tells it, is a trace
// whose lines end in \r alone.
var errCRLines = errors.New("trace: lines end in \\r alone")

// crLines says whether a line holds a carriage return followed by what
// starts an event or a comment ("\ra ", "\rf ", "\r#"), as a trace whose
// lines end in \r alone reads: its events are one line. Said only of a
// line refused (a comment's text is not looked at, but for a trace that
// holds no event), so no trace Read takes is told so.
func crLines(text []byte) bool {
	for {
		i := bytes.IndexByte(text, '\r')
		if i < 0 {
			return false
		}
		text = bytes.TrimLeft(text[i+1:], " \t")
		if len(text) > 0 && (text[0] == '#' || len(text) > 1 && (text[0] == byte(OpAlloc) || text[0] == byte(OpFree)) && (text[1] == ' ' || text[1] == '\t')) {
			return true
		}
	}
}

// utf16Like says whether a line is ASCII written as UTF-16 with no
// byte-order mark: every other byte a NUL, the others not. No line Read
// takes holds a NUL outside a comment.
func utf16Like(text []byte) bool {
	if len(text) < 2 {
		return false
	}
	for parity := range 2 {
		nul, other := 0, 0
		for i, c := range text {
			switch {
			case i%2 == parity && c == 0:
				nul++
			case i%2 != parity && c != 0:
				other++
			}
		}
		if nul == (len(text)+1-parity)/2 && other == len(text)-nul {
			return true
		}
	}
	return false
}

// misread says why a refused line is text Read cannot take as it stands
// (UTF-16, or lines ending in \r alone), or "" where it is not.
func misread(text []byte) string {
	switch {
	case utf16Like(text):
		return "the trace is UTF-16 text with no byte-order mark (a NUL byte by each character): save it as UTF-8 or ASCII"
	case crLines(text):
		return crOnly
	}
	return ""
}

// utf8BOM is the byte-order mark some editors put before UTF-8 text.
var utf8BOM = []byte("\xef\xbb\xbf")

// utf16LEBOM and utf16BEBOM start UTF-16 text, little- and big-endian.
var utf16LEBOM, utf16BEBOM = []byte("\xff\xfe"), []byte("\xfe\xff")

func isGzip(magic []byte) bool { return len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b }

// errAfterGzip: bytes follow the compressed stream that do not start
// another gzip member.
var errAfterGzip = errors.New("data after the end of the gzip stream")

// gzipMembers reads the members of a gzip stream one after another, as
// gzip(1) does, and fails with errAfterGzip on anything else after the
// last: a member's header is 10 bytes, so a few stray bytes would
// otherwise read as a stream cut short.
type gzipMembers struct {
	br *bufio.Reader
	zr *gzip.Reader
}

func (g *gzipMembers) Read(p []byte) (int, error) {
	for {
		n, err := g.zr.Read(p)
		if err != io.EOF {
			return n, err
		}
		if n > 0 {
			return n, nil // the member's end is seen again at the next call
		}
		next, perr := g.br.Peek(2)
		switch {
		case isGzip(next):
			if err := g.zr.Reset(g.br); err != nil {
				return 0, err
			}
			g.zr.Multistream(false)
		case len(next) == 0 && perr == io.EOF:
			return 0, io.EOF
		case perr != nil && perr != io.EOF:
			return 0, perr
		default:
			return 0, errAfterGzip
		}
	}
}

// readRecorder keeps the error its reader failed with, so that the last,
// unterminated piece of a stream that failed is not parsed as a line: a
// gzip stream cut short ends mid-line, and that fragment is the damage,
// not a line to blame.
type readRecorder struct {
	r   io.Reader
	err error
}

func (rr *readRecorder) Read(p []byte) (int, error) {
	n, err := rr.r.Read(p)
	if err != nil && err != io.EOF {
		rr.err = err
	}
	return n, err
}

// lines is bufio.ScanLines, except that an unterminated last line of a
// stream that failed is the failure.
func (rr *readRecorder) lines(data []byte, atEOF bool) (int, []byte, error) {
	if atEOF && rr.err != nil && len(data) > 0 && bytes.IndexByte(data, '\n') < 0 {
		return 0, nil, rr.err
	}
	advance, token, err := bufio.ScanLines(data, atEOF)
	// A line that is too long whatever ends it (dropping a last \r
	// leaves it past maxTraceLine) is told by its carriage returns, if
	// they end lines: the scanner would drop it as too long. (At the end
	// of the stream it is the last line, which Read tells so itself.)
	if advance == 0 && len(data) >= maxTraceLine+2 && crLines(data) {
		return 0, nil, errCRLines
	}
	return advance, token, err
}

// corruptGzip tells a damaged compressed stream from a failing reader.
func corruptGzip(err error) bool {
	var corrupt flate.CorruptInputError
	return errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &corrupt)
}

// splitFields appends the space- or tab-separated fields of b to out; reusing
// out keeps parsing free of per-line allocations.
func splitFields(out [][]byte, b []byte) [][]byte {
	for {
		b = bytes.TrimLeft(b, " \t\r")
		if len(b) == 0 {
			return out
		}
		end := bytes.IndexAny(b, " \t\r")
		if end < 0 {
			return append(out, b)
		}
		out = append(out, b[:end])
		b = b[end:]
	}
}

// ReadFile parses the trace at path; its name is the file name without
// the .gz and .trace suffixes, and its errors name the path.
func ReadFile(path string) (*Trace, error) { return ReadFileProgress(path, nil) }

// ReadFileProgress is ReadFile telling progress, as it reads a regular
// file, how many of its size bytes it has read (the file's, gzipped or
// not), at most once a mebibyte: a trace of millions of allocations takes
// seconds to read.
func ReadFileProgress(path string, progress func(read, size int64)) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if fi, err := f.Stat(); progress != nil && err == nil && fi.Mode().IsRegular() {
		r = &progressReader{r: f, size: fi.Size(), progress: progress}
	}
	return read(NameOf(path), path, r)
}

// progressReader tells progress how far r has been read.
type progressReader struct {
	r          io.Reader
	read, told int64
	size       int64
	progress   func(read, size int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.read += int64(n)
	if p.read-p.told >= 1<<20 || (err == io.EOF && p.read != p.told) {
		p.told = p.read
		p.progress(p.read, p.size)
	}
	return n, err
}

// NameOf is the name a trace file goes by: its base name without the
// .gz and .trace suffixes, or the whole base name where they are all of
// it. A name with characters a terminal acts on (a newline, an escape
// sequence) is written escaped, as Go quotes it, so a file's name cannot
// rewrite the tables it is printed in.
func NameOf(path string) string {
	name := filepath.Base(path)
	name = strings.TrimSuffix(name, ".gz")
	name = strings.TrimSuffix(name, ".trace")
	if name == "" {
		// A file named .trace or .trace.gz: its table row, --json line
		// and errors ("replay:  line 2") named nothing.
		name = filepath.Base(path)
	}
	// Quoted whole, so that a name holding a newline and one holding the
	// two characters \n read apart: escaped alone, they read the same.
	return printable.Label(name)
}

// Check reports whether the trace is one Read could have made: no more
// Allocations than events, every event's index below Allocations, each
// allocated once with a size of at least one byte, and freed at most
// once, after it was allocated. A trace
// built by hand (its fields are exported) is checked before it is
// replayed; one from Read always passes, at once unless its events were
// replaced or appended to since (events Read made, changed in place, are
// not checked again). A nil trace is refused with ErrNil.
func (t *Trace) Check() error {
	if t == nil {
		return ErrNil
	}
	if t.checked == t.as() {
		return nil
	}
	// Each allocation is an event of the trace, so a count past the events
	// is refused before the state of each is made: a trace of one event
	// claiming 2^40 allocations asked for a terabyte, and one claiming
	// more than an int holds panicked.
	if t.Allocations < 0 || t.Allocations > len(t.Events) {
		name := t.Name
		if name != "" {
			name += ": "
		}
		return fmt.Errorf("%w: %s%s in %s", ErrMalformed, name, printable.Count(t.Allocations, "allocation"), printable.Count(len(t.Events), "event"))
	}
	const (
		unseen = iota
		allocated
		freed
	)
	state := make([]uint8, t.Allocations)
	for i, e := range t.Events {
		// The event is named as every other error names it (Where): its
		// line, or the allocation it makes or frees. One whose index or
		// op names no allocation is told by its place, counted from 1.
		bad := func(reason string) error {
			where := e.Where()
			if e.Line <= 0 && (e.Index < 0 || int(e.Index) >= t.Allocations || (e.Op != OpAlloc && e.Op != OpFree)) {
				where = fmt.Sprintf("event %d", i+1)
			}
			if t.Name != "" {
				where = t.Name + " " + where
			}
			return fmt.Errorf("%w: %s: %s", ErrMalformed, where, reason)
		}
		if e.Index < 0 || int(e.Index) >= t.Allocations {
			return bad(fmt.Sprintf("index %d outside the trace's %d allocations", e.Index, t.Allocations))
		}
		switch {
		case e.Op == OpAlloc && e.Size == 0:
			return bad("an allocation of 0 bytes")
		case e.Op == OpAlloc && state[e.Index] != unseen:
			return bad("allocated twice")
		case e.Op == OpAlloc:
			state[e.Index] = allocated
		case e.Op == OpFree && state[e.Index] != allocated:
			return bad("freed while not allocated")
		case e.Op == OpFree:
			state[e.Index] = freed
		default:
			return bad(fmt.Sprintf("unknown op %d", e.Op))
		}
	}
	return nil
}

// PeakLiveBytes is the most requested bytes live at once in the trace,
// saturated at 2^64-1 (Read takes sizes up to it, so two can pass it).
// A trace that fails Check (nil, or built by hand with an index past its
// Allocations, say) has no peak to tell: it is 0, and Check says why, as
// a replay or a plan of it would. A trace from Read always has one.
func (t *Trace) PeakLiveBytes() uint64 {
	if t.Check() != nil {
		// Its indices would be taken as they stand: one past
		// Allocations panicked.
		return 0
	}
	sizes := make([]uint64, t.Allocations)
	var live, peak uint64
	for _, e := range t.Events {
		if e.Op == OpAlloc {
			sizes[e.Index] = e.Size
			sum, carry := bits.Add64(live, e.Size, 0)
			if carry != 0 {
				return math.MaxUint64
			}
			live = sum
			peak = max(peak, live)
		} else {
			live -= sizes[e.Index]
		}
	}
	return peak
}

// WriteTo writes the trace in its text form, ids being the dense indices.
// A trace that fails Check is refused with its error, nothing written:
// its text would not read back (an unknown op was written as a free, a
// negative index as a negative id).
func (t *Trace) WriteTo(w io.Writer) (int64, error) {
	if err := t.Check(); err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(w)
	var n int64
	buf := make([]byte, 0, 64)
	for _, e := range t.Events {
		buf = buf[:0]
		if e.Op == OpAlloc {
			buf = append(buf, "a "...)
			buf = strconv.AppendInt(buf, int64(e.Index), 10)
			buf = append(buf, ' ')
			buf = strconv.AppendUint(buf, e.Size, 10)
			buf = append(buf, ' ')
			buf = strconv.AppendUint(buf, uint64(e.Stream), 10)
		} else {
			buf = append(buf, "f "...)
			buf = strconv.AppendInt(buf, int64(e.Index), 10)
		}
		buf = append(buf, '\n')
		m, err := bw.Write(buf)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}
