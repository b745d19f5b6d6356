package plan

import (
	"bufio"
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gzread"
	"github.com/vkrt/vkrt/internal/strictjson"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

func TestPlanFileRoundTripsAndChecksItsDevice(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 3000000 0\na 2 5000000 0\nf 1\nf 2\n")
	pf, err := Runs([]*trace.Trace{tr}, Options{Strength: Strong})
	require.NoError(t, err)
	data, err := pf.MarshalJSON()
	require.NoError(t, err)
	require.True(t, IsFile(data))
	back, err := DecodeFile(data)
	require.NoError(t, err)
	require.True(t, back.Layout.Equal(pf.Layout))
	require.Equal(t, pf.Traces, back.Traces)
	l, err := back.For(replay.H200(), replay.H200Granule)
	require.NoError(t, err)
	_, ok := l.Virtual()
	require.True(t, ok)
	_, err = back.For(replay.H200(), 2<<20)
	var mismatch *DeviceMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.Equal(t, "sparse_granule", mismatch.Field)
	require.ErrorIs(t, err, ErrPlanFile)
}

// A plan file's device with a member left out is refused, naming it: read
// as 0, a plan for the H200 model with no sparse_granule passed For on a
// device without sparse residency, and one with no alignment was refused
// for an alignment of 0 the file never gave.
func TestPlanFileDeviceNeedsEveryMember(t *testing.T) {
	data := strongPlanFile(t, "a 1 3000000 0\na 2 5000000 0\nf 1\nf 2\n")
	var err error
	for _, field := range fileDeviceFields {
		var members map[string]stdjson.RawMessage
		require.NoError(t, stdjson.Unmarshal(data, &members))
		var device map[string]stdjson.RawMessage
		require.NoError(t, stdjson.Unmarshal(members["device"], &device))
		require.Contains(t, device, field)
		delete(device, field)
		members["device"], err = stdjson.Marshal(device)
		require.NoError(t, err)
		without, err := stdjson.Marshal(members)
		require.NoError(t, err)
		_, err = DecodeFile(without)
		require.ErrorIs(t, err, ErrPlanFile, field)
		require.ErrorContains(t, err, `device: missing field "`+field+`"`)
	}
	_, err = DecodeFile([]byte(`{"vkrt_plan":4,"device":{},"traces":[],"layout":"Virtual"}`))
	require.ErrorContains(t, err, `device: missing field "alignment"`)
	_, err = DecodeFile([]byte(`{"vkrt_plan":4,"device":5,"traces":[],"layout":"Virtual"}`))
	require.ErrorIs(t, err, ErrPlanFile)
	require.NotContains(t, err.Error(), "missing field")
}

// A plan file an editor saved with a byte-order mark is refused for it,
// where the decoder named the mark's first byte as 'ï'.
func TestPlanFileWithAByteOrderMarkSaysSo(t *testing.T) {
	data := strongPlanFile(t, "a 1 3000000 0\nf 1\n")
	_, err := DecodeFile(append([]byte("\xef\xbb\xbf"), data...))
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, "byte-order mark")
	require.NotContains(t, err.Error(), "ï")
}

// A plan file in UTF-16 (as PowerShell's > writes it), with a byte-order
// mark or without, says so: the decoder named the mark's first byte as
// 'ÿ', or a NUL.
func TestPlanFileInUTF16SaysSo(t *testing.T) {
	data := strongPlanFile(t, "a 1 3000000 0\nf 1\n")
	le, be := []byte{}, []byte{}
	for _, c := range data {
		le, be = append(le, c, 0), append(be, 0, c)
	}
	for name, doc := range map[string][]byte{
		"little-endian": append([]byte("\xff\xfe"), le...), "big-endian": append([]byte("\xfe\xff"), be...),
		"little-endian, no mark": le, "big-endian, no mark": be,
	} {
		_, err := DecodeFile(doc)
		require.ErrorIs(t, err, ErrPlanFile, name)
		require.ErrorContains(t, err, "UTF-16 text", name)
		_, err = Read(bytes.NewReader(gzread.Pack(doc)), "plan.json.gz")
		require.ErrorIs(t, err, ErrPlanFile, name)
		require.ErrorContains(t, err, "UTF-16 text", name)
	}
}

// strongPlanFile is the plan file of a strong plan of events.
func strongPlanFile(t *testing.T, events string) []byte {
	t.Helper()
	pf, err := Runs([]*trace.Trace{tracetest.Inline(t, events)}, Options{Strength: Strong})
	require.NoError(t, err)
	data, err := pf.MarshalJSON()
	require.NoError(t, err)
	return data
}

// A plan file whose members a tool sorted (jq -S puts "vkrt_plan" last,
// past the first 64 bytes) is still a plan file, not a layout.
func TestPlanFileWithItsMembersReorderedIsStillOne(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 3000000 0\na 2 5000000 0\nf 1\nf 2\n")
	pf, err := Runs([]*trace.Trace{tr}, Options{Strength: Strong})
	require.NoError(t, err)
	data, err := pf.MarshalJSON()
	require.NoError(t, err)
	var members map[string]stdjson.RawMessage
	require.NoError(t, stdjson.Unmarshal(data, &members))
	sorted, err := stdjson.MarshalIndent(members, "", "  ") // encoding/json sorts map keys
	require.NoError(t, err)
	require.True(t, IsFile(sorted), "%s", sorted[:64])
	back, err := DecodeFile(sorted)
	require.NoError(t, err)
	require.True(t, back.Layout.Equal(pf.Layout))

	for _, layout := range []string{`{"Virtual":{"planned_bytes":1}}`, `"virtual"`, `{"Sliced":[]}`, ``, `{`, `[1]`} {
		require.False(t, IsFile([]byte(layout)), layout)
	}
}

// A plan file led by whitespace (an editor's or a tool's indentation,
// longer than the 64 bytes a plan file is told by) is still a plan file,
// plain or gzipped, as Read takes it: it was read as a layout and refused
// for naming "vkrt_plan" and "device".
func TestPlanFileLedByWhitespaceIsStillOne(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 3000000 0\na 2 5000000 0\nf 1\nf 2\n")
	pf, err := Runs([]*trace.Trace{tr}, Options{Strength: Strong})
	require.NoError(t, err)
	data, err := pf.MarshalJSON()
	require.NoError(t, err)
	padded := append([]byte(strings.Repeat(" \n\t\r", 20)), data...)
	_, err = Read(bytes.NewReader(padded), "padded")
	require.NoError(t, err)
	require.True(t, IsFile(padded))
	require.True(t, IsFileHead(bytes.NewReader(padded)))
	require.True(t, IsFileHead(bytes.NewReader(gzread.Pack(padded))), "gzipped")
	require.False(t, IsFileHead(strings.NewReader(strings.Repeat(" ", 100)+`{"Virtual":{"planned_bytes":1}}`)), "a layout led by whitespace")
	require.False(t, IsFileHead(strings.NewReader(strings.Repeat(" ", 100))), "whitespace alone")
}

// A plan file's member names are exact and given once, at its top and in
// its device: a decoder into a struct would take "Alignment" for
// "alignment" and the last of two, so a file edited by hand could say one
// thing and mean another.
func TestPlanFileNamesAreExactAndGivenOnce(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 3000000 0\na 2 5000000 0\nf 1\nf 2\n")
	pf, err := Runs([]*trace.Trace{tr}, Options{Strength: Strong})
	require.NoError(t, err)
	data, err := pf.MarshalJSON()
	require.NoError(t, err)
	edit := func(old, new string) []byte {
		require.Contains(t, string(data), old)
		return []byte(strings.Replace(string(data), old, new, 1))
	}
	for _, c := range []struct {
		file []byte
		want string
	}{
		{edit(`{"vkrt_plan":4,`, `{"vkrt_plan":4,"vkrt_plan":2,`), `field "vkrt_plan" given twice`},
		{edit(`"traces":`, `"layout":"direct","traces":`), `field "layout" given twice`},
		{edit(`"alignment":16,`, `"alignment":16,"alignment":32,`), `device: json: field "alignment" given twice`},
		{edit(`"alignment":`, `"Alignment":`), `device: json: unknown field "Alignment"`},
		{edit(`"device":`, `"Device":`), `unknown field "Device"`},
	} {
		_, err := DecodeFile(c.file)
		require.ErrorIs(t, err, ErrPlanFile)
		require.ErrorContains(t, err, c.want)
	}
}

// FuzzDecodeFile: any input is a plan file that writes back to one
// decoding the same, or an error matching ErrPlanFile.
func FuzzDecodeFile(f *testing.F) {
	f.Add([]byte(`{"vkrt_plan":1,"device":{"alignment":16,"max_page_size":4294967280,"memory_size":150000000000,"sparse_granule":2097152},"traces":["a"],"layout":{"Virtual":{"planned_bytes":4194304,"slots":[3000000,0,5000000,3000000]}}}`))
	f.Add([]byte(`{"vkrt_plan":1,"device":{"alignment":16,"max_page_size":1,"memory_size":1,"sparse_granule":0},"traces":null,"layout":"SubSlices"}`))
	f.Add([]byte(`{"vkrt_plan":2}`))
	f.Add([]byte(`{"vkrt_plan":1,"device":{"alignment":-1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		pf, err := DecodeFile(data)
		if err != nil {
			require.ErrorIs(t, err, ErrPlanFile)
			return
		}
		out, err := pf.MarshalJSON()
		require.NoError(t, err)
		again, err := DecodeFile(out)
		require.NoError(t, err, "%s", out)
		require.True(t, again.Layout.Equal(pf.Layout))
		require.Equal(t, pf.Device, again.Device)
		require.Equal(t, pf.Granule, again.Granule)
		require.Equal(t, len(pf.Traces), len(again.Traces))
	})
}

// Plan files of versions 1 and 2, written before plans carried a profile
// or a settled start, still read; one claiming an older version with what
// came later is refused.
func TestPlanFilesOfOlderVersionsStillRead(t *testing.T) {
	const v1 = `{"vkrt_plan":1,"device":{"alignment":16,"max_page_size":4294967280,"memory_size":150000000000,"sparse_granule":65536},` +
		`"traces":["a"],"layout":{"Virtual":{"planned_bytes":8126464,"slots":[3000000,0,5000000,3014656]}}}`
	back, err := DecodeFile([]byte(v1))
	require.NoError(t, err)
	vp, ok := back.Layout.Virtual()
	require.True(t, ok)
	require.Equal(t, []memory.VirtualSlot{{Size: 3000000, Offset: 0}, {Size: 5000000, Offset: 3014656}}, vp.Slots)
	require.Empty(t, vp.Profile)

	withProfile := strings.Replace(v1, `3014656]`, `3014656],"profile":[0,3014656,1,8126464]`, 1)
	_, err = DecodeFile([]byte(withProfile))
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, "a version-1 plan cannot hold a profile")
	v2 := strings.Replace(withProfile, `"vkrt_plan":1`, `"vkrt_plan":2`, 1)
	back, err = DecodeFile([]byte(v2))
	require.NoError(t, err)
	vp, _ = back.Layout.Virtual()
	require.Equal(t, []memory.VirtualMark{{Ordinal: 0, Bytes: 3014656}, {Ordinal: 1, Bytes: 8126464}}, vp.Profile)
	require.Zero(t, vp.Settled)
	_, err = DecodeFile([]byte(strings.Replace(v1, `"vkrt_plan":1`, `"vkrt_plan":0`, 1)))
	require.ErrorContains(t, err, "version 0, this vkrt reads versions 1 to 4")

	// A settled start came with version 3.
	withSettled := strings.Replace(v2, `8126464]`, `8126464],"settled":[0,3014656]`, 1)
	_, err = DecodeFile([]byte(withSettled))
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, "a version-2 plan cannot hold a settled start")
	back, err = DecodeFile([]byte(strings.Replace(withSettled, `"vkrt_plan":2`, `"vkrt_plan":3`, 1)))
	require.NoError(t, err)
	vp, _ = back.Layout.Virtual()
	require.Equal(t, memory.VirtualMark{Ordinal: 0, Bytes: 3014656}, vp.Settled)

	// Exclusive pools came with version 4, in a Sliced layout and in an
	// arena's fallback.
	for _, layout := range []string{
		`{"Sliced":[{"page_size":4096,"pages":2,"max_slice":null,"grow":true,"exclusive":true}]}`,
		`{"Arena":{"pages":[4096],"slots":[[16,0,0]],"fallback":[{"page_size":4096,"pages":null,"max_slice":null,"exclusive":true}]}}`,
	} {
		v3 := strings.Replace(strings.Replace(v1, `"vkrt_plan":1`, `"vkrt_plan":3`, 1),
			`{"Virtual":{"planned_bytes":8126464,"slots":[3000000,0,5000000,3014656]}}`, layout, 1)
		_, err = DecodeFile([]byte(v3))
		require.ErrorIs(t, err, ErrPlanFile)
		require.ErrorContains(t, err, "a version-3 plan cannot hold an exclusive pool")
		back, err = DecodeFile([]byte(strings.Replace(v3, `"vkrt_plan":3`, `"vkrt_plan":4`, 1)))
		require.NoError(t, err, layout)
		require.JSONEq(t, layout, back.Layout.String())
	}
	// The same layouts without the flag still read as version 3.
	back, err = DecodeFile([]byte(strings.Replace(strings.Replace(v1, `"vkrt_plan":1`, `"vkrt_plan":3`, 1),
		`{"Virtual":{"planned_bytes":8126464,"slots":[3000000,0,5000000,3014656]}}`, `{"Sliced":[{"page_size":4096,"pages":2,"max_slice":null,"grow":true}]}`, 1)))
	require.NoError(t, err)
	require.Equal(t, memory.LayoutSliced, back.Layout.Kind())
}

// Every run a plan is made from is one stream's: a later run that
// allocates on several streams is refused as the first would be, not
// measured by its first stream alone (its other streams' need was left
// out of the planned bytes).
func TestRunsRefusesALaterRunOfSeveralStreams(t *testing.T) {
	first := tracetest.Inline(t, "a 1 1000 0\na 2 2000 0\nf 1\nf 2\n")
	second := tracetest.Inline(t, "a 1 1000 0\na 2 5000000 7\nf 1\nf 2\n")
	_, err := Runs([]*trace.Trace{first, second}, Options{Strength: Strong})
	require.ErrorIs(t, err, ErrCannotPlan)
	require.ErrorContains(t, err, "streams 0 and 7")
}

// spaces is an endless stream of JSON whitespace, as `yes ' '` gives.
type spaces struct{}

var spacesChunk = bytes.Repeat([]byte(" \n"), 32<<10)

func (spaces) Read(p []byte) (int, error) { return copy(p, spacesChunk), nil }

// Whitespace at a file's head counts towards the bound of what a plan or
// layout file may hold: `yes ' ' | vkrt replay --layout /dev/stdin` read
// it for ever.
func TestSkipSpaceIsBounded(t *testing.T) {
	err := SkipSpace(bufio.NewReaderSize(spaces{}, 64<<10))
	var tooLarge *gzread.TooLargeError
	require.ErrorAs(t, err, &tooLarge)
	require.Equal(t, int64(memory.MaxLayoutFileBytes), tooLarge.Limit)

	br := bufio.NewReader(strings.NewReader(" \t\r\n  {\"x\":1}"))
	require.NoError(t, SkipSpace(br))
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	require.Equal(t, `{"x":1}`, string(rest))
	require.NoError(t, SkipSpace(bufio.NewReader(strings.NewReader("  \n"))), "a stream of whitespace alone ends")
}

// A plan file names at most MaxFileTraces runs: a gzipped file of empty
// names took 25 bytes of memory a byte of plan (100 MB of them, 432 KB on
// disk, 2.5 GB), so a gigabyte would take tens. Runs refuses to make a
// plan of more, which no plan file could hold.
func TestPlanFileNamesABoundedNumberOfTraces(t *testing.T) {
	doc := func(n int) []byte {
		names := strings.TrimSuffix(strings.Repeat(`"",`, n), ",")
		return []byte(`{"vkrt_plan":3,"device":{"alignment":16,"max_page_size":4294967280,"memory_size":150000000000,"sparse_granule":65536},"traces":[` +
			names + `],"layout":"Virtual"}`)
	}
	pf, err := DecodeFile(doc(MaxFileTraces))
	require.NoError(t, err)
	require.Len(t, pf.Traces, MaxFileTraces)
	_, err = DecodeFile(doc(MaxFileTraces + 1))
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, "more than")
	_, err = DecodeFile([]byte(`{"vkrt_plan":3,"device":{"alignment":16,"max_page_size":1,"memory_size":1,"sparse_granule":0},"traces":[1],"layout":"Virtual"}`))
	require.ErrorIs(t, err, ErrPlanFile)
	pf, err = DecodeFile([]byte(`{"vkrt_plan":3,"device":{"alignment":16,"max_page_size":1,"memory_size":1,"sparse_granule":0},"traces":null,"layout":"Virtual"}`))
	require.NoError(t, err)
	require.Nil(t, pf.Traces)

	tr := tracetest.Inline(t, "a 1 1000 0\nf 1\n")
	many := make([]*trace.Trace, MaxFileTraces+1)
	for i := range many {
		many[i] = tr
	}
	_, err = Runs(many, Options{Strength: Strong})
	require.ErrorIs(t, err, ErrCannotPlan)
}

// A number where a plan file wants a name is a value of the wrong type,
// not one that does not fit: it read "number  does not fit field traces
// of type string", the number left out.
func TestPlanFileNumberForANameIsTheWrongType(t *testing.T) {
	_, err := DecodeFile([]byte(`{"vkrt_plan":3,"device":{"alignment":16,"max_page_size":1,"memory_size":1,"sparse_granule":0},"traces":[5],"layout":"Virtual"}`))
	require.ErrorIs(t, err, ErrPlanFile)
	require.NotErrorIs(t, err, strictjson.ErrNumberDoesNotFit)
	require.ErrorContains(t, err, "traces: want a string, got a number")

	_, err = DecodeFile([]byte(`{"vkrt_plan":-3,"device":{"alignment":16,"max_page_size":1,"memory_size":1,"sparse_granule":0},"traces":[],"layout":"Virtual"}`))
	require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit)
	require.ErrorContains(t, err, "number -3 does not fit field vkrt_plan")
}

// A value of the wrong type is told in JSON's words, naming the member:
// the decoder's named this package's Go types ("Go struct field
// fileJSON.device of type plan.plain").
func TestPlanFileValueOfTheWrongTypeIsToldInJSONsWords(t *testing.T) {
	device := `"device":{"alignment":16,"max_page_size":1,"memory_size":1,"sparse_granule":0}`
	for doc, want := range map[string]string{
		`{"vkrt_plan":"4",` + device + `,"traces":[],"layout":"Virtual"}`:                                                               `vkrt_plan: want a non-negative integer, got a string`,
		`{"vkrt_plan":true,` + device + `,"traces":[],"layout":"Virtual"}`:                                                              `vkrt_plan: want a non-negative integer, got true or false`,
		`{"vkrt_plan":4,"device":"h200","traces":[],"layout":"Virtual"}`:                                                                `device: want an object, got a string`,
		`{"vkrt_plan":4,"device":[],"traces":[],"layout":"Virtual"}`:                                                                    `device: want an object, got an array`,
		`{"vkrt_plan":4,"device":{"alignment":{},"max_page_size":1,"memory_size":1,"sparse_granule":0},"traces":[],"layout":"Virtual"}`: `device.alignment: want a non-negative integer, got an object`,
		`{"vkrt_plan":4,` + device + `,"traces":[["a"]],"layout":"Virtual"}`:                                                            `traces: want a string, got an array`,
		`[4]`: `usable plan file: want an object, got an array`,
		// Decoded as they were, null took a name "" and a device's
		// member 0.
		`{"vkrt_plan":4,` + device + `,"traces":["a",null],"layout":"Virtual"}`:                                                              `traces: want a string, got null`,
		`{"vkrt_plan":4,"device":{"alignment":16,"max_page_size":null,"memory_size":1,"sparse_granule":0},"traces":[],"layout":"Virtual"}`:   `device.max_page_size: want a non-negative integer, got null`,
		`{"vkrt_plan":4,"device":{"alignment":16,"max_page_size":1,"memory_size":1,"sparse_granule": null },"traces":[],"layout":"Virtual"}`: `device.sparse_granule: want a non-negative integer, got null`,
	} {
		_, err := DecodeFile([]byte(doc))
		require.ErrorIs(t, err, ErrPlanFile, doc)
		require.ErrorContains(t, err, want, doc)
		require.NotContains(t, err.Error(), "Go struct", doc)
	}
}

// A plan file cut short says so, whatever byte it ends at: the decoder
// said "unexpected EOF" and nothing more.
func TestPlanFileCutShortSaysSo(t *testing.T) {
	pf := File{Device: replay.H200(), Granule: replay.H200Granule, Traces: []string{"t"},
		Layout: memory.VirtualLayout(memory.VirtualPlan{PlannedBytes: 1 << 20, Slots: []memory.VirtualSlot{{Size: 256, Offset: 0}}})}
	data, err := pf.Encode(false)
	require.NoError(t, err)
	for _, n := range []int{1, 20, len(data) / 2, len(data) - 2} {
		_, err := DecodeFile(data[:n])
		require.ErrorIs(t, err, ErrPlanFile, "%q", data[:n])
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "%q", data[:n])
		require.ErrorContains(t, err, "cut short", "%q", data[:n])
	}
}

// Runs makes no plan its file could not name: names past what a plan
// file's strings may hold (memory.MaxLayoutStringBytes, lowered here) are
// refused before any replay, where the plan was made and its file then
// refused by ReadFile. Names that pass CheckTraceNames read back.
func TestRunsRefusesNamesNoPlanFileCanHoldBeforeReplaying(t *testing.T) {
	defer func(was int64) { maxFileStringBytes = was }(maxFileStringBytes)
	maxFileStringBytes = 4096
	// The largest name CheckTraceNames takes, one of two.
	fits := sort.Search(4096, func(n int) bool {
		return CheckTraceNames([]string{"a", strings.Repeat("n", n+1)}) != nil
	})
	require.Greater(t, fits, 3000, "the file's other strings take under a kilobyte")
	require.Less(t, fits, 4096)

	stream := func(name string) *trace.Trace {
		tr := tracetest.Inline(t, "a 1 1000 0\nf 1\n")
		tr.Name = name
		return tr
	}
	pf, err := Runs([]*trace.Trace{stream("a"), stream(strings.Repeat("n", fits))}, Options{Strength: Strong})
	require.NoError(t, err)
	data, err := pf.Encode(false)
	require.NoError(t, err)
	back, err := Read(bytes.NewReader(data), "plan.json")
	require.NoError(t, err)
	require.Len(t, back.Traces[1], fits)
	_, err = Read(bytes.NewReader(bytes.Replace(data, []byte(`"a"`), []byte(`"aa"`), 1)), "plan.json")
	require.ErrorIs(t, err, strictjson.ErrStringBytes, "one byte more is past what ReadFile takes")

	// A device too small for the stream: a replay fails if one starts.
	small := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 1 << 20, MemorySize: 100}
	_, err = Runs([]*trace.Trace{stream("a"), stream(strings.Repeat("n", fits+1))}, Options{Strength: Strong, Device: small})
	require.ErrorIs(t, err, ErrCannotPlan)
	require.ErrorContains(t, err, "shorter names")
	require.ErrorIs(t, CheckTraceNames(make([]string, MaxFileTraces+1)), ErrCannotPlan)
}

// Encode writes no plan ReadFile would refuse for its size: a File built
// by hand with more names than a plan file holds, or more bytes in its
// strings (memory.MaxLayoutStringBytes, lowered here), was written and
// then refused when read back.
func TestEncodeRefusesAPlanFileThatWouldNotReadBack(t *testing.T) {
	defer func(was int64) { maxFileStringBytes = was }(maxFileStringBytes)
	maxFileStringBytes = 4096
	pf := File{Device: replay.H200(), Granule: replay.H200Granule, Layout: memory.VirtualLayout(memory.VirtualPlan{PlannedBytes: 1 << 20})}
	for _, compressed := range []bool{false, true} {
		pf.Traces = make([]string, MaxFileTraces+1)
		_, err := pf.Encode(compressed)
		require.ErrorIs(t, err, ErrPlanFile)
		require.ErrorContains(t, err, "65537 runs")

		pf.Traces = []string{strings.Repeat("n", 4096)}
		_, err = pf.Encode(compressed)
		require.ErrorIs(t, err, ErrPlanFile)
		require.ErrorIs(t, err, strictjson.ErrStringBytes)

		pf.Traces = []string{strings.Repeat("n", 3000)}
		data, err := pf.Encode(compressed)
		require.NoError(t, err)
		back, err := Read(bytes.NewReader(data), "plan.json")
		require.NoError(t, err)
		require.Equal(t, pf.Traces, back.Traces)
	}
}

// An empty plan file, or one of white space alone, says it is empty: the
// decoder's "EOF" was all the error said.
func TestAnEmptyPlanFileSaysSo(t *testing.T) {
	for _, data := range []string{"", " \n\t\r\n"} {
		_, err := DecodeFile([]byte(data))
		require.ErrorIs(t, err, ErrPlanFile)
		require.ErrorContains(t, err, "it is empty", "%q", data)
		_, err = Read(bytes.NewReader(gzread.Pack([]byte(data))), "plan.json.gz")
		require.ErrorContains(t, err, "plan.json.gz: plan: not a usable plan file: it is empty", "%q gzipped", data)
	}
}

// A member given as null, or a file of null alone, says so: they read as
// members left out ("no \"vkrt_plan\" member", "no device"), which the
// file had.
func TestPlanFileMemberOfNullSaysSo(t *testing.T) {
	dev := `"device":{"alignment":16,"max_page_size":4294967280,"memory_size":150000000000,"sparse_granule":65536}`
	for doc, want := range map[string]string{
		`{"vkrt_plan":null,` + dev + `,"traces":[],"layout":"Virtual"}`: `vkrt_plan: want a non-negative integer, got null`,
		`{"vkrt_plan":4,"device":null,"traces":[],"layout":"Virtual"}`:  `device: want an object, got null`,
		` null `: `want an object, got null`,
		`{` + dev + `,"traces":[],"layout":"Virtual"}`:   `no "vkrt_plan" member`,
		`{"vkrt_plan":4,"traces":[],"layout":"Virtual"}`: `no device`,
	} {
		_, err := DecodeFile([]byte(doc))
		require.ErrorIs(t, err, ErrPlanFile, doc)
		require.EqualError(t, err, "plan: not a usable plan file: "+want, doc)
	}
}

func TestReadWithNoNameSaysPlan(t *testing.T) {
	for _, in := range []io.Reader{strings.NewReader(`{"vkrt_plan":99}`), strings.NewReader(""),
		iotest.ErrReader(errors.New("disk on fire"))} {
		_, err := Read(in, "")
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), "plan: "), "%q", err)
	}
	_, err := Read(strings.NewReader(`{"vkrt_plan":99}`), "p.json")
	require.ErrorIs(t, err, ErrPlanFile)
	require.True(t, strings.HasPrefix(err.Error(), "p.json: plan: "), "%q", err)
}

// Broken JSON in a plan file is told where: the decoder said what it
// refused ("invalid character ','") and nothing of where. DecodeFile
// counts in the bytes it is given; Read in the text it read, gunzipped,
// where no white space before the fault was dropped as it read, and says
// which bytes are around the fault where some was.
func TestPlanFileOfBrokenJSONSaysWhere(t *testing.T) {
	pf := File{Device: replay.H200(), Granule: replay.H200Granule, Traces: []string{"t"},
		Layout: memory.VirtualLayout(memory.VirtualPlan{PlannedBytes: 1 << 20, Slots: []memory.VirtualSlot{{Size: 256, Offset: 0}}})}
	good, err := pf.MarshalJSON()
	require.NoError(t, err)
	broken := bytes.Replace(good, []byte(`"traces":`), []byte(`"traces":,`), 1)
	off := bytes.Index(broken, []byte(`:,`)) + 1
	var indented bytes.Buffer
	require.NoError(t, stdjson.Indent(&indented, good, "", "  "))
	lines := strings.Split(indented.String(), "\n")
	for i, l := range lines {
		if strings.Contains(l, `"traces"`) {
			lines[i] = "  \"traces\": [\"a\" \"b\"],"
		}
	}
	pretty := []byte(strings.Join(lines, "\n"))
	prettyAt := fmt.Sprintf("line %d, column 18 (byte offset %d)", slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, `"traces"`) })+1,
		bytes.Index(pretty, []byte(`"b"`)))
	for _, c := range []struct {
		doc  string
		data []byte
		want string
	}{
		{"one line", broken, fmt.Sprintf("at line 1, column %d (byte offset %d): invalid character ','", off+1, off)},
		{"indented", pretty, "at " + prettyAt + `: invalid character '"' after array element`},
		{"trailing", append(slices.Clip(good), "\n\n  x"...), fmt.Sprintf("data after the plan, at line 3, column 3 (byte offset %d)", len(good)+4)},
	} {
		_, err := DecodeFile(c.data)
		require.ErrorIs(t, err, ErrPlanFile, c.doc)
		require.ErrorContains(t, err, c.want, c.doc)
		if c.doc != "trailing" {
			var se *stdjson.SyntaxError
			require.ErrorAs(t, err, &se, c.doc)
		}
	}

	// Read: a file as vkrt writes it, gzipped or not, is placed as
	// DecodeFile places it.
	_, err = Read(bytes.NewReader(broken), "p.json")
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, fmt.Sprintf("p.json: plan: not a usable plan file: at line 1, column %d (byte offset %d): invalid character", off+1, off))
	_, err = Read(bytes.NewReader(gzread.Pack(broken)), "p.json.gz")
	require.ErrorContains(t, err, fmt.Sprintf("at line 1, column %d (byte offset %d) of the gunzipped text: invalid character", off+1, off))
	// An indented one had its white space dropped as it was read: the
	// offset is in what was kept, with the bytes around the fault.
	_, err = Read(bytes.NewReader(pretty), "p.json")
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, `of the plan with the white space between its tokens dropped, near "`)
	require.ErrorContains(t, err, `\"traces\":[\"a\" \"b\"],`)
	require.NotContains(t, err.Error(), "line 1,")
	_, err = Read(bytes.NewReader(gzread.Pack(pretty)), "p.json.gz")
	require.ErrorContains(t, err, ` of the gunzipped plan with the white space between its tokens dropped, near "`)
}

// A directory given for a plan file is named once: "DIR: plan: read DIR:
// is a directory" said it twice.
func TestReadFileOfADirectoryNamesItOnce(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadFile(dir)
	require.ErrorIs(t, err, syscall.EISDIR)
	require.EqualError(t, err, "plan: read "+dir+": is a directory")
}
