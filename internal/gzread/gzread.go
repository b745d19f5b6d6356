// Package gzread reads the whole of a file that may be gzipped, bounded by
// what it unpacks to rather than by its size on disk, so that a small file
// cannot unpack to gigabytes, and packs one. Plan and layout files are read
// through it.
package gzread

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// magic starts every gzip stream.
var magic = []byte{0x1f, 0x8b}

// ErrUnreadable is a gzip stream that cannot be read to its end: cut
// short, or not gzip past its first two bytes.
var ErrUnreadable = errors.New("a gzip stream that cannot be read")

// ErrTrailing is data after a file's gzip members that is not another
// member.
var ErrTrailing = errors.New("data after the gzip stream")

// TooLargeError is more than Limit bytes, unpacked from gzip or not.
type TooLargeError struct {
	Limit   int64
	Gzipped bool
}

func (e *TooLargeError) Error() string {
	if e.Gzipped {
		return fmt.Sprintf("gunzipped, it is larger than %d bytes", e.Limit)
	}
	return fmt.Sprintf("it is larger than %d bytes", e.Limit)
}

// IsGzip reports whether head starts a gzip stream.
func IsGzip(head []byte) bool { return bytes.HasPrefix(head, magic) }

// Reader is r unpacked where it starts a gzip stream, and r as it is
// otherwise; err is ErrUnreadable for a gzip header that cannot be read.
func Reader(r io.Reader) (_ io.Reader, gzipped bool, err error) {
	br := bufio.NewReader(r)
	zr, err := unpacker(br)
	switch {
	case err != nil:
		return nil, true, err
	case zr == nil:
		return br, false, nil
	}
	return zr, true, nil
}

// unpacker is a gzip reader of br where br starts a gzip stream, nil
// where it does not.
func unpacker(br *bufio.Reader) (*gzip.Reader, error) {
	if head, err := br.Peek(len(magic)); err != nil || !IsGzip(head) {
		return nil, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, broken(err)
	}
	return zr, nil
}

// broken is err, from reading a gzip stream, as ErrUnreadable where the
// stream is at fault (cut short, not gzip, failing its checksum), and as
// it is where the reader under it failed: a disk failing inside a gzipped
// file was a broken stream, though the same failure in a plain file was
// returned as it is.
func broken(err error) error {
	var corrupt flate.CorruptInputError
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, gzip.ErrHeader) ||
		errors.Is(err, gzip.ErrChecksum) || errors.As(err, &corrupt) {
		return fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	return err
}

// ReadAll reads all of r, unpacked where it is gzip (its members one after
// the other, as gzip -d gives them: bgzip and gzip -c a >>f write several),
// and refuses more than limit bytes (a *TooLargeError), a gzip stream it
// cannot read (ErrUnreadable) and anything after the members that is not
// one (ErrTrailing). Errors reading r itself are returned as they are.
func ReadAll(r io.Reader, limit int64) (data []byte, gzipped bool, err error) {
	return ReadAllWith(r, limit, nil)
}

// ReadAllWith is ReadAll passing each piece it reads through add, which
// appends to data what it makes of the piece (nil: the piece as it is):
// a reader that drops most of what it reads (the padding of a JSON file)
// holds what it keeps alone. limit bounds the bytes read, not those kept.
// An error from add ends the read, and is returned as it is.
func ReadAllWith(r io.Reader, limit int64, add func(data, piece []byte) ([]byte, error)) (data []byte, gzipped bool, err error) {
	br := bufio.NewReader(r)
	zr, err := unpacker(br)
	if err != nil {
		return nil, true, err
	}
	var src io.Reader = br
	if zr != nil {
		// Each member is read to its end, and what follows it told apart
		// here: another member, or data that is not one.
		zr.Multistream(false)
		src, gzipped = zr, true
	}
	if add == nil {
		add = func(data, piece []byte) ([]byte, error) { return append(data, piece...), nil }
	}
	piece := make([]byte, 64<<10)
	var read int64
	for {
		n, err := src.Read(piece)
		if read += int64(n); read > limit {
			return nil, gzipped, &TooLargeError{Limit: limit, Gzipped: gzipped}
		}
		var addErr error
		if data, addErr = add(data, piece[:n]); addErr != nil {
			return nil, gzipped, addErr
		}
		if err == io.EOF && gzipped {
			next, perr := br.Peek(len(magic))
			switch {
			case IsGzip(next):
				if err := zr.Reset(br); err != nil {
					return nil, true, broken(err)
				}
				zr.Multistream(false)
				continue
			case len(next) == 0 && perr == io.EOF:
				// The last member ends the file.
			case perr != nil && perr != io.EOF:
				return nil, true, perr
			default:
				return nil, true, ErrTrailing
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if gzipped {
				return nil, true, broken(err)
			}
			return nil, false, err
		}
	}
	if data == nil {
		data = []byte{}
	}
	return data, gzipped, nil
}

// Pack is data as one gzip stream, at the best compression: files packed
// once and read many times.
func Pack(data []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // a valid level
	// Writes to a bytes.Buffer do not fail.
	_, _ = zw.Write(data)
	_ = zw.Close()
	return buf.Bytes()
}
