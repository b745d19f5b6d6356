package memory

import (
	stdjson "encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/gzread"
	"github.com/vkrt/vkrt/internal/strictjson"
)

func numberName(k int) string { return fmt.Sprintf("number %d", k) }

func TestDecodeUintTuplesReadsFlatAndTupleArrays(t *testing.T) {
	for _, c := range []struct {
		in    string
		tuple int
		want  []uint64
	}{
		{`[]`, 0, []uint64{}},
		{" [ ] \n", 0, []uint64{}},
		{`[0]`, 0, []uint64{0}},
		{"[1,2 ,\t3\r\n, 18446744073709551615]", 0, []uint64{1, 2, 3, 18446744073709551615}},
		{`[[1,2,3],[4,5,6]]`, 3, []uint64{1, 2, 3, 4, 5, 6}},
		{` [ [ 1 , 2 , 3 ] ] `, 3, []uint64{1, 2, 3}},
		{`[]`, 3, []uint64{}},
	} {
		got, err := decodeUintTuples([]byte(c.in), "test", c.tuple, 10, numberName)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
}

func TestDecodeUintTuplesRefusesWhatIsNotAnArrayOfNumbers(t *testing.T) {
	for _, c := range []struct {
		in    string
		tuple int
		want  string
	}{
		{``, 0, "want a JSON array, got nothing"},
		{`null`, 0, "want a JSON array"},
		{`{"a":1}`, 0, "want a JSON array"},
		{`[1,2`, 0, "want , or ] after element 1"},
		{`[1 2]`, 0, "want , or ] after element 0"},
		{`[1,]`, 0, "number 1: json: want a non-negative integer"},
		{`[,1]`, 0, "number 0: json: want a non-negative integer"},
		{`[1,"2"]`, 0, "number 1: json: want a non-negative integer"},
		{`[1,[2]]`, 0, "number 1"},
		{`[-1]`, 0, "number 0: json: number -1 does not fit"},
		{`[1.5]`, 0, "does not fit"},
		{`[1e3]`, 0, "does not fit"},
		{`[18446744073709551616]`, 0, "does not fit"},
		{`[1] 2`, 0, `data after the array: "2"`},
		{`[1][2]`, 0, "data after the array"},
		{`[[1,2]]`, 3, "test[0]: want 3 numbers, got 2"},
		{`[[1,2,3,4]]`, 3, "test[0]: want 3 numbers, got more"},
		{`[1,2,3]`, 3, "test[0]: want an array of 3 numbers"},
		{`[[1,2,3],[4,5,x]]`, 3, "number 5"},
	} {
		_, err := decodeUintTuples([]byte(c.in), "test", c.tuple, 10, numberName)
		require.ErrorContains(t, err, c.want, c.in)
	}
}

// An array past its limit is refused at the element past it: the rest,
// however long or broken, is not read.
func TestDecodeUintTuplesRefusesPastTheLimitAtOnce(t *testing.T) {
	long := "[" + strings.Repeat("1,", 5) + "1" + strings.Repeat(",x", 1000) + "]"
	_, err := decodeUintTuples([]byte(long), "test", 0, 5, numberName)
	require.EqualError(t, err, "memory: test: more than 5 elements")
	_, err = decodeUintTuples([]byte(`[[1,2],[3,4],[5,6]]`), "test", 2, 2, numberName)
	require.EqualError(t, err, "memory: test: more than 2 elements")
	got, err := decodeUintTuples([]byte(`[[1,2],[3,4]]`), "test", 2, 2, numberName)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3, 4}, got)
}

// An array is read into one slice of its length, counted from its commas
// before any number is read, and one past the limit by its commas alone:
// no number of it is read or held. A 2^24-slot plan took 1.8 GB and 9 s
// while the slice grew by appending.
func TestDecodeUintTuplesReadsIntoOneSliceOfTheArraysLength(t *testing.T) {
	const n = 100_000
	flat := "[" + strings.Repeat("12345,", n-1) + "12345]"
	got, err := decodeUintTuples([]byte(flat), "test", 0, n, numberName)
	require.NoError(t, err)
	require.Len(t, got, n)
	require.Equal(t, n, cap(got), "the slice grew past the array's length")
	tuples := "[" + strings.Repeat("[1,2,3],", n-1) + "[1,2,3]]"
	got, err = decodeUintTuples([]byte(tuples), "test", 3, n, numberName)
	require.NoError(t, err)
	require.Equal(t, 3*n, cap(got))

	raw := []byte(flat)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = decodeUintTuples(raw, "test", 0, n-1, numberName)
	runtime.ReadMemStats(&after)
	require.EqualError(t, err, fmt.Sprintf("memory: test: more than %d elements", n-1))
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(n), "refusing an array past its limit allocated for its numbers")
}

// The scanner reads exactly what the general decoder reads from valid
// JSON (an array whose every element is a number ParseUint64 takes), and
// refuses what is not JSON, which the decoder is never given.
func FuzzDecodeUintTuples(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2,3]`, " [ 0 , 7 ]\n", `[1,]`, `[1 2]`, `[[1]]`, `["1"]`, `[1e2]`, `[-0]`, `[01]`, `[1]x`, `[null]`, `[true]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := decodeUintTuples([]byte(in), "test", 0, 64, numberName)
		if !stdjson.Valid([]byte(in)) {
			require.Error(t, err, "%q is not JSON", in)
			return
		}
		elems, slowErr := decodeArray([]byte(in), "test", 64)
		var want []uint64
		if slowErr == nil {
			for _, e := range elems {
				v, err := strictjson.ParseUint64(e)
				if err != nil {
					slowErr = err
					break
				}
				want = append(want, v)
			}
		}
		if (err == nil) != (slowErr == nil) {
			t.Fatalf("%q: scanner says %v, the general decoder %v", in, err, slowErr)
		}
		if err == nil {
			require.Equal(t, len(want), len(got))
			for i := range want {
				require.Equal(t, want[i], got[i])
			}
		}
	})
}

// A layout file padded with spaces, gzipped (a megabyte that unpacks to
// hundreds), reads as the unpadded one: the padding is dropped as it is
// read, so it is neither held nor parsed.
func TestAPaddedLayoutFileReadsAsTheUnpaddedOne(t *testing.T) {
	plain := `{"Virtual":{"planned_bytes":4096,"slots":[16,0,32,16]}}`
	padded := `{"Virtual":{"planned_bytes":4096,"slots":[16,0,32,16` + strings.Repeat(" ", 32<<20) + `]}}`
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o644))
		return path
	}
	want, err := ReadLayoutFile(write("plain.json", []byte(plain)))
	require.NoError(t, err)
	got, err := ReadLayoutFile(write("padded.json.gz", gzread.Pack([]byte(padded))))
	require.NoError(t, err)
	require.True(t, want.Equal(got))
}
