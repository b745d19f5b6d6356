package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gen"
	"github.com/vkrt/vkrt/internal/gzread"
	"github.com/vkrt/vkrt/internal/strictjson"
	"github.com/vkrt/vkrt/internal/tracetest"
)

// A plan written gzipped reads back as the same plan, by ReadFile and by
// IsFileHead, and a plan of thousands of slots shrinks to a fraction.
func TestAGzippedPlanFileReadsBackTheSamePlan(t *testing.T) {
	tr := gen.Run(3, gen.Generation, 1)
	pf, err := Runs([]*trace.Trace{tr}, Options{Strength: Strong})
	require.NoError(t, err)
	plain, err := pf.Encode(false)
	require.NoError(t, err)
	packed, err := pf.Encode(true)
	require.NoError(t, err)
	require.Equal(t, byte('\n'), plain[len(plain)-1], "a plan file ends its line")
	require.Less(t, 8*len(packed), len(plain), "gzip takes a plan of %d allocations from %d B to %d B", tr.Allocations, len(plain), len(packed))

	// Padded between its tokens (as an editor's pretty-printing does, or a
	// file made to cost its reader memory), it reads as it was.
	padded := bytes.ReplaceAll(plain, []byte(","), []byte(" ,\n\t "))
	padded = bytes.Replace(padded, []byte("["), []byte("[ "+strings.Repeat(" ", 8<<20)), 1)
	dir := t.TempDir()
	for name, data := range map[string][]byte{"plan.json": plain, "plan.json.gz": packed, "padded.json.gz": gzread.Pack(padded)} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o644))
		back, err := ReadFile(path)
		require.NoError(t, err, name)
		require.True(t, back.Layout.Equal(pf.Layout), name)
		require.Equal(t, pf.Device, back.Device, name)
		require.Equal(t, pf.Granule, back.Granule, name)
		require.True(t, IsFileHead(bytes.NewReader(data)), name)
	}
	require.True(t, CompressedName("plan.json.gz"))
	require.False(t, CompressedName("plan.json"))
	require.False(t, IsFileHead(bytes.NewReader(gzread.Pack([]byte(`{"Virtual":{"planned_bytes":1}}`)))), "a gzipped layout is no plan file")
}

// A gzip stream cut short, one that is not gzip past its magic, and one
// that unpacks past the limit are each a clear ErrPlanFile, however small
// the file: the limit bounds what it holds, not its compressed size.
func TestABrokenOrOversizedGzippedPlanFileIsRefused(t *testing.T) {
	tr := gen.Run(1, gen.ConvTraining, 1)
	pf, err := Runs([]*trace.Trace{tr}, Options{Strength: Strong})
	require.NoError(t, err)
	packed, err := pf.Encode(true)
	require.NoError(t, err)

	_, _, err = readBounded(bytes.NewReader(packed[:len(packed)/2]), 1<<30)
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, "gzip stream that cannot be read")

	_, _, err = readBounded(bytes.NewReader([]byte{0x1f, 0x8b, 'n', 'o', 't'}), 1<<30)
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, "gzip stream that cannot be read")

	zeros := gzread.Pack(make([]byte, 1<<20))
	require.Less(t, len(zeros), 4<<10)
	_, _, err = readBounded(bytes.NewReader(zeros), 1<<19)
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, "gunzipped, it is larger than 524288 bytes")

	_, _, err = readBounded(bytes.NewReader(make([]byte, 1<<20)), 1<<19)
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, "it is larger than 524288 bytes")

	// One plan a file: data after the plan's gzip members that is not one
	// is refused; another member is read on, as gzip -d reads it, so a
	// plan split in two members (bgzip's) is the plan, and a second plan
	// in one is data after the plan's JSON.
	_, _, err = readBounded(bytes.NewReader(append(slices.Clip(packed), '\n')), 1<<30)
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorContains(t, err, "data after the plan's gzip stream")
	_, err = Read(bytes.NewReader(append(slices.Clip(packed), gzread.Pack([]byte("{}"))...)), "two plans")
	require.ErrorIs(t, err, ErrPlanFile)
	plain, err := pf.Encode(false)
	require.NoError(t, err)
	split := append(gzread.Pack(plain[:len(plain)/2]), gzread.Pack(plain[len(plain)/2:])...)
	back2, err := Read(bytes.NewReader(split), "split")
	require.NoError(t, err)
	require.True(t, back2.Layout.Equal(pf.Layout))
	data, _, err := readBounded(bytes.NewReader(packed), 1<<30)
	require.NoError(t, err)
	back, err := DecodeFile(data)
	require.NoError(t, err)
	require.True(t, back.Layout.Equal(pf.Layout))
}

// FuzzReadGzippedPlan: any bytes, gzipped or not, are a plan file or an
// error matching ErrPlanFile, never more than the limit read.
func FuzzReadGzippedPlan(f *testing.F) {
	// A small plan: the fuzzer minimises what it finds, and a seed of a
	// long stream's plan takes it most of a minute each time.
	tr := tracetest.Inline(f, "a 1 3000000 0\na 2 5000000 0\nf 1\na 3 9000000 0\nf 2\nf 3\n")
	pf, err := Runs([]*trace.Trace{tr}, Options{Strength: Strong})
	require.NoError(f, err)
	for _, compressed := range []bool{false, true} {
		data, err := pf.Encode(compressed)
		require.NoError(f, err)
		f.Add(data)
		f.Add(data[:len(data)/3])
	}
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 20
		plain, _, err := readBounded(bytes.NewReader(data), limit)
		if err != nil {
			require.ErrorIs(t, err, ErrPlanFile)
			return
		}
		require.LessOrEqual(t, len(plain), limit)
		if _, err := DecodeFile(plain); err != nil {
			require.ErrorIs(t, err, ErrPlanFile)
		}
	})
}

// A plan file's strings are names: text past memory.MaxLayoutStringBytes
// in them is refused as it is read, before the rest is. A trace name of
// 128 MiB, gzipped small, which the decoder took whole (a gigabyte
// took 6.4 GB and 29 s), is refused after 32 MiB of it.
func TestAPlanFileWithAGiantNameIsRefusedAsItIsRead(t *testing.T) {
	head := []byte(`{"vkrt_plan":4,"device":{"alignment":16,"max_page_size":4294967280,"memory_size":150000000000,"sparse_granule":65536},"traces":["`)
	tail := []byte(`"],"layout":"Direct"}`)
	packed := gzread.Pack(slices.Concat(head, bytes.Repeat([]byte{'x'}, 128<<20), tail))
	read := countingReader{r: bytes.NewReader(packed)}
	_, err := Read(&read, "giant name")
	require.ErrorIs(t, err, ErrPlanFile)
	require.ErrorIs(t, err, strictjson.ErrStringBytes)
	require.ErrorContains(t, err, "more than 33554432 bytes in strings")
	// The bound is a fourth of the name: the read stopped near it.
	require.Less(t, read.n, int64(len(packed))/2, "read %d of %d packed bytes", read.n, len(packed))

	// 65,536 names of 256 bytes, the most a file names, pass.
	names := make([]string, MaxFileTraces)
	for i := range names {
		names[i] = fmt.Sprintf("%0254d", i) // 256 bytes quoted
	}
	many, err := json.Marshal(names)
	require.NoError(t, err)
	f, err := Read(bytes.NewReader(slices.Concat(head[:len(head)-2], many, tail[2:])), "many names")
	require.NoError(t, err)
	require.Len(t, f.Traces, MaxFileTraces)
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
