package memory

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/strictjson"
)

// numbersOf lists every number in a JSON document, as written, or ok=false
// when the document is not valid JSON.
func numbersOf(doc []byte) (nums []string, ok bool) {
	if !stdjson.Valid(doc) {
		return nil, false
	}
	dec := stdjson.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nums, true
		}
		if err != nil {
			return nil, false
		}
		if n, isNum := tok.(stdjson.Number); isNum {
			nums = append(nums, n.String())
		}
	}
}

// requireNoNumberWrapped: a document that decoded holds only numbers that
// are uint64 values written plainly — no number was wrapped or rounded to
// make it fit.
func requireNoNumberWrapped(t *testing.T, doc []byte) {
	nums, ok := numbersOf(doc)
	require.True(t, ok, "a document that decoded is valid JSON: %q", doc)
	for _, n := range nums {
		_, err := strconv.ParseUint(n, 10, 64)
		require.NoError(t, err, "number %s decoded though it does not fit a uint64 field", n)
	}
}

// jsonNumberSeeds put numbers at and past 2^64 in every numeric field.
func jsonNumberSeeds(template string, fields ...string) []string {
	var out []string
	for _, n := range []string{"18446744073709551615", "18446744073709551616", "18446744073709551617",
		"36893488147419103233", "99999999999999999999", "-1", "1e6", "1.5", "0"} {
		for _, f := range fields {
			out = append(out, strings.Replace(template, f, n, 1))
		}
	}
	return out
}

func FuzzLayoutJSON(f *testing.F) {
	for _, seed := range jsonNumberSeeds(`{"Sliced":[{"page_size":PS,"pages":PG,"max_slice":MS}]}`, "PS", "PG", "MS") {
		f.Add(seed)
	}
	for _, seed := range jsonNumberSeeds(`{"Arena":{"pages":[PS],"slots":[[SZ,0,OF]],"fallback":[{"page_size":4096}]}}`, "PS", "SZ", "OF") {
		f.Add(seed)
	}
	for _, seed := range jsonNumberSeeds(`{"Virtual":{"planned_bytes":PB}}`, "PB") {
		f.Add(seed)
	}
	for _, seed := range jsonNumberSeeds(`{"Virtual":{"planned_bytes":PB,"slots":[64,0],"profile":[OR,BY,9,4096]}}`, "PB", "OR", "BY") {
		f.Add(seed)
	}
	for _, seed := range jsonNumberSeeds(`{"Virtual":{"planned_bytes":4096,"slots":[64,0,64,64],"settled":[OR,BY]}}`, "OR", "BY") {
		f.Add(seed)
	}
	f.Add(`"SubSlices"`)
	f.Add(`direct`)
	f.Fuzz(func(t *testing.T, doc string) {
		l, err := ParseLayout(doc)
		if err != nil {
			require.Less(t, len(err.Error()), 500, "errors quote short excerpts: %.600s", err)
			return
		}
		if trimmed := strings.TrimSpace(doc); strings.HasPrefix(trimmed, "{") || strings.HasPrefix(trimmed, `"`) {
			requireNoNumberWrapped(t, []byte(trimmed))
		}
		out, err := l.MarshalJSON()
		require.NoError(t, err)
		back, err := ParseLayout(string(out))
		require.NoError(t, err, "a layout's own JSON parses: %s", out)
		require.True(t, l.Equal(back), "round trip changed %s into %s", out, back)
	})
}

func FuzzRecordJSON(f *testing.F) {
	fields := []string{`"number_allocs":1`, `"bytes_reserved":1048576`, `"page_size":1048576`, `"max_pool_size":null`, `"largest_alloc":100`}
	for _, n := range []string{"18446744073709551616", "18446744073709551617", "-1", "1e6", "1.5"} {
		for _, fld := range fields {
			name, _, _ := strings.Cut(fld, ":")
			f.Add([]byte(strings.Replace(specRecord, fld, name+":"+n, 1)))
		}
	}
	f.Add([]byte(specRecord))
	f.Fuzz(func(t *testing.T, doc []byte) {
		var r Record
		// The way an environment record is read (Entry.Decode).
		if err := strictjson.Unmarshal(doc, &r); err != nil {
			return
		}
		requireNoNumberWrapped(t, doc)
		out, err := json.Marshal(r)
		require.NoError(t, err)
		var back Record
		require.NoError(t, json.Unmarshal(out, &back), "a record's own JSON decodes: %s", out)
		require.Equal(t, r, back)
	})
}
