package memory

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/gzread"
	"github.com/vkrt/vkrt/internal/strictjson"
)

const specRecord = `{"label":"after the dry run","report":{
  "dynamic":[{"kind":{"Sliced":{"page_size":1048576,"max_slice_size":1048576,"max_pool_size":null}},
              "usage":{"number_allocs":1,"bytes_in_use":100,"bytes_padding":12,"bytes_reserved":1048576},
              "pages":1,"pages_peak":1,"pages_unmapped":1,"largest_alloc":100}],
  "persistent":{"kind":"Persistent","usage":{"number_allocs":0,"bytes_in_use":0,"bytes_padding":0,"bytes_reserved":0},"pages":0,"pages_peak":0,"pages_unmapped":0,"largest_alloc":0}}}`

func TestRecordJSONMatchesTheContract(t *testing.T) {
	var r Record
	require.NoError(t, json.Unmarshal([]byte(specRecord), &r))
	require.Equal(t, "after the dry run", r.Label)
	require.Len(t, r.Report.Dynamic, 1)
	require.Equal(t, SlicedKind{PageSize: 1 << 20, MaxSliceSize: 1 << 20}, r.Report.Dynamic[0].Kind)
	require.Equal(t, Usage{NumberAllocs: 1, BytesInUse: 100, BytesPadding: 12, BytesReserved: 1 << 20}, r.Report.Dynamic[0].Usage)
	require.Equal(t, uint64(1), r.Report.Dynamic[0].PagesUnmapped)
	require.Equal(t, PersistentKind{}, r.Report.Persistent.Kind)

	out, err := json.Marshal(r)
	require.NoError(t, err)
	require.JSONEq(t, specRecord, string(out))
	var again Record
	require.NoError(t, json.Unmarshal(out, &again))
	require.Equal(t, r, again)
}

func TestPoolKindJSONRoundTrips(t *testing.T) {
	for _, c := range []struct {
		kind PoolKind
		json string
	}{
		{SlicedKind{PageSize: 4096, MaxSliceSize: 1024, MaxPoolSize: u64(8192)}, `{"Sliced":{"page_size":4096,"max_slice_size":1024,"max_pool_size":8192}}`},
		{SlicedKind{PageSize: 4096, MaxSliceSize: 4096}, `{"Sliced":{"page_size":4096,"max_slice_size":4096,"max_pool_size":null}}`},
		{ExclusiveKind{MaxAllocSize: 1 << 30}, `{"Exclusive":{"max_alloc_size":1073741824}}`},
		{ExclusiveKind{MaxAllocSize: 1 << 30, MaxPoolSize: u64(2 << 30)}, `{"Exclusive":{"max_alloc_size":1073741824,"max_pool_size":2147483648}}`},
		{DirectKind{}, `"Direct"`},
		{PersistentKind{}, `"Persistent"`},
		{ArenaKind{PageBytes: 3 << 20, Slots: 7}, `{"Arena":{"page_bytes":3145728,"slots":7}}`},
	} {
		out, err := json.Marshal(c.kind)
		require.NoError(t, err)
		require.JSONEq(t, c.json, string(out))
		back, err := UnmarshalPoolKind([]byte(c.json))
		require.NoError(t, err)
		require.Equal(t, c.kind, back)
	}
}

func TestReportJSONWritesEmptyDynamicAsList(t *testing.T) {
	out, err := json.Marshal(Report{Persistent: PoolReport{Kind: PersistentKind{}}})
	require.NoError(t, err)
	require.Contains(t, string(out), `"dynamic":[]`)
	var r Report
	require.NoError(t, json.Unmarshal(out, &r))
	require.Empty(t, r.Dynamic)
}

// The zero Report, a client's report for a stream it has not, writes JSON
// that reads back: its persistent pool as the persistent one, not of kind
// null.
func TestZeroReportJSONReadsBack(t *testing.T) {
	for _, rep := range []Report{{}, {Dynamic: []PoolReport{}}} {
		out, err := json.Marshal(rep)
		require.NoError(t, err)
		var back Report
		require.NoError(t, json.Unmarshal(out, &back), "%s", out)
		require.Equal(t, Report{Dynamic: []PoolReport{}, Persistent: PoolReport{Kind: PersistentKind{}}}, back)
		out, err = json.Marshal(Record{Label: "none", Report: rep})
		require.NoError(t, err)
		var rec Record
		require.NoError(t, json.Unmarshal(out, &rec), "%s", out)
	}
}

// A dynamic pool of no kind wrote "kind":null, JSON that reading back
// refuses: a record stored so could not be read. Writing it is refused.
func TestReportJSONRefusesDynamicPoolWithoutKind(t *testing.T) {
	rep := Report{Dynamic: []PoolReport{{Kind: DirectKind{}}, {Usage: Usage{NumberAllocs: 1}}}, Persistent: PoolReport{Kind: PersistentKind{}}}
	_, err := json.Marshal(rep)
	require.ErrorContains(t, err, "report.dynamic[1] has no pool kind")
	_, err = json.Marshal(Record{Label: "x", Report: rep})
	require.ErrorContains(t, err, "report.dynamic[1] has no pool kind")
	rep.Dynamic[1].Kind = SlicedKind{PageSize: 4096, MaxSliceSize: 1024}
	out, err := json.Marshal(rep)
	require.NoError(t, err)
	var back Report
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, rep, back)
}

func TestMalformedReportJSONIsRefused(t *testing.T) {
	usage := `{"number_allocs":0,"bytes_in_use":0,"bytes_padding":0,"bytes_reserved":0}`
	pool := func(kind string) string {
		return `{"kind":` + kind + `,"usage":` + usage + `,"pages":0,"pages_peak":0,"pages_unmapped":0,"largest_alloc":0}`
	}
	report := func(dynamic, persistent string) string {
		return `{"label":"x","report":{"dynamic":[` + dynamic + `],"persistent":` + persistent + `}}`
	}
	good := report(pool(`"Direct"`), pool(`"Persistent"`))
	var ok Record
	require.NoError(t, json.Unmarshal([]byte(good), &ok))

	for name, doc := range map[string]string{
		"unknown variant":        report(pool(`"Bogus"`), pool(`"Persistent"`)),
		"unknown tagged variant": report(pool(`{"Bogus":{}}`), pool(`"Persistent"`)),
		"two variants":           report(pool(`{"Exclusive":{"max_alloc_size":1},"Direct":null}`), pool(`"Persistent"`)),
		"unknown field":          `{"label":"x","extra":1,"report":{"dynamic":[],"persistent":` + pool(`"Persistent"`) + `}}`,
		"unknown kind field":     report(pool(`{"Exclusive":{"max_alloc_size":1,"x":2}}`), pool(`"Persistent"`)),
		"missing field":          report(`{"kind":"Direct","usage":`+usage+`,"pages":0,"pages_peak":0,"pages_unmapped":0}`, pool(`"Persistent"`)),
		"string for number":      report(pool(`{"Exclusive":{"max_alloc_size":"1"}}`), pool(`"Persistent"`)),
		"negative number":        report(pool(`{"Exclusive":{"max_alloc_size":-1}}`), pool(`"Persistent"`)),
		"fraction":               report(pool(`{"Exclusive":{"max_alloc_size":1.5}}`), pool(`"Persistent"`)),
		"null number":            report(pool(`{"Exclusive":{"max_alloc_size":null}}`), pool(`"Persistent"`)),
		"null dynamic":           `{"label":"x","report":{"dynamic":null,"persistent":` + pool(`"Persistent"`) + `}}`,
		"label not a string":     `{"label":3,"report":{"dynamic":[],"persistent":` + pool(`"Persistent"`) + `}}`,
		"trailing data":          good + ` {}`,
		"not an object":          `[1,2]`,
		"unit variant with data": report(pool(`{"Direct":{"x":1}}`), pool(`"Persistent"`)),
		"truncated":              good[:len(good)-3],
		"duplicate field":        `{"label":"x","label":"y","report":{"dynamic":[],"persistent":` + pool(`"Persistent"`) + `}}`,
	} {
		var r Record
		require.Error(t, json.Unmarshal([]byte(doc), &r), name)
	}
}

func TestLayoutJSON(t *testing.T) {
	for _, c := range []struct {
		layout Layout
		json   string
	}{
		{SubSlicesLayout(), `"SubSlices"`},
		{ExclusivePagesLayout(), `"ExclusivePages"`},
		{DirectLayout(), `"Direct"`},
		{SlicedLayout(SlicedPool{PageSize: 1048576, Pages: u64(2), MaxSlice: u64(65536)}),
			`{"Sliced":[{"page_size":1048576,"pages":2,"max_slice":65536}]}`},
		{SlicedLayout(SlicedPool{PageSize: 4096}, SlicedPool{PageSize: 1 << 20, Pages: u64(3)}),
			`{"Sliced":[{"page_size":4096,"pages":null,"max_slice":null},{"page_size":1048576,"pages":3,"max_slice":null}]}`},
		{SlicedLayout(SlicedPool{PageSize: 4096, Grow: true}, SlicedPool{PageSize: 1 << 20, Pages: u64(3), Grow: true, Exclusive: true}),
			`{"Sliced":[{"page_size":4096,"pages":null,"max_slice":null,"grow":true},{"page_size":1048576,"pages":3,"max_slice":null,"grow":true,"exclusive":true}]}`},
		{ArenaLayout(ArenaPlan{Pages: []uint64{1073741824}, Slots: []ArenaSlot{{1024, 0, 0}, {2048, 0, 1024}},
			Fallback: []SlicedPool{{PageSize: 1048576}}}),
			`{"Arena":{"pages":[1073741824],"slots":[[1024,0,0],[2048,0,1024]],"fallback":[{"page_size":1048576,"pages":null,"max_slice":null}]}}`},
		{VirtualLayout(VirtualPlan{PlannedBytes: 196608, Slots: []VirtualSlot{{1024, 0}, {131072, 65536}},
			Profile: []VirtualMark{{0, 65536}, {1, 196608}}}),
			`{"Virtual":{"planned_bytes":196608,"slots":[1024,0,131072,65536],"profile":[0,65536,1,196608]}}`},
		{VirtualLayout(VirtualPlan{PlannedBytes: 196608, Slots: []VirtualSlot{{1024, 0}, {131072, 65536}},
			Profile: []VirtualMark{{0, 65536}, {1, 196608}}, Settled: VirtualMark{0, 65536}}),
			`{"Virtual":{"planned_bytes":196608,"slots":[1024,0,131072,65536],"profile":[0,65536,1,196608],"settled":[0,65536]}}`},
	} {
		out, err := json.Marshal(c.layout)
		require.NoError(t, err)
		require.JSONEq(t, c.json, string(out))
		var back Layout
		require.NoError(t, json.Unmarshal([]byte(c.json), &back))
		require.True(t, c.layout.Equal(back), "%s read back as %s", c.json, back)
		parsed, err := ParseLayout(c.json)
		require.NoError(t, err)
		require.True(t, c.layout.Equal(parsed))
		require.Equal(t, c.layout.Kind(), parsed.Kind())
	}

	// pages and max_slice may be absent as well as null; fallback may be absent.
	var l Layout
	require.NoError(t, json.Unmarshal([]byte(`{"Sliced":[{"page_size":4096}]}`), &l))
	require.True(t, l.Equal(SlicedLayout(SlicedPool{PageSize: 4096})))
	require.NoError(t, json.Unmarshal([]byte(`{"Arena":{"pages":[64],"slots":[]}}`), &l))
	plan, ok := l.Arena()
	require.True(t, ok)
	require.Empty(t, plan.Fallback)
}

func TestMalformedLayoutJSONIsRefused(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown preset":        `"Tiny"`,
		"unknown variant":       `{"Buddy":[]}`,
		"unknown pool field":    `{"Sliced":[{"page_size":4096,"page":1}]}`,
		"missing page size":     `{"Sliced":[{"pages":1}]}`,
		"pages as string":       `{"Sliced":[{"page_size":4096,"pages":"2"}]}`,
		"negative page":         `{"Sliced":[{"page_size":-4096}]}`,
		"sliced not a list":     `{"Sliced":{"page_size":4096}}`,
		"sliced null":           `{"Sliced":null}`,
		"trailing data":         `"Direct" "Direct"`,
		"preset with data":      `{"Direct":[1]}`,
		"slot of two":           `{"Arena":{"pages":[64],"slots":[[16,0]]}}`,
		"slot page too large":   `{"Arena":{"pages":[64],"slots":[[16,4294967296,0]]}}`,
		"arena unknown field":   `{"Arena":{"pages":[64],"slots":[],"fallbacks":[]}}`,
		"arena missing slots":   `{"Arena":{"pages":[64]}}`,
		"arena pages as a map":  `{"Arena":{"pages":{"0":64},"slots":[]}}`,
		"profile of three":      `{"Virtual":{"planned_bytes":64,"profile":[0,64,1]}}`,
		"profile of a string":   `{"Virtual":{"planned_bytes":64,"profile":["0",64]}}`,
		"settled of one":        `{"Virtual":{"planned_bytes":64,"slots":[64,0],"settled":[0]}}`,
		"settled of two marks":  `{"Virtual":{"planned_bytes":64,"slots":[64,0,64,64],"settled":[0,64,1,128]}}`,
		"empty":                 ``,
		"number":                `42`,
		"duplicate variant":     `{"Sliced":[{"page_size":4096}],"Sliced":[{"page_size":8192}]}`,
		"duplicate pool field":  `{"Sliced":[{"page_size":4096,"page_size":8192}]}`,
		"exclusive as a number": `{"Sliced":[{"page_size":4096,"exclusive":1}]}`,
		"exclusive as a string": `{"Sliced":[{"page_size":4096,"exclusive":"true"}]}`,
		"grow as null":          `{"Sliced":[{"page_size":4096,"grow":null}]}`,
	} {
		var l Layout
		require.Error(t, json.Unmarshal([]byte(doc), &l), name)
		_, err := ParseLayout(doc)
		require.Error(t, err, name)
	}
}

func TestParseLayoutPresets(t *testing.T) {
	for in, want := range map[string]LayoutKind{
		"sub-slices": LayoutSubSlices, "exclusive-pages": LayoutExclusivePages, "direct": LayoutDirect,
		" direct\n": LayoutDirect, `"SubSlices"`: LayoutSubSlices,
	} {
		l, err := ParseLayout(in)
		require.NoError(t, err, in)
		require.Equal(t, want, l.Kind(), in)
	}
	_, err := ParseLayout("sub_slices")
	require.ErrorContains(t, err, `unknown layout "sub_slices": want sub-slices, exclusive-pages, direct, virtual or a layout JSON literal`)
}

// A preset's name matches in any case, and so does its kind's name as
// reports and vkrt replay print it: "Virtual" was an unknown layout. So
// does a layout's JSON variant. A name of neither stays unknown, with the
// names it could have been.
func TestPresetNamesMatchInAnyCase(t *testing.T) {
	for in, want := range map[string]LayoutKind{
		"Virtual": LayoutVirtual, "VIRTUAL": LayoutVirtual, "Direct": LayoutDirect, "Sub-Slices": LayoutSubSlices,
		"SubSlices": LayoutSubSlices, "subslices": LayoutSubSlices, "EXCLUSIVE-PAGES": LayoutExclusivePages,
		"ExclusivePages": LayoutExclusivePages, " Virtual\n": LayoutVirtual,
		`"virtual"`: LayoutVirtual, `"DIRECT"`: LayoutDirect, `"subslices"`: LayoutSubSlices,
		`"exclusivePages"`: LayoutExclusivePages, `{"direct":null}`: LayoutDirect,
		`{"virtual":{"planned_bytes":64}}`: LayoutVirtual, `{"sliced":[{"page_size":4096}]}`: LayoutSliced,
		`{"ARENA":{"pages":[64],"slots":[]}}`: LayoutArena,
	} {
		l, err := ParseLayout(in)
		require.NoError(t, err, in)
		require.Equal(t, want, l.Kind(), in)
		var back Layout
		if json.Valid([]byte(in)) {
			require.NoError(t, json.Unmarshal([]byte(in), &back), in)
			require.True(t, l.Equal(back), in)
		}
	}
	l, err := ReadLayoutFile(writeTemp(t, "Virtual\n"+strings.Repeat(" ", 100)))
	require.NoError(t, err)
	require.Equal(t, LayoutVirtual, l.Kind())

	for _, in := range []string{"Virtua", "virtual-pages", "sub_slices"} {
		_, err := ParseLayout(in)
		require.ErrorIs(t, err, &InstallError{Kind: InvalidLayout}, in)
		require.ErrorContains(t, err, "want sub-slices, exclusive-pages, direct, virtual or a layout JSON literal", in)
	}
	_, err = ParseLayout(`"Virtua"`)
	require.ErrorContains(t, err, "unknown variant \"Virtua\" (known: [SubSlices ExclusivePages Direct Sliced Arena Virtual])")
}

func writeTemp(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layout")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

func TestLayoutIsAValue(t *testing.T) {
	pools := []SlicedPool{{PageSize: 4096, Pages: u64(1)}}
	l := SlicedLayout(pools...)
	*pools[0].Pages = 9
	pools[0].PageSize = 1
	got, ok := l.Sliced()
	require.True(t, ok)
	require.Equal(t, uint64(4096), got[0].PageSize)
	require.Equal(t, uint64(1), *got[0].Pages)
	*got[0].Pages = 7
	again, _ := l.Sliced()
	require.Equal(t, uint64(1), *again[0].Pages)
	_, ok = l.Arena()
	require.False(t, ok)
	require.Equal(t, LayoutSubSlices, Layout{}.Kind(), "the zero layout is the default preset")
}

// numbersThatDoNotFit are JSON numbers no uint64 field may take; the first
// ones are those goccy/go-json wraps to small values.
var numbersThatDoNotFit = []string{
	"99999999999999999999", "36893488147419103233", "18446744073709551617", "18446744073709551616",
	"-1", "1e6", "1.5", "4096.0",
}

func TestLayoutJSONRefusesNumbersPastUint64(t *testing.T) {
	for _, n := range numbersThatDoNotFit {
		for _, doc := range []string{
			`{"Sliced":[{"page_size":` + n + `}]}`,
			`{"Sliced":[{"page_size":4096,"pages":` + n + `}]}`,
			`{"Sliced":[{"page_size":4096,"max_slice":` + n + `}]}`,
			`{"Arena":{"pages":[` + n + `],"slots":[]}}`,
			`{"Arena":{"pages":[64],"slots":[[` + n + `,0,0]]}}`,
			`{"Arena":{"pages":[64],"slots":[[16,0,` + n + `]]}}`,
			`{"Arena":{"pages":[64],"slots":[],"fallback":[{"page_size":` + n + `}]}}`,
			`{"Virtual":{"planned_bytes":` + n + `}}`,
		} {
			var l Layout
			err := json.Unmarshal([]byte(doc), &l)
			require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, doc)
			_, err = ParseLayout(doc)
			require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, doc)
		}
	}
}

func TestRecordJSONRefusesNumbersPastUint64(t *testing.T) {
	for _, n := range numbersThatDoNotFit {
		for _, field := range []string{`"bytes_reserved":1048576`, `"page_size":1048576`, `"max_pool_size":null`, `"pages_peak":1`, `"largest_alloc":100`} {
			name, _, _ := strings.Cut(field, ":")
			doc := strings.Replace(specRecord, field, name+":"+n, 1)
			require.NotEqual(t, specRecord, doc, field)
			var r Record
			err := json.Unmarshal([]byte(doc), &r)
			require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, "%s = %s", name, n)
		}
	}
}

func TestRecordJSONReadsTheLargestUint64(t *testing.T) {
	doc := strings.Replace(specRecord, `"bytes_reserved":1048576`, `"bytes_reserved":18446744073709551615`, 1)
	var r Record
	require.NoError(t, json.Unmarshal([]byte(doc), &r))
	require.Equal(t, uint64(1<<64-1), r.Report.Dynamic[0].Usage.BytesReserved)
}

func TestLayoutRefusesMorePoolsThanItMayHold(t *testing.T) {
	pools := func(n int) string {
		return `{"Sliced":[` + strings.TrimSuffix(strings.Repeat(`{"page_size":4096},`, n), ",") + `]}`
	}
	_, err := ParseLayout(pools(MaxLayoutPools))
	require.NoError(t, err, "the bound itself is allowed")
	for _, n := range []int{MaxLayoutPools + 1, 4 << 20} {
		_, err := ParseLayout(pools(n))
		require.ErrorContains(t, err, fmt.Sprintf("more than %d elements", MaxLayoutPools))
		require.Less(t, len(err.Error()), 300)
	}
	_, err = ParseLayout(`{"Arena":{"pages":[64],"slots":[],"fallback":[` + strings.TrimSuffix(strings.Repeat(`{"page_size":4096},`, MaxLayoutPools+1), ",") + `]}}`)
	require.ErrorContains(t, err, "more than")

	// A layout built in code is held to the same bound when installed.
	many := make([]SlicedPool, MaxLayoutPools+1)
	for i := range many {
		many[i] = SlicedPool{PageSize: 4096}
	}
	_, err = NewManager(newFakeStorage(), testProps, SlicedLayout(many...))
	require.ErrorIs(t, err, &InstallError{Kind: InvalidLayout})
	require.ErrorContains(t, err, "more than the 256 a layout may hold")
}

func TestLayoutFileOfNonJSONGivesAShortError(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.bin")
	require.NoError(t, os.WriteFile(big, bytes.Repeat([]byte("not json at all "), 8<<20/16), 0o644))
	_, err := ReadLayoutFile(big)
	require.ErrorContains(t, err, "holds no layout")
	require.Less(t, len(err.Error()), 300, "the error quotes a short excerpt: %.400s", err)

	// JSON that goes wrong late is quoted short too.
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"Sliced":[`+strings.Repeat(`{"page_size":4096},`, 200000)+`oops]}`), 0o644))
	_, err = ReadLayoutFile(bad)
	require.Error(t, err)
	require.Less(t, len(err.Error()), 400, "%.600s", err)

	preset := filepath.Join(dir, "preset")
	require.NoError(t, os.WriteFile(preset, []byte("direct\n"), 0o644))
	l, err := ReadLayoutFile(preset)
	require.NoError(t, err)
	require.Equal(t, LayoutDirect, l.Kind())

	_, err = ParseLayout(strings.Repeat("x", 1<<20))
	require.ErrorContains(t, err, "unknown layout")
	require.Less(t, len(err.Error()), 300)
}

// A layout's strings are names: a file whose strings hold more than
// MaxLayoutStringBytes is refused as it is read. {"Direct":"x..."} of a
// gigabyte, gzipped to 1 MB, took 3.3 GB and 11 s to refuse for its data.
func TestALayoutFileWithAGiantStringIsRefusedAsItIsRead(t *testing.T) {
	for _, doc := range []struct{ head, tail string }{{`{"Direct":"`, `"}`}, {`{"Sliced":[{"page_size":1048576,"xx":"`, `"}]}`}} {
		packed := gzread.Pack([]byte(doc.head + strings.Repeat("x", 48<<20) + doc.tail))
		_, err := ReadLayout(bytes.NewReader(packed), doc.head)
		require.ErrorIs(t, err, strictjson.ErrStringBytes, doc.head)
		require.ErrorContains(t, err, "more than 33554432 bytes in strings")
	}
}

func TestLayoutErrorsQuoteLongNamesShort(t *testing.T) {
	long := strings.Repeat("n", 2000)
	for _, doc := range []string{
		`{"` + long + `":[]}`,
		`"` + long + `"`,
		`{"Sliced":[{"` + long + `":1}]}`,
		`{"Sliced":[{"page_size":1,"page_size":2,"` + long + `":3}]}`,
		`{"Sliced":[],"` + long + `":[]}`,
		`{"` + long + `":[],"` + long + `":[]}`,
		`{"Arena":{"pages":[1],"slots":[],"` + long + `":1}}`,
	} {
		_, err := ParseLayout(doc)
		require.Error(t, err)
		require.Less(t, len(err.Error()), 500, "%.600s", err)
	}
	var r Record
	err := json.Unmarshal([]byte(`{"label":"x","`+long+`":1}`), &r)
	require.Error(t, err)
	require.Less(t, len(err.Error()), 500)
}

// A gzipped layout file reads as the plain one does, bounded by what it
// unpacks to; a broken gzip stream is a clear error, not its bytes quoted.
func TestLayoutFileGzippedReadsAsThePlainOne(t *testing.T) {
	dir := t.TempDir()
	doc := []byte(`{"Sliced":[{"page_size":4096},{"page_size":1048576}]}`)
	packedDoc := gzread.Pack(doc)
	plain, packed := filepath.Join(dir, "layout.json"), filepath.Join(dir, "layout.json.gz")
	require.NoError(t, os.WriteFile(plain, doc, 0o644))
	require.NoError(t, os.WriteFile(packed, packedDoc, 0o644))
	want, err := ReadLayoutFile(plain)
	require.NoError(t, err)
	got, err := ReadLayoutFile(packed)
	require.NoError(t, err)
	require.True(t, got.Equal(want))

	cut := filepath.Join(dir, "cut.json.gz")
	require.NoError(t, os.WriteFile(cut, packedDoc[:len(packedDoc)-5], 0o644))
	_, err = ReadLayoutFile(cut)
	require.ErrorIs(t, err, gzread.ErrUnreadable)
	require.NotContains(t, err.Error(), "\\x1f", "the gzip bytes are not quoted")

	wrong := filepath.Join(dir, "wrong.json.gz")
	require.NoError(t, os.WriteFile(wrong, gzread.Pack([]byte(`{"Slced":[]}`)), 0o644))
	_, err = ReadLayoutFile(wrong)
	require.ErrorContains(t, err, "(gzipped)")
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A gzipped file that cannot hold a layout is refused by what its head
// unpacks to, as a plain one is by its head: it was unpacked whole, up to
// the 1 GiB bound (a gzipped gigabyte of zeros, 1 MB on disk, took 3 GB
// of memory to refuse).
func TestLayoutFileGzippedNonJSONIsRefusedByItsHead(t *testing.T) {
	packed := gzread.Pack(bytes.Repeat([]byte("not json at all "), 32<<20/16))
	r := &countingReader{r: bytes.NewReader(packed)}
	_, err := ReadLayout(r, "big.bin.gz")
	require.ErrorContains(t, err, "holds no layout")
	require.Less(t, len(err.Error()), 300, "%.400s", err)
	require.Less(t, r.n, len(packed)/4, "read %d of %d packed bytes", r.n, len(packed))

	// A gzipped layout padded past the head still reads.
	doc := append(bytes.Repeat([]byte(" \n"), 100), `{"Sliced":[{"page_size":4096}]}`...)
	l, err := ReadLayout(bytes.NewReader(gzread.Pack(doc)), "padded.json.gz")
	require.NoError(t, err)
	require.Equal(t, LayoutSliced, l.Kind())
	// As does a preset name padded past the head, as ParseLayout reads it.
	padded := "direct" + strings.Repeat(" ", 100)
	l, err = ReadLayout(strings.NewReader(padded), "padded.json")
	require.NoError(t, err)
	require.Equal(t, LayoutDirect, l.Kind())
	// As does one of two members, the first shorter than the head.
	two := append(gzread.Pack([]byte(`{"Sliced":`)), gzread.Pack([]byte(`[{"page_size":4096}]}`+strings.Repeat(" ", 100)))...)
	l, err = ReadLayout(bytes.NewReader(two), "two.json.gz")
	require.NoError(t, err)
	require.Equal(t, LayoutSliced, l.Kind())
}

// An object of many members, a name given twice among them, is refused
// for it, as one of few is (past 16 members the names go into a set: a
// hostile object of 200,000 would take 2·10^10 comparisons pair by pair).
func TestAnObjectOfManyMembersIsRefusedForANameGivenTwice(t *testing.T) {
	for _, n := range []int{3, 17, 200_000} {
		var b strings.Builder
		b.WriteString(`{"label":"x","report":{"dynamic":[],"persistent":{}}`)
		for i := range n {
			fmt.Fprintf(&b, `,"f%d":1`, i)
		}
		b.WriteString(`,"f1":2}`)
		var rec Record
		err := strictjson.Unmarshal([]byte(b.String()), &rec)
		require.ErrorContains(t, err, `field "f1" given twice`, "%d members", n)
	}
}

// A layout names itself in a message by its JSON where that is short, and
// by its kind and counts where a plan's JSON runs to megabytes: an arena of
// 200,000 slots put 2.9 MB in one error.
func TestLayoutBriefStaysShort(t *testing.T) {
	require.Equal(t, `"Virtual"`, VirtualLayout(VirtualPlan{}).Brief())
	small := SlicedLayout(SlicedPool{PageSize: 1 << 20})
	require.Equal(t, small.String(), small.Brief())

	slots := make([]ArenaSlot, 200000)
	for i := range slots {
		slots[i] = ArenaSlot{Size: 16, Offset: 16 * uint64(i)}
	}
	arena := ArenaLayout(ArenaPlan{Pages: []uint64{16 * 200000}, Slots: slots})
	require.Greater(t, len(arena.String()), 1<<20)
	require.Equal(t, "an Arena plan of 1 page (3200000 B), 200000 slots and 0 fallback pools", arena.Brief())

	vslots := make([]VirtualSlot, 100)
	for i := range vslots {
		vslots[i] = VirtualSlot{Size: 256, Offset: 256 * uint64(i)}
	}
	virtual := VirtualLayout(VirtualPlan{PlannedBytes: 25600, Slots: vslots})
	require.Equal(t, "a Virtual plan of 25600 B planned, 100 slots and 0 profile marks", virtual.Brief())
	pools := make([]SlicedPool, 40)
	for i := range pools {
		pools[i] = SlicedPool{PageSize: uint64(i+1) << 20}
	}
	require.Equal(t, "a Sliced layout of 40 pools", SlicedLayout(pools...).Brief())
}

// An empty layout file, or one of white space alone, gzipped or not, says
// it is empty: it was the unknown layout "nothing".
func TestLayoutFileEmptySaysSo(t *testing.T) {
	for name, data := range map[string][]byte{
		"empty.json":    nil,
		"blank.json":    []byte(" \n\t\r\n"),
		"empty.json.gz": gzread.Pack(nil),
		"blank.json.gz": gzread.Pack([]byte(strings.Repeat(" \n", 100))),
	} {
		_, err := ReadLayout(bytes.NewReader(data), name)
		require.ErrorContains(t, err, "layout file "+name, name)
		require.ErrorContains(t, err, "is empty", name)
		require.NotContains(t, err.Error(), "nothing", name)
	}
}

// An error from deep in a layout, a layout file or a record says "memory: "
// once, in front, and still matches what it wraps.
func TestNestedJSONErrorsSayTheirPrefixOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "layout.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"Sliced":[{"page_size":-1}]}`), 0o644))
	_, fileErr := ReadLayoutFile(file)
	_, literalErr := ParseLayout(`{"Arena":{"pages":[1],"slots":[],"fallback":[{"page_size":-1}]}}`)
	_, nullErr := ParseLayout(`{"Sliced":null}`)
	var rec Record
	recordErr := json.Unmarshal([]byte(strings.Replace(specRecord, `"pages":1,`, `"pages":-1,`, 1)), &rec)
	for _, c := range []struct {
		err  error
		want string
	}{
		{fileErr, `memory: layout file ` + file + `: layout "{\"Sliced\":[{\"page_size\":-1}]}": Sliced layout[0]: sliced pool.page_size: `},
		{literalErr, `: arena plan fallback[0]: sliced pool.page_size: `},
		{nullErr, `memory: layout "{\"Sliced\":null}": Sliced layout: want a JSON array`},
		{recordErr, `memory: report.dynamic[0]: pool report.pages: `},
	} {
		require.Error(t, c.err)
		require.ErrorContains(t, c.err, c.want)
		require.Equal(t, 1, strings.Count(c.err.Error(), "memory: "), c.err.Error())
		if c.err != nullErr {
			require.ErrorIs(t, c.err, strictjson.ErrNumberDoesNotFit)
		}
	}
}

// A layout with a byte order mark in front (an editor's, or UTF-16 as
// some shells write a redirection) is refused saying so, whatever its
// length, gzipped or not: a short one was an "unknown layout", a long one
// a file that "holds no layout".
func TestALayoutWithAByteOrderMarkIsRefusedSayingSo(t *testing.T) {
	dir := t.TempDir()
	long := `{"Sliced":[{"page_size":4096},{"page_size":1048576},{"page_size":16777216}]}`
	utf16 := []byte{0xff, 0xfe}
	for _, r := range `"Direct"` {
		utf16 = append(utf16, byte(r), 0)
	}
	for i, c := range []struct {
		doc  []byte
		mark string
	}{
		{[]byte("\xef\xbb\xbf\"Direct\""), "UTF-8"},
		{[]byte("\xef\xbb\xbf" + long), "UTF-8"},
		{utf16, "UTF-16 (little-endian)"},
	} {
		for _, packed := range []bool{false, true} {
			doc, name := c.doc, filepath.Join(dir, fmt.Sprintf("layout%d.json", i))
			if packed {
				doc, name = gzread.Pack(doc), name+".gz"
			}
			require.NoError(t, os.WriteFile(name, doc, 0o644))
			_, err := ReadLayoutFile(name)
			require.ErrorContains(t, err, "layout file "+name)
			require.ErrorContains(t, err, "starts with a "+c.mark+" byte order mark", name)
		}
		_, err := ParseLayout(string(c.doc))
		require.ErrorContains(t, err, "starts with a "+c.mark+" byte order mark")
	}
}
