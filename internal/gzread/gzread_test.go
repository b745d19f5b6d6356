package gzread

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

func TestReadAllTakesPlainAndGzippedAlike(t *testing.T) {
	require.True(t, IsGzip(Pack(nil)))
	doc := []byte(`{"Virtual":{"planned_bytes":0}}` + "\n")
	for _, in := range [][]byte{doc, Pack(doc)} {
		data, gz, err := ReadAll(bytes.NewReader(in), 1<<10)
		require.NoError(t, err)
		require.Equal(t, doc, data)
		require.Equal(t, IsGzip(in), gz)
	}
	data, gz, err := ReadAll(bytes.NewReader(nil), 1<<10)
	require.NoError(t, err)
	require.Empty(t, data)
	require.False(t, gz)

	r, gz, err := Reader(bytes.NewReader(Pack(doc)))
	require.NoError(t, err)
	require.True(t, gz)
	back, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, doc, back)
}

// The limit bounds what a file unpacks to, whatever its size on disk; a
// stream cut short, a corrupt one and data after it are refused by class.
func TestReadAllRefusesBombsAndBrokenStreams(t *testing.T) {
	bomb := Pack(make([]byte, 1<<20))
	require.Less(t, len(bomb), 4<<10)
	_, _, err := ReadAll(bytes.NewReader(bomb), 1<<19)
	var tooLarge *TooLargeError
	require.ErrorAs(t, err, &tooLarge)
	require.Equal(t, &TooLargeError{Limit: 1 << 19, Gzipped: true}, tooLarge)
	require.EqualError(t, err, "gunzipped, it is larger than 524288 bytes")
	_, _, err = ReadAll(bytes.NewReader(make([]byte, 1<<20)), 1<<19)
	require.EqualError(t, err, "it is larger than 524288 bytes")
	data, _, err := ReadAll(bytes.NewReader(bomb), 1<<20)
	require.NoError(t, err, "exactly the limit is within it")
	require.Len(t, data, 1<<20)

	doc := Pack([]byte(`"direct"`))
	flipped := bytes.Clone(doc)
	flipped[len(flipped)-6] ^= 0xff // the checksum
	for name, in := range map[string][]byte{
		"cut":      doc[:len(doc)-3],
		"not gzip": {0x1f, 0x8b, 'n', 'o', 't'},
		"checksum": flipped,
	} {
		_, gz, err := ReadAll(bytes.NewReader(in), 1<<10)
		require.ErrorIs(t, err, ErrUnreadable, name)
		require.True(t, gz, name)
	}
	_, _, err = Reader(bytes.NewReader([]byte{0x1f, 0x8b, 'n', 'o', 't'}))
	require.ErrorIs(t, err, ErrUnreadable)

	// Data after the members that is not one is refused; another member
	// is read on, as gzip -d reads it.
	for _, tail := range [][]byte{[]byte("\n"), {0x1f}, append(bytes.Clone(doc), 'x')} {
		_, _, err := ReadAll(bytes.NewReader(append(bytes.Clone(doc), tail...)), 1<<10)
		require.ErrorIs(t, err, ErrTrailing)
	}

	// A failing reader's error comes back as it is.
	boom := errors.New("boom")
	_, _, err = ReadAll(iotest.ErrReader(boom), 1<<10)
	require.ErrorIs(t, err, boom)
}

// ReadAllWith holds what add keeps, not what it reads: 64 MiB unpacked
// from a gzipped file, of which add keeps every 4096th byte, take a
// buffer of about 16 KiB. The limit is on what is read.
func TestReadAllWithHoldsWhatItKeeps(t *testing.T) {
	packed := Pack(bytes.Repeat([]byte{'x'}, 64<<20))
	var seen int
	keepFew := func(data, piece []byte) ([]byte, error) {
		for _, c := range piece {
			if seen%4096 == 0 {
				data = append(data, c)
			}
			seen++
		}
		return data, nil
	}
	data, gzipped, err := ReadAllWith(bytes.NewReader(packed), 64<<20, keepFew)
	require.NoError(t, err)
	require.True(t, gzipped)
	require.Equal(t, 64<<20, seen)
	require.Len(t, data, 16<<10)
	require.Less(t, cap(data), 64<<10)

	seen = 0
	_, _, err = ReadAllWith(bytes.NewReader(packed), 64<<20-1, keepFew)
	var tooLarge *TooLargeError
	require.ErrorAs(t, err, &tooLarge, "the limit counts what is read")

	// add's error ends the read there.
	boom := errors.New("boom")
	seen = 0
	_, _, err = ReadAllWith(bytes.NewReader(packed), 64<<20, func(data, piece []byte) ([]byte, error) {
		if seen += len(piece); seen > 1<<20 {
			return nil, boom
		}
		return data, nil
	})
	require.ErrorIs(t, err, boom)
	require.Less(t, seen, 2<<20, "nothing was read past the piece add refused")
}

// A file of several gzip members (bgzip's, or gzip -c a >>f) reads as gzip
// -d gives it, the members one after the other, bounded by the limit over
// them all: it was refused as data after the gzip stream.
func TestReadAllReadsEveryMember(t *testing.T) {
	in := append(Pack([]byte(`{"Sliced":[{"page_`)), Pack([]byte(`size":4096}]}`))...)
	in = append(in, Pack(nil)...) // an empty member
	data, gz, err := ReadAll(bytes.NewReader(in), 1<<10)
	require.NoError(t, err)
	require.True(t, gz)
	require.Equal(t, `{"Sliced":[{"page_size":4096}]}`, string(data))
	_, _, err = ReadAll(bytes.NewReader(in), 20)
	var tooLarge *TooLargeError
	require.ErrorAs(t, err, &tooLarge, "the limit counts every member")
	_, _, err = ReadAll(bytes.NewReader(append(bytes.Clone(in), 0x1f, 0x8b, 'n', 'o', 't')), 1<<10)
	require.ErrorIs(t, err, ErrUnreadable, "a member that is not gzip past its magic")
}

// A reader that fails inside a gzip stream (a disk failing, a pipe's
// writer dying) is no broken stream: its error comes back as it is, as it
// does for a plain file, and not as ErrUnreadable, whether it fails in the
// header, in a member or between members.
func TestAReaderFailingInsideAGzipStreamIsNotABrokenStream(t *testing.T) {
	doc := Pack(bytes.Repeat([]byte(`"direct" `), 1<<12))
	boom := errors.New("boom")
	for name, in := range map[string]io.Reader{
		"header":          io.MultiReader(bytes.NewReader(doc[:5]), iotest.ErrReader(boom)),
		"member":          io.MultiReader(bytes.NewReader(doc[:len(doc)/2]), iotest.ErrReader(boom)),
		"between members": io.MultiReader(bytes.NewReader(doc), bytes.NewReader(doc[:1]), iotest.ErrReader(boom)),
	} {
		_, _, err := ReadAll(in, 1<<20)
		require.ErrorIs(t, err, boom, name)
		require.NotErrorIs(t, err, ErrUnreadable, name)
	}
	_, _, err := Reader(io.MultiReader(bytes.NewReader(doc[:5]), iotest.ErrReader(boom)))
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, ErrUnreadable)
}
