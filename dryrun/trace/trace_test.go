package trace_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/tracetest"
)

func TestReadTracePlainAndGzipAgree(t *testing.T) {
	text := "a 7 100 0\n\n# a comment\na 3 2048 1\r\nf 7\n  a\t9 16 0\nf 3\n"
	plain, err := trace.Read("plain", strings.NewReader(text))
	require.NoError(t, err)
	require.Equal(t, 3, plain.Allocations)
	require.Equal(t, []trace.Event{
		{Op: trace.OpAlloc, Index: 0, Size: 100, Stream: 0, Line: 1},
		{Op: trace.OpAlloc, Index: 1, Size: 2048, Stream: 1, Line: 4},
		{Op: trace.OpFree, Index: 0, Line: 5},
		{Op: trace.OpAlloc, Index: 2, Size: 16, Stream: 0, Line: 6},
		{Op: trace.OpFree, Index: 1, Line: 7},
	}, plain.Events)
	require.Equal(t, uint64(2148), plain.PeakLiveBytes())

	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err = zw.Write([]byte(text))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	zipped, err := trace.Read("zipped", &buf)
	require.NoError(t, err)
	require.Equal(t, plain.Events, zipped.Events)
}

func TestReadTraceErrorsNameTheLine(t *testing.T) {
	cases := []struct {
		text   string
		line   int
		reason string
	}{
		{"a 1 10 0\nx 2\n", 2, "unknown event"},
		{"a 1 10\n", 1, "needs 3 fields"},
		{"a 1 10 0 9\n", 1, "needs 3 fields"},
		{"a one 10 0\n", 1, "id is not"},
		{"a 1 -10 0\n", 1, "bytes is not"},
		{"a 1 0 0\n", 1, "0 bytes"},
		{"a 1 10 -1\n", 1, "stream is not"},
		// Numbers past their field's bits are numbers all the same.
		{"a 1 10 4294967296\n", 1, "stream does not fit in 32 bits (at most 4294967295)"},
		{"a 0 18446744073709551616 0\n", 1, "bytes does not fit in 64 bits (at most 18446744073709551615)"},
		{"a 18446744073709551616 1 0\n", 1, "id does not fit in 64 bits"},
		{"a 1 10 0\nf 99999999999999999999\n", 2, "id does not fit in 64 bits"},
		// A repeated id or free names the line that came first.
		{"# ids from 7\na 7 10 0\na 8 10 0\na 7 10 0\n", 4, "id 7 was already used on line 2"},
		{"a 1 10 0\nf 2\n", 2, "never allocated"},
		{"\xef\xbb\xbfa 1 10 0\nf 1\n", 1, "starts with a UTF-8 byte-order mark"},
		{"\xef\xbb\xbf# made by hand\na 1 10 0\n", 1, "starts with a UTF-8 byte-order mark"},
		// As PowerShell's > writes it: it was an unknown event.
		{"\xff\xfea\x00 \x001\x00 \x001\x000\x00 \x000\x00\r\x00\n\x00", 1, "UTF-16 text"},
		{"\xfe\xff\x00a\x00 \x001\x00 \x001\x000\x00 \x000\x00\n", 1, "UTF-16 text"},
		{"a 1 10 0\na 2 10 0\nf 1\n\nf 2\nf 1\n", 6, "free of id 1, which line 3 already freed"},
		{"a 1 10 0\n\nf\n", 3, "needs 1 field"},
		{"a 1 10 0\n" + strings.Repeat("9", trace.MaxLine+1) + "\n", 2, "longer than"},
		{"a 1 10 0\n#" + strings.Repeat("x", trace.MaxLine) + "\r\n", 2, "longer than"},
		{"a 1 10 0\n#" + strings.Repeat("x", trace.MaxLine), 2, "longer than"},
	}
	for _, c := range cases {
		_, err := trace.Read("bad", strings.NewReader(c.text))
		require.ErrorIs(t, err, trace.ErrMalformed, c.text)
		var te *trace.LineError
		require.ErrorAs(t, err, &te)
		require.Equal(t, c.line, te.Line, c.text)
		require.Contains(t, te.Reason, c.reason)
		require.Contains(t, err.Error(), "bad line ")
	}
}

// A line of exactly the limit is taken, whatever its end: the limit was
// off by its newline, and a 4096-byte line was refused as longer than
// 4096 bytes.
func TestReadTakesALineOfTheLimit(t *testing.T) {
	comment := "#" + strings.Repeat("x", trace.MaxLine-1)
	for _, end := range []string{"\n", "\r\n", ""} {
		tr, err := trace.Read("t", strings.NewReader("a 1 10 0\n"+comment+end))
		require.NoError(t, err, "%q", end)
		require.Equal(t, 1, tr.Allocations)
	}
}

// The peak live bytes saturate where the sizes Read takes pass 2^64.
func TestPeakLiveBytesSaturates(t *testing.T) {
	tr, err := trace.Read("t", strings.NewReader("a 1 9223372036854775808 0\na 2 9223372036854775808 0\nf 1\nf 2\na 3 5 0\n"))
	require.NoError(t, err)
	require.Equal(t, uint64(math.MaxUint64), tr.PeakLiveBytes())
	tr, err = trace.Read("t", strings.NewReader("a 1 9223372036854775808 0\na 2 9223372036854775807 0\n"))
	require.NoError(t, err)
	require.Equal(t, uint64(math.MaxUint64), tr.PeakLiveBytes(), "2^64-1 exactly")
}

func TestReadTraceFileShippedTraces(t *testing.T) {
	for _, path := range tracetest.Shipped(t) {
		tr, err := trace.ReadFile(path)
		require.NoError(t, err, path)
		require.Equal(t, trace.NameOf(path), tr.Name)
		require.Greater(t, tr.Allocations, 0)
		frees := 0
		for _, e := range tr.Events {
			if e.Op == trace.OpFree {
				frees++
			}
		}
		require.Equal(t, len(tr.Events), tr.Allocations+frees)
	}
	_, err := trace.ReadFile(filepath.Join(t.TempDir(), "missing.trace"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestTraceWriteToRoundTrips(t *testing.T) {
	tr, err := trace.Read("t", strings.NewReader("a 50 10 2\na 9 20 0\nf 50\n"))
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = tr.WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, "a 0 10 2\na 1 20 0\nf 0\n", buf.String())
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte("a 1 100 0\nf 1\n"))
	f.Add([]byte("a 1 100 0\na 2 5 3\nf 2\nf 1\n# end\n"))
	f.Add([]byte("f 1\n"))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := trace.Read("fuzz", bytes.NewReader(data))
		if err != nil {
			require.ErrorIs(t, err, trace.ErrMalformed)
			return
		}
		// A parsed trace writes out and reads back to the same events.
		var buf bytes.Buffer
		_, err = tr.WriteTo(&buf)
		require.NoError(t, err)
		again, err := trace.Read("again", &buf)
		require.NoError(t, err)
		require.Equal(t, tr.Allocations, again.Allocations)
		require.Equal(t, len(tr.Events), len(again.Events))
		for i, e := range tr.Events {
			e.Line = again.Events[i].Line
			require.Equal(t, e, again.Events[i])
		}
	})
}

// storedGzip is s gzipped stored, not compressed: a byte of the text is a
// byte of the file.
func storedGzip(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	require.NoError(t, err)
	_, err = zw.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// A byte damaged inside a gzipped trace reads as a bad line before the
// checksum at the stream's end can tell: the error says the compressed
// data is corrupt, not that the line is, while a bad line in an intact
// stream is the line's.
func TestADamagedGzippedTraceIsCorruptDataNotABadLine(t *testing.T) {
	var text strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&text, "a %d %d 0\n", i, 1000+i)
	}
	whole := storedGzip(t, text.String())
	at := bytes.Index(whole, []byte("a 1000 2000 0"))
	require.Positive(t, at)
	damaged := bytes.Clone(whole)
	damaged[at] = '?'
	_, err := trace.Read("damaged", bytes.NewReader(damaged))
	require.ErrorIs(t, err, trace.ErrMalformed)
	require.ErrorContains(t, err, "corrupt compressed data: line 1001")
	var le *trace.LineError
	require.False(t, errors.As(err, &le), "no line is blamed: %v", err)

	edited := storedGzip(t, strings.Replace(text.String(), "a 1000 2000 0", "? 1000 2000 0", 1))
	_, err = trace.Read("edited", bytes.NewReader(edited))
	require.ErrorAs(t, err, &le, "an intact stream's bad line is the line's")
	require.Equal(t, 1001, le.Line)
}

// A block of a gzipped trace overwritten reads as a line too long before
// the checksum at the stream's end can tell: the error says the compressed
// data is corrupt, as it does for a bad line, while a line too long in an
// intact stream is the line's.
func TestADamagedGzippedTraceIsCorruptDataNotALineTooLong(t *testing.T) {
	var text strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&text, "a %d %d 0\n", i, 1000+i)
	}
	whole := storedGzip(t, text.String())
	at := bytes.Index(whole, []byte("a 1000 2000 0"))
	require.Positive(t, at)
	damaged := bytes.Clone(whole)
	copy(damaged[at:], bytes.Repeat([]byte{0}, 8192))
	_, err := trace.Read("damaged", bytes.NewReader(damaged))
	require.ErrorIs(t, err, trace.ErrMalformed)
	require.ErrorContains(t, err, "corrupt compressed data: line 1001: line longer than 4096 bytes, and the gzip stream fails its check")
	var le *trace.LineError
	require.False(t, errors.As(err, &le), "no line is blamed: %v", err)

	long := text.String()[:strings.Index(text.String(), "a 1000 2000 0")] + strings.Repeat("x", 8192) + "\n"
	_, err = trace.Read("edited", bytes.NewReader(storedGzip(t, long)))
	require.ErrorAs(t, err, &le, "an intact stream's line too long is the line's")
	require.Equal(t, 1001, le.Line)
	require.Equal(t, "line longer than 4096 bytes", le.Reason)
	_, err = trace.Read("plain", strings.NewReader(long))
	require.ErrorAs(t, err, &le)
	require.Equal(t, 1001, le.Line)
	require.Equal(t, "line longer than 4096 bytes", le.Reason)
	require.Empty(t, le.Text)
}

func TestReadTraceCutShortIsATruncatedGzipNotABadLine(t *testing.T) {
	var text strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&text, "a %d %d 0\n", i, 1000+i*7919%100003)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write([]byte(text.String()))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	whole := buf.Bytes()
	_, err = trace.Read("whole", bytes.NewReader(whole))
	require.NoError(t, err)
	// 2 to 9 bytes are a header cut short (10 bytes, the first two the
	// magic): it was malformed and not truncated.
	for _, cut := range []int{2, 5, 9, len(whole) / 3, len(whole) / 2, len(whole) - 9, len(whole) - 1} {
		_, err := trace.Read("cut", bytes.NewReader(whole[:cut]))
		require.ErrorIs(t, err, trace.ErrTruncated, "cut at %d of %d", cut, len(whole))
		require.ErrorIs(t, err, trace.ErrMalformed)
		var le *trace.LineError
		require.False(t, errors.As(err, &le), "no line is blamed: %v", err)
		require.ErrorContains(t, err, "cut short")
	}
}

func TestReadTraceEmptySaysItIsEmpty(t *testing.T) {
	for _, text := range []string{"", "\n\n", "# only a comment\n"} {
		_, err := trace.Read("nothing", strings.NewReader(text))
		require.ErrorIs(t, err, trace.ErrEmpty, "%q", text)
		require.ErrorIs(t, err, trace.ErrMalformed)
		require.ErrorContains(t, err, "nothing holds no events")
	}
}

func gzipped(t *testing.T, text string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write([]byte(text))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// Stray bytes after a whole gzip stream are not a stream cut short: they
// are named as what they are. Members one after another (cat a.gz b.gz)
// read as one stream, as gzip(1) reads them.
func TestReadTraceDataAfterTheGzipStream(t *testing.T) {
	whole := gzipped(t, "a 1 10 0\na 2 20 0\n")
	for _, junk := range []string{"garbage\n", "x", strings.Repeat("junk ", 10), "\x1f"} {
		_, err := trace.Read("junk", bytes.NewReader(append(slices.Clone(whole), junk...)))
		require.ErrorIs(t, err, trace.ErrMalformed, "%q", junk)
		require.NotErrorIs(t, err, trace.ErrTruncated, "%q", junk)
		require.ErrorContains(t, err, "data after the end of the gzip stream, after line 2", "%q", junk)
	}
	two, err := trace.Read("two", bytes.NewReader(append(slices.Clone(whole), gzipped(t, "f 1\nf 2\n")...)))
	require.NoError(t, err)
	require.Len(t, two.Events, 4)
	require.Equal(t, 4, two.Events[3].Line)
}

// ReadFile's errors name the file, not only the trace's name: two runs of
// one workload in two directories have the same name.
func TestReadTraceFileErrorsNameThePath(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	bad := write("bad.trace.gz", gzipped(t, "a 1 10 0\nf 2\n"))
	_, err := trace.ReadFile(bad)
	var le *trace.LineError
	require.ErrorAs(t, err, &le)
	require.Equal(t, "bad", le.Name)
	require.ErrorContains(t, err, bad+" line 2: free of id 2")
	for _, p := range []string{
		write("empty.trace", nil),
		write("cut.trace.gz", gzipped(t, "a 1 10 0\n")[:15]),
	} {
		_, err := trace.ReadFile(p)
		require.ErrorIs(t, err, trace.ErrMalformed)
		require.ErrorContains(t, err, p)
	}
}

func TestNameOfEscapesWhatATerminalActsOn(t *testing.T) {
	require.Equal(t, "gpt2_train", trace.NameOf("/x/gpt2_train.trace.gz"))
	require.Equal(t, "naïve run", trace.NameOf("naïve run.trace"))
	// A name of the suffixes alone is kept whole, not made empty.
	require.Equal(t, ".trace", trace.NameOf("/x/.trace"))
	require.Equal(t, ".trace.gz", trace.NameOf("/x/.trace.gz"))
	require.Equal(t, ".gz", trace.NameOf(".gz"))
	require.Equal(t, `"ev\nil\x1b[31m"`, trace.NameOf("/tmp/ev\nil\x1b[31m.trace"))
	// Bytes that are not UTF-8 (0x9b is a terminal's 8-bit CSI) are
	// escaped too: each decodes as U+FFFD, which is printable.
	require.Equal(t, `"a\x9b31mb"`, trace.NameOf("/tmp/a\x9b31mb.trace"))
	// An escaped name is quoted, so it does not read as a file named with
	// the escape's characters.
	require.NotEqual(t, trace.NameOf("/tmp/new\nline.trace"), trace.NameOf(`/tmp/new\nline.trace`))
	require.Equal(t, `new\nline`, trace.NameOf(`/tmp/new\nline.trace`))
}

// ReadFileProgress reads what ReadFile reads, and tells how far it has
// read the file, up to its whole size, in steps of at least a mebibyte.
func TestReadFileProgressTellsTheBytesRead(t *testing.T) {
	var text strings.Builder
	for i := range 300_000 {
		fmt.Fprintf(&text, "a %d %d 0\n", i, 64+i%4096)
	}
	path := filepath.Join(t.TempDir(), "long.trace")
	require.NoError(t, os.WriteFile(path, []byte(text.String()), 0o644))
	want, err := trace.ReadFile(path)
	require.NoError(t, err)
	var told [][2]int64
	got, err := trace.ReadFileProgress(path, func(read, size int64) { told = append(told, [2]int64{read, size}) })
	require.NoError(t, err)
	require.Equal(t, want.Events, got.Events)
	require.Greater(t, len(told), 2, "a file of several mebibytes is told more than once")
	size := int64(text.Len())
	for i, c := range told {
		require.Equal(t, size, c[1])
		if i > 0 && i < len(told)-1 {
			require.GreaterOrEqual(t, c[0]-told[i-1][0], int64(1<<20), "at most once a mebibyte, but for the end")
		}
	}
	require.Equal(t, size, told[len(told)-1][0], "the whole file was read")
}

func TestWhereNamesTheLineOrTheAllocation(t *testing.T) {
	require.Equal(t, "line 7", (&trace.Event{Op: trace.OpFree, Index: 2, Line: 7}).Where())
	require.Equal(t, "allocation 3", (&trace.Event{Op: trace.OpAlloc, Index: 2}).Where())
	require.Equal(t, "free of allocation 3", (&trace.Event{Op: trace.OpFree, Index: 2}).Where())
}

// A bad line in a gzipped stream that never ends (`yes 'a 1 1 0' | gzip`
// into a pipe) is blamed once a bounded part of the rest is unpacked and
// has not failed its check: the rest was read for ever to find the
// checksum at the stream's end.
func TestABadLineInAnEndlessGzippedStreamIsBlamedInTime(t *testing.T) {
	defer trace.SetMaxCheckedRest(trace.SetMaxCheckedRest(1 << 20))
	pr, pw := io.Pipe()
	go func() {
		zw := gzip.NewWriter(pw)
		_, err := zw.Write([]byte("a 1 1 0\na 1 1 0\n"))
		pad := []byte(strings.Repeat("# padding\n", 1000))
		for err == nil {
			_, err = zw.Write(pad)
		}
	}()
	defer pr.Close() // the writer stops
	done := make(chan error, 1)
	go func() {
		_, err := trace.Read("endless", pr)
		done <- err
	}()
	select {
	case err := <-done:
		var le *trace.LineError
		require.ErrorAs(t, err, &le)
		require.Equal(t, 2, le.Line)
		require.Contains(t, le.Reason, "already used on line 1")
	case <-time.After(20 * time.Second):
		t.Fatal("Read still reading an endless stream after a bad line")
	}
}

// utf16 is s as UTF-16 with no byte-order mark, little- or big-endian.
func utf16(s string, bigEndian bool) string {
	var b []byte
	for _, c := range []byte(s) {
		if bigEndian {
			b = append(b, 0, c)
		} else {
			b = append(b, c, 0)
		}
	}
	return string(b)
}

// A trace in UTF-16 with no byte-order mark, and one whose lines end in
// \r alone, say so: they were an unknown event "a\x00 \x001\x00 …", a line
// of too many fields, a line too long, or a trace of no events.
func TestReadTraceSaysItIsMisencoded(t *testing.T) {
	const utf16Reason, crReason = "UTF-16 text with no byte-order mark", "lines end in a carriage return alone"
	events := "a 1 10 0\r\nf 1\r\n"
	long := strings.Repeat("a 1 10 0\rf 1\r", 1000)
	for _, c := range []struct {
		text   string
		line   int
		reason string
	}{
		{utf16(events, false), 1, utf16Reason},
		{utf16(events, true), 1, utf16Reason},
		{utf16("a 1 10 0\n", true), 1, utf16Reason},
		// A comment in UTF-16LE reads as one; the line after it, led by
		// the NUL of the comment's line feed, does not.
		{utf16("# by hand\n"+events, false), 2, utf16Reason},
		{"a 1 10 0\rf 1\r", 1, crReason},
		{"a 1 10 0\r f 1\r", 1, crReason},
		{"a 1 10 0\r# done\r", 1, crReason},
		{long, 1, crReason},
		{"# made by hand" + long, 1, crReason},
		{"a 1 10 0\n" + long[:trace.MaxLine+3], 2, crReason},
	} {
		_, err := trace.Read("bad", strings.NewReader(c.text))
		require.ErrorIs(t, err, trace.ErrMalformed, "%q", c.text)
		var le *trace.LineError
		require.ErrorAs(t, err, &le, "%q", c.text[:min(len(c.text), 40)])
		require.Equal(t, c.line, le.Line)
		require.Contains(t, le.Reason, c.reason)
	}
	_, err := trace.Read("bad", strings.NewReader("# made by hand\ra 1 10 0\rf 1\r"))
	require.ErrorIs(t, err, trace.ErrEmpty)
	require.ErrorContains(t, err, crReason)
	require.ErrorContains(t, err, "a comment took the events after it")
	_, err = trace.Read("bad", strings.NewReader("# made by hand\n\n"))
	require.ErrorIs(t, err, trace.ErrEmpty)
	require.NotContains(t, err.Error(), crReason)

	// Lines refused for another reason are told as before.
	for text, reason := range map[string]string{
		"a 1 10 0 7\r8\n": "needs 3 fields",
		"a 1 10\rx 0 0\n": "needs 3 fields",
		"a 1 1\x000 0\n":  "bytes is not",
		"\x00a 1 10 0\n":  "unknown event",
	} {
		_, err := trace.Read("bad", strings.NewReader(text))
		var le *trace.LineError
		require.ErrorAs(t, err, &le, "%q", text)
		require.Contains(t, le.Reason, reason, "%q", text)
		require.NotContains(t, le.Reason, "UTF-16", "%q", text)
		require.NotContains(t, le.Reason, "carriage return", "%q", text)
	}
}

// Traces Read takes are taken still: a NUL or a carriage return followed
// by an event in a comment, a carriage return between fields.
func TestReadTraceTakesCarriageReturnsAndNULsWhereItDid(t *testing.T) {
	for _, text := range []string{
		"# a\x00b\x00\na 1 10 0\nf 1\n",
		"# notes\ra 1 10 0\na 1 10 0\nf 1\r\n",
		"a 1\r10 0\nf\r1\n",
		"a 1 10 0\r\r\nf 1\r",
		utf16("#", false) + "\na 1 10 0\n",
	} {
		tr, err := trace.Read("ok", strings.NewReader(text))
		require.NoError(t, err, "%q", text)
		require.Equal(t, 1, tr.Allocations)
	}
}

// A trace read with no name is called "trace" in every error, as a bad
// line of it is ("trace: trace line 2: …"): the errors that name the
// stream rather than a line named nothing ("trace: empty:  holds no
// events").
func TestReadWithNoNameCallsItTrace(t *testing.T) {
	var packed bytes.Buffer
	zw := gzip.NewWriter(&packed)
	_, err := zw.Write([]byte("a 1 10 0\n"))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	for _, c := range []struct{ in, want string }{
		{"", "trace: empty: trace holds no events (0 lines)"},
		{"# c\n", "trace: empty: trace holds no events (1 line)"},
		{"\x1f\x8b", "trace: truncated: trace: the gzip stream is cut short in its header"},
		{packed.String()[:packed.Len()-4], "trace: truncated: trace: the gzip stream is cut short after line 1"},
		{packed.String() + "x", "trace: malformed: trace: data after the end of the gzip stream, after line 1"},
		{"a 1 10 0\nf 2\n", "trace: trace line 2: free of id 2, which was never allocated"},
	} {
		_, err := trace.Read("", strings.NewReader(c.in))
		require.ErrorIs(t, err, trace.ErrMalformed, "%q", c.in)
		require.ErrorContains(t, err, c.want, "%q", c.in)
		require.NotContains(t, err.Error(), ": :", "%q", c.in)
		require.NotContains(t, err.Error(), "  ", "%q", c.in)
	}
}

// A read that fails before any line is told so, and a directory given for
// a trace is named once: "trace: reading DIR after line 0: read DIR: is a
// directory".
func TestReadFailingBeforeAnyLineSaysSo(t *testing.T) {
	dir := t.TempDir()
	_, err := trace.ReadFile(dir)
	require.ErrorIs(t, err, syscall.EISDIR)
	require.EqualError(t, err, "trace: read "+dir+": is a directory")

	_, err = trace.Read("n", iotest.ErrReader(errors.New("disk on fire")))
	require.EqualError(t, err, "trace: reading n: disk on fire")
	_, err = trace.Read("n", io.MultiReader(strings.NewReader("a 1 1 0\n"), iotest.ErrReader(errors.New("disk on fire"))))
	require.EqualError(t, err, "trace: reading n after line 1: disk on fire")
}
