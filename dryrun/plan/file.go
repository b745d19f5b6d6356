package plan

import (
	"bufio"
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gzread"
	"github.com/vkrt/vkrt/internal/strictjson"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// FileVersion is the version of the plan file format written by
// [File.MarshalJSON]. Version 2 added a virtual plan's profile (how the
// planned run's need grew, what a run that leaves the plan foresees its
// peak by), version 3 its settled start (the reservations the planned run
// never freed, which a run following them takes in one step), version 4
// exclusive pools in a Sliced layout or an arena's fallback pools (a basic
// plan's, memory.SlicedPool.Exclusive); [DecodeFile] reads versions 1 to
// 4, a version-1 plan being one without a profile, a version-2 plan one
// without a settled start and a version-3 plan one without exclusive
// pools.
const FileVersion = 4

// oldestFileVersion is the oldest version DecodeFile reads.
const oldestFileVersion = 1

// fileMagic is the member that marks a plan file and carries its version.
const fileMagic = "vkrt_plan"

// File is a plan as `vkrt plan` writes it: the layout, the device it was
// made for and the streams it was measured on. In JSON:
//
//	{"vkrt_plan":3,"device":{"alignment":16,"max_page_size":…,"memory_size":…,"sparse_granule":65536},
//	 "traces":["gpt2_train"],"layout":{"Virtual":{"planned_bytes":…,"slots":[size,offset,…],"profile":[ordinal,bytes,…],"settled":[ordinal,bytes]}}}
//
// A virtual plan's slots are two numbers each, so a plan of a stream of
// 200,000 allocations is a few megabytes.
type File struct {
	Device vkruntime.DeviceProperties
	// Granule is the sparse binding granularity of the device model the
	// plan was made on; 0 is a device without sparse residency.
	Granule uint64
	Traces  []string
	Layout  memory.Layout
}

// ErrPlanFile classifies files that are not a plan this version reads.
var ErrPlanFile = errors.New("plan: not a usable plan file")

// DeviceMismatchError is a plan made for another device than the one it is
// used on. It matches ErrPlanFile.
type DeviceMismatchError struct {
	Field     string
	Plan, Run uint64
}

func (e *DeviceMismatchError) Error() string {
	return fmt.Sprintf("plan: the plan was made for a device with %s %d, this one has %d", e.Field, e.Plan, e.Run)
}

func (e *DeviceMismatchError) Is(target error) bool { return target == ErrPlanFile }

type fileDevice struct {
	Alignment     uint64 `json:"alignment"`
	MaxPageSize   uint64 `json:"max_page_size"`
	MemorySize    uint64 `json:"memory_size"`
	SparseGranule uint64 `json:"sparse_granule"`
}

// fileDeviceFields are a plan file's device members, every one required.
var fileDeviceFields = []string{"alignment", "max_page_size", "memory_size", "sparse_granule"}

// UnmarshalJSON reads a plan file's device with its names exact and each
// given once, as the file's own, and all of them there: one left out would
// read as 0, and a plan for another device would pass For's check where
// the run's device has 0 too (no sparse residency, say), or be refused
// for a number the file never gave.
func (d *fileDevice) UnmarshalJSON(data []byte) error {
	if err := strictjson.CheckMembers(data, fileDeviceFields...); err != nil {
		return fmt.Errorf("device: %w", err)
	}
	type plain fileDevice // without this method
	dec := stdjson.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode((*plain)(d)); err != nil {
		return err
	}
	members, err := strictjson.Members(data) // an object: it decoded
	if err != nil {
		return fmt.Errorf("device: %w", err)
	}
	for _, m := range members {
		if string(m.Value) == "null" {
			// Decoded into a number, null left it 0, as a member left
			// out would.
			return fmt.Errorf("device.%s: want a non-negative integer, got null", m.Name)
		}
	}
	for _, want := range fileDeviceFields {
		if !slices.ContainsFunc(members, func(m strictjson.Member) bool { return m.Name == want }) {
			return fmt.Errorf("device: missing field %q", want)
		}
	}
	return nil
}

// MaxFileTraces bounds the runs a plan file names: a plan is made from a
// few runs of one workload, and each name held costs more than its bytes
// in the file (a gzipped file of empty names took 25 bytes of memory a
// byte).
const MaxFileTraces = 1 << 16

// CheckTraceNames says whether a plan file of Runs can name runs of these
// names and still be read back: at most MaxFileTraces of them, and their
// quoted bytes, with the rest of the file's strings (its member names),
// within the memory.MaxLayoutStringBytes that ReadFile takes. Runs checks
// it before it replays anything; a caller that reads its traces first can
// check the names it will give them before the reading. The error matches
// ErrCannotPlan.
func CheckTraceNames(names []string) error {
	if len(names) > MaxFileTraces {
		return fmt.Errorf("%w: %d runs, more than the %d a plan file names", ErrCannotPlan, len(names), MaxFileTraces)
	}
	// A virtual plan with every member the planner writes: the file Runs
	// writes has no other strings.
	f := File{Traces: names, Layout: memory.VirtualLayout(memory.VirtualPlan{PlannedBytes: 1,
		Slots: []memory.VirtualSlot{{Size: 1}}, Profile: []memory.VirtualMark{{Bytes: 1}}, Settled: memory.VirtualMark{Bytes: 1}})}
	data, err := f.MarshalJSON()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCannotPlan, err)
	}
	squeezer := strictjson.Squeezer{MaxStringBytes: maxFileStringBytes}
	if _, err := squeezer.Append(nil, data); err != nil {
		return fmt.Errorf("%w: the names of the %d runs take more than the %d bytes a plan file's strings may hold: give the traces shorter names",
			ErrCannotPlan, len(names), maxFileStringBytes)
	}
	return nil
}

// maxFileStringBytes is the bytes a plan file's strings may hold, all
// together: memory.MaxLayoutStringBytes, a variable so a test need not
// make names of 32 MiB.
var maxFileStringBytes int64 = memory.MaxLayoutStringBytes

type fileJSON struct {
	Version *uint64            `json:"vkrt_plan"`
	Device  *fileDevice        `json:"device"`
	Traces  traceNames         `json:"traces"`
	Layout  stdjson.RawMessage `json:"layout"`
}

// traceNames are a plan file's trace names, at most MaxFileTraces of them.
type traceNames []string

func (n *traceNames) UnmarshalJSON(data []byte) error {
	dec := stdjson.NewDecoder(bytes.NewReader(data))
	open, err := dec.Token()
	switch {
	case err != nil:
		return fmt.Errorf("traces: %w", err)
	case open == nil:
		*n = nil
		return nil
	case open != stdjson.Delim('['):
		return fmt.Errorf("traces: want an array of names, got %q", data[:min(len(data), 40)])
	}
	var names []string
	for dec.More() {
		if len(names) == MaxFileTraces {
			return fmt.Errorf("traces: more than %d names", MaxFileTraces)
		}
		var name *string
		if err := dec.Decode(&name); err != nil {
			return err // unwrapped: the file's decoder names the member
		}
		if name == nil {
			// Decoded into a string, null left it empty: a name no
			// run has, where the file gave none.
			return fmt.Errorf("traces: want a string, got null")
		}
		names = append(names, *name)
	}
	*n = names
	return nil
}

func (f File) MarshalJSON() ([]byte, error) {
	traces, err := stdjson.Marshal(f.Traces)
	if err != nil {
		return nil, err
	}
	layout, err := f.Layout.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b := fmt.Appendf(nil, `{"%s":%d,"device":{"alignment":%d,"max_page_size":%d,"memory_size":%d,"sparse_granule":%d},"traces":`,
		fileMagic, FileVersion, f.Device.Alignment, f.Device.MaxPageSize, f.Device.MemorySize, f.Granule)
	b = append(b, traces...)
	b = append(b, `,"layout":`...)
	b = append(b, layout...)
	return append(b, '}'), nil
}

// IsFile reports whether data starts like a plan file rather than a
// layout: its first 64 bytes past any leading whitespace name the plan
// file's magic member, or its object's first member is one of a plan
// file's (a layout's is the name of a variant), as when a tool rewrote the
// file with its members sorted.
func IsFile(data []byte) bool {
	data = bytes.TrimLeft(data, jsonSpace)
	head := data[:min(len(data), 64)]
	if bytes.Contains(head, []byte(`"`+fileMagic+`"`)) {
		return true
	}
	dec := stdjson.NewDecoder(bytes.NewReader(head))
	if open, err := dec.Token(); err != nil || open != stdjson.Delim('{') {
		return false
	}
	switch name, _ := dec.Token(); name {
	case "device", "traces", "layout":
		return true
	}
	return false
}

// utf8BOM is the byte-order mark some editors put before UTF-8 text.
var utf8BOM = []byte("\xef\xbb\xbf")

// utf16Text says whether data starts as UTF-16 text: a byte-order mark,
// or a NUL in its first two bytes, which JSON's first character in UTF-8
// never is.
func utf16Text(data []byte) bool {
	return bytes.HasPrefix(data, []byte("\xff\xfe")) || bytes.HasPrefix(data, []byte("\xfe\xff")) ||
		(len(data) >= 2 && (data[0] == 0 || data[1] == 0))
}

// DecodeFile reads a plan file: strictly (unknown members, wrong types and
// numbers that do not fit are errors), refusing versions it does not know.
// Every error matches ErrPlanFile. Broken JSON is told where, by the line
// and column (both from 1) and the byte offset (from 0) in data, and
// wraps the *json.SyntaxError of encoding/json.
func DecodeFile(data []byte) (File, error) {
	return decodeFile(data, func(off int64) string { return position(data, off) })
}

// position is where byte off of data is, in words: its line and column,
// counted from 1 in bytes, and its offset.
func position(data []byte, off int64) string {
	off = min(max(off, 0), int64(len(data)))
	head := data[:off]
	line := bytes.Count(head, []byte("\n")) + 1
	column := off - int64(bytes.LastIndexByte(head, '\n'))
	return fmt.Sprintf("line %d, column %d (byte offset %d)", line, column, off)
}

// syntaxOffset is the offset of the byte a *json.SyntaxError refused: its
// Offset counts the bytes read, that one included.
func syntaxOffset(se *stdjson.SyntaxError) int64 { return max(se.Offset-1, 0) }

// decodeFile is DecodeFile naming the place of the byte at offset off of
// data by at(off).
func decodeFile(data []byte, at func(off int64) string) (File, error) {
	if bytes.HasPrefix(data, utf8BOM) {
		// The decoder would name the mark's first byte, as Latin-1: 'ï'.
		return File{}, fmt.Errorf("%w: it starts with a UTF-8 byte-order mark (JSON has none): save it without one", ErrPlanFile)
	}
	if utf16Text(data) {
		// The decoder would name the mark's first byte, as Latin-1 ('ÿ'
		// or 'þ'), or a NUL.
		return File{}, fmt.Errorf("%w: it is UTF-16 text (as PowerShell's > writes it), and JSON is UTF-8: save it as UTF-8", ErrPlanFile)
	}
	if len(bytes.TrimLeft(data, jsonSpace)) == 0 {
		// The decoder says no more than "EOF".
		return File{}, fmt.Errorf("%w: it is empty, no plan in it", ErrPlanFile)
	}
	dec := stdjson.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw fileJSON
	if err := dec.Decode(&raw); err != nil {
		var typeErr *stdjson.UnmarshalTypeError
		// A number that does not fit a number's field; the decoder gives
		// the literal ("number -1"), but not for a number where a name
		// belongs, a value of the wrong type.
		if errors.As(err, &typeErr) && strings.HasPrefix(typeErr.Value, "number ") {
			num := strings.TrimSpace(strings.TrimPrefix(typeErr.Value, "number"))
			return File{}, fmt.Errorf("%w: %w", ErrPlanFile, strictjson.NewNumberError(num, typeErr.Type.String(), typeErr.Field))
		}
		if errors.As(err, &typeErr) {
			// The decoder's words name this package's Go types
			// ("Go struct field fileJSON.device of type plan.plain").
			member := ""
			if typeErr.Field != "" {
				member = typeErr.Field + ": "
			}
			return File{}, fmt.Errorf("%w: %swant %s, got %s", ErrPlanFile, member, jsonKindOf(typeErr.Type), jsonValueOf(typeErr.Value))
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// The decoder says no more than "unexpected EOF".
			return File{}, fmt.Errorf("%w: it ends inside the plan, cut short: %w", ErrPlanFile, err)
		}
		var syntaxErr *stdjson.SyntaxError
		if errors.As(err, &syntaxErr) {
			// The decoder says what, not where: a hand-edited plan of
			// megabytes was searched for "invalid character ','".
			return File{}, fmt.Errorf("%w: at %s: %w", ErrPlanFile, at(syntaxOffset(syntaxErr)), err)
		}
		return File{}, fmt.Errorf("%w: %v", ErrPlanFile, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		end := dec.InputOffset()
		end += int64(len(data[end:]) - len(bytes.TrimLeft(data[end:], jsonSpace)))
		return File{}, fmt.Errorf("%w: data after the plan, at %s", ErrPlanFile, at(end))
	}
	// The decoder takes a name in any case and the last of two: a plan
	// file's names are exact and given once.
	if err := strictjson.CheckMembers(data, fileMagic, "device", "traces", "layout"); err != nil {
		return File{}, fmt.Errorf("%w: %v", ErrPlanFile, err)
	}
	switch {
	case string(bytes.Trim(data, jsonSpace)) == "null":
		// Decoded into a struct, null left it as it was: no member.
		return File{}, fmt.Errorf("%w: want an object, got null", ErrPlanFile)
	case raw.Version == nil && isNull(data, fileMagic):
		// Decoded into a pointer, null left it nil, as no member did.
		return File{}, fmt.Errorf("%w: %s: want a non-negative integer, got null", ErrPlanFile, fileMagic)
	case raw.Version == nil:
		return File{}, fmt.Errorf("%w: no %q member", ErrPlanFile, fileMagic)
	case *raw.Version < oldestFileVersion || *raw.Version > FileVersion:
		return File{}, fmt.Errorf("%w: version %d, this vkrt reads versions %d to %d", ErrPlanFile, *raw.Version, oldestFileVersion, FileVersion)
	case raw.Device == nil && isNull(data, "device"):
		return File{}, fmt.Errorf("%w: device: want an object, got null", ErrPlanFile)
	case raw.Device == nil:
		return File{}, fmt.Errorf("%w: no device", ErrPlanFile)
	case raw.Layout == nil:
		return File{}, fmt.Errorf("%w: no layout", ErrPlanFile)
	}
	var l memory.Layout
	if err := l.UnmarshalJSON(raw.Layout); err != nil {
		return File{}, fmt.Errorf("%w: layout: %w", ErrPlanFile, err)
	}
	if *raw.Version < 4 && hasExclusivePool(l) {
		return File{}, fmt.Errorf("%w: a version-%d plan cannot hold an exclusive pool (version 4 brought it)", ErrPlanFile, *raw.Version)
	}
	if vp, ok := l.Virtual(); ok {
		switch {
		case len(vp.Profile) > 0 && *raw.Version < 2:
			return File{}, fmt.Errorf("%w: a version-%d plan cannot hold a profile (version 2 brought it)", ErrPlanFile, *raw.Version)
		case vp.Settled.Bytes != 0 && *raw.Version < 3:
			return File{}, fmt.Errorf("%w: a version-%d plan cannot hold a settled start (version 3 brought it)", ErrPlanFile, *raw.Version)
		}
	}
	d := raw.Device
	return File{Device: vkruntime.DeviceProperties{Alignment: d.Alignment, MaxPageSize: d.MaxPageSize, MemorySize: d.MemorySize},
		Granule: d.SparseGranule, Traces: raw.Traces, Layout: l}, nil
}

// isNull says whether the object in data, valid JSON, has a member name
// whose value is null.
func isNull(data []byte, name string) bool {
	members, _ := strictjson.Members(data)
	return slices.ContainsFunc(members, func(m strictjson.Member) bool {
		return m.Name == name && string(m.Value) == "null"
	})
}

// jsonKindOf is what a plan file's member of Go type t holds, in JSON's
// words.
func jsonKindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Uint64:
		return "a non-negative integer"
	case reflect.String:
		return "a string"
	case reflect.Struct:
		return "an object"
	case reflect.Slice:
		return "an array"
	}
	return t.Kind().String()
}

// jsonValueOf is the kind of JSON value encoding/json names in a type
// error, with its article.
func jsonValueOf(v string) string {
	switch v {
	case "object", "array":
		return "an " + v
	case "bool":
		return "true or false"
	}
	return "a " + v
}

// hasExclusivePool says whether a Sliced layout, or an arena's fallback,
// has a pool marked exclusive.
func hasExclusivePool(l memory.Layout) bool {
	pools, ok := l.Sliced()
	if a, isArena := l.Arena(); isArena {
		pools, ok = a.Fallback, true
	}
	return ok && slices.ContainsFunc(pools, func(p memory.SlicedPool) bool { return p.Exclusive })
}

// Encode is the plan file's bytes: its JSON and a newline, gzipped when
// compressed. A plan's slots repeat their sizes and offsets, so gzip takes
// a long stream's plan to a small part of it (llama_generate's 143,238
// slots: 2.36 MB, 135 KB gzipped). ReadFile and IsFileHead take either.
//
// A plan that ReadFile would refuse for its size is refused here, as
// ErrPlanFile, not written: more than MaxFileTraces names, more than
// memory.MaxLayoutStringBytes in its strings or memory.MaxLayoutFileBytes
// in all.
func (f File) Encode(compressed bool) ([]byte, error) {
	if len(f.Traces) > MaxFileTraces {
		return nil, fmt.Errorf("%w: it would name %d runs, more than the %d a plan file names", ErrPlanFile, len(f.Traces), MaxFileTraces)
	}
	data, err := f.MarshalJSON()
	if err != nil {
		return nil, err
	}
	squeezer := strictjson.Squeezer{MaxStringBytes: maxFileStringBytes}
	if _, err := squeezer.Append(nil, data); err != nil {
		return nil, fmt.Errorf("%w: %w: a plan's strings are the names of its traces, variants and members", ErrPlanFile, err)
	}
	if int64(len(data)) >= memory.MaxLayoutFileBytes {
		return nil, fmt.Errorf("%w: %w", ErrPlanFile, &gzread.TooLargeError{Limit: memory.MaxLayoutFileBytes})
	}
	data = append(data, '\n')
	if !compressed {
		return data, nil
	}
	return gzread.Pack(data), nil
}

// CompressedName says whether a plan file of that name is written gzipped:
// its name ends in .gz.
func CompressedName(path string) bool { return strings.HasSuffix(path, ".gz") }

// jsonSpace is the whitespace JSON allows before a value.
const jsonSpace = " \t\r\n"

// IsFileHead reports whether the stream r starts as a plan file, gzipped
// or not (see IsFile); it reads the plan's leading whitespace, which Read
// takes too, and at most 64 bytes past it.
func IsFileHead(r io.Reader) bool {
	r, _, err := gzread.Reader(r)
	if err != nil {
		return false
	}
	br := bufio.NewReader(io.LimitReader(r, memory.MaxLayoutFileBytes))
	if SkipSpace(br) != nil {
		return false
	}
	head := make([]byte, 64)
	n, _ := io.ReadFull(br, head)
	return IsFile(head[:n])
}

// SkipSpace reads the JSON whitespace at the head of r, leaving r at the
// first byte past it (or at its end). More whitespace than a plan or
// layout file may hold (memory.MaxLayoutFileBytes) is a
// *gzread.TooLargeError: an endless stream of it (`yes ' '` into a pipe)
// is refused, not read for ever.
func SkipSpace(r *bufio.Reader) error {
	var skipped int64
	for {
		if _, err := r.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		buf, _ := r.Peek(r.Buffered())
		n := len(buf) - len(bytes.TrimLeft(buf, jsonSpace))
		_, _ = r.Discard(n) // n bytes are buffered
		if n < len(buf) {
			return nil
		}
		if skipped += int64(n); skipped > memory.MaxLayoutFileBytes {
			return &gzread.TooLargeError{Limit: memory.MaxLayoutFileBytes}
		}
	}
}

// ReadFile reads and decodes a plan file of at most memory.MaxLayoutFileBytes,
// gzipped or not: a gzipped one is bounded by what it holds, not by its
// compressed size.
func ReadFile(path string) (File, error) {
	f, err := os.Open(path)
	if err != nil {
		return File{}, fmt.Errorf("plan: %w", err)
	}
	defer f.Close()
	return Read(f, path)
}

// Read is ReadFile for a stream already open, a pipe as well as a file,
// named name in errors: it reads r once, front to back. With no name its
// errors start as this package's do, "plan: ". The place of broken JSON
// is counted from where r stood when Read was called.
func Read(r io.Reader, name string) (File, error) {
	named := func(err error) error {
		if name == "" {
			// ": plan: …" named nothing.
			return err
		}
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Path == name {
			// ReadFile's of a directory said it twice: "DIR: plan:
			// read DIR: is a directory".
			return err
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	data, text, err := readBounded(r, memory.MaxLayoutFileBytes)
	if err != nil {
		return File{}, named(err)
	}
	pf, err := decodeFile(data, text.at(data))
	if err != nil {
		return File{}, named(err)
	}
	return pf, nil
}

// readText is what readBounded tells of the text it read, to place an
// error in it.
type readText struct {
	verbatim int64 // the squeezed text's bytes that stand where they stood
	gzipped  bool
}

// at places byte off of data, the squeezed text, in the text read from
// where its reader stood: line, column and byte offset where the text
// up to it was kept as it was (a file vkrt wrote, or any without white
// space before that byte); past that, the byte offset in the squeezed
// text and the bytes around it, to search the file for.
func (t readText) at(data []byte) func(off int64) string {
	return func(off int64) string {
		gunzipped := ""
		if t.gzipped {
			gunzipped = "gunzipped "
		}
		if off < t.verbatim {
			if gunzipped != "" {
				return position(data, off) + " of the gunzipped text"
			}
			return position(data, off)
		}
		off = min(max(off, 0), int64(len(data)))
		near := data[max(off-24, 0):min(off+8, int64(len(data)))]
		return fmt.Sprintf("byte offset %d of the %splan with the white space between its tokens dropped, near %q", off, gunzipped, near)
	}
}

// readBounded reads a plan file's bytes from r, gunzipped if they are
// gzip, refusing more than limit bytes of plan. Every error about the
// bytes matches ErrPlanFile.
func readBounded(r io.Reader, limit int64) ([]byte, readText, error) {
	// Padding is dropped as it is read: it costs neither memory nor
	// decoding.
	squeezer := strictjson.Squeezer{MaxStringBytes: maxFileStringBytes}
	data, gzipped, err := gzread.ReadAllWith(r, limit, squeezer.Append)
	var tooLarge *gzread.TooLargeError
	switch {
	case errors.Is(err, gzread.ErrTrailing):
		return nil, readText{}, fmt.Errorf("%w: data after the plan's gzip stream", ErrPlanFile)
	case errors.Is(err, strictjson.ErrStringBytes):
		return nil, readText{}, fmt.Errorf("%w: %w: a plan's strings are the names of its traces, variants and members", ErrPlanFile, err)
	case errors.Is(err, gzread.ErrUnreadable), errors.As(err, &tooLarge):
		return nil, readText{}, fmt.Errorf("%w: %w", ErrPlanFile, err)
	case err != nil:
		return nil, readText{}, fmt.Errorf("plan: %w", err)
	}
	return data, readText{verbatim: squeezer.Verbatim(), gzipped: gzipped}, nil
}

// For checks that the plan was made for a device like d with sparse
// granule granule, and returns its layout; a *DeviceMismatchError if not.
func (f File) For(d vkruntime.DeviceProperties, granule uint64) (memory.Layout, error) {
	for _, c := range []struct {
		field     string
		plan, run uint64
	}{{"alignment", f.Device.Alignment, d.Alignment}, {"max_page_size", f.Device.MaxPageSize, d.MaxPageSize},
		{"memory_size", f.Device.MemorySize, d.MemorySize}, {"sparse_granule", f.Granule, granule}} {
		if c.plan != c.run {
			return memory.Layout{}, &DeviceMismatchError{Field: c.field, Plan: c.plan, Run: c.run}
		}
	}
	return f.Layout, nil
}

// Runs plans from dry runs of one workload under the Virtual layout on the
// replay device (opts.Device, H200 when zero, with sparse residency): the
// first stream's placement becomes the slots, and the planned memory is
// the most any of the streams needs under them. opts.Trace is ignored. A
// nil stream among them is refused, before anything is replayed, with an
// error matching ErrCannotPlan and trace.ErrNil, and a first stream with
// no allocation (one built by hand; Read refuses it) as ErrCannotPlan: it
// has no placement to give.
func Runs(streams []*trace.Trace, opts Options) (File, error) {
	if len(streams) == 0 {
		return File{}, fmt.Errorf("%w: no stream to plan from", ErrCannotPlan)
	}
	names := make([]string, len(streams))
	for i, t := range streams {
		if t == nil {
			return File{}, fmt.Errorf("%w: stream %d of %d: %w", ErrCannotPlan, i+1, len(streams), trace.ErrNil)
		}
		names[i] = t.Name
	}
	// The file must read back: what its names hold is known before the
	// replays, which it was not to ReadFile until the plan was written.
	if err := CheckTraceNames(names); err != nil {
		return File{}, err
	}
	if err := opts.checkStrength(); err != nil {
		return File{}, err
	}
	// Each run is one stream's, the later ones as the first: a run's
	// need is measured on the first stream it allocates on.
	for _, t := range streams {
		if err := oneStream(t); err != nil {
			return File{}, err
		}
	}
	// (One that fails Check is refused by its replay, below, which checks
	// it: it is checked here only where it has no allocations.)
	if streams[0].Allocations == 0 && streams[0].Check() == nil {
		// A basic plan of it was the Virtual layout with no plan, and
		// the file said it was a plan of the stream; a strong one was
		// refused so.
		return File{}, fmt.Errorf("%w: %s has no allocations", ErrCannotPlan, streams[0].Name)
	}
	device := deviceOrH200(opts.Device)
	ro := replay.Options{Device: device}
	dry, err := replay.Run(streams[0], memory.VirtualLayout(memory.VirtualPlan{}), ro)
	if err != nil {
		return File{}, err
	}
	opts.Trace = streams[0]
	opts.Device = device
	l, err := Derive(dry.Report, opts)
	if err != nil {
		return File{}, err
	}
	vp, ok := l.Virtual()
	if !ok {
		return File{}, fmt.Errorf("%w: %s did not give a virtual plan", ErrCannotPlan, streams[0].Name)
	}
	for _, t := range streams[1:] {
		r, err := replay.Run(t, l, ro)
		if err != nil {
			return File{}, err
		}
		k, _ := measuredVirtual(r.Report)
		vp.PlannedBytes = max(vp.PlannedBytes, k.NeededPeakBytes)
	}
	return File{Device: device, Granule: replay.H200Granule, Traces: names, Layout: memory.VirtualLayout(vp)}, nil
}
