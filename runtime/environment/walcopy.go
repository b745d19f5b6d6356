package environment

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
)

// The write-ahead log's format (sqlite.org/fileformat2.html#walformat): a
// 32-byte header, then frames of a 24-byte header and a page each. A frame
// counts only while its salts are the header's and its checksum, which
// runs on from the frame before, holds; SQLite reads the log up to the
// last such frame that ends a transaction (a commit frame).
const (
	walHeaderBytes      = 32
	walFrameHeaderBytes = 24
	walMagicLittle      = 0x377f0682 // checksums of little-endian words
	walMagicBig         = 0x377f0683 // checksums of big-endian words
	walVersion          = 3007000
)

// copyLog copies the part of the write-ahead log at from that SQLite would
// read, the header and the frames up to the last valid commit, to a new
// file at to. Copying the log whole let a log of garbage (a sparse file of
// a gigabyte, made with truncate) fill the temporary directory; a log
// with no valid header is copied empty, as SQLite ignores it.
func copyLog(from, to string) error {
	return copyInto(from, to, func(src io.Reader, dst *os.File) error {
		w := bufio.NewWriter(dst)
		committed, err := copyCommittedFrames(bufio.NewReaderSize(src, 1<<16), w)
		if err == nil {
			err = w.Flush()
		}
		if err == nil {
			// Frames past the last commit were written as they came: cut them.
			err = dst.Truncate(committed)
		}
		return err
	})
}

// copyCommittedFrames copies the log from r to w and returns how many of
// the bytes written end with its last valid commit frame (0 where none).
func copyCommittedFrames(r io.Reader, w io.Writer) (int64, error) {
	header := make([]byte, walHeaderBytes)
	if _, err := io.ReadFull(r, header); err != nil {
		return 0, ignoreShortRead(err)
	}
	var order binary.ByteOrder
	switch binary.BigEndian.Uint32(header) {
	case walMagicLittle:
		order = binary.LittleEndian
	case walMagicBig:
		order = binary.BigEndian
	default:
		return 0, nil
	}
	pageSize := binary.BigEndian.Uint32(header[8:])
	if binary.BigEndian.Uint32(header[4:]) != walVersion || pageSize < 512 || pageSize > 65536 || pageSize&(pageSize-1) != 0 {
		return 0, nil
	}
	s0, s1 := walChecksum(order, header[:24], 0, 0)
	if s0 != binary.BigEndian.Uint32(header[24:]) || s1 != binary.BigEndian.Uint32(header[28:]) {
		return 0, nil
	}
	if _, err := w.Write(header); err != nil {
		return 0, err
	}
	written, committed := int64(walHeaderBytes), int64(0)
	frame := make([]byte, walFrameHeaderBytes+int(pageSize))
	for {
		if _, err := io.ReadFull(r, frame); err != nil {
			return committed, ignoreShortRead(err)
		}
		if string(frame[8:16]) != string(header[16:24]) { // the salts
			return committed, nil
		}
		s0, s1 = walChecksum(order, frame[:8], s0, s1)
		s0, s1 = walChecksum(order, frame[walFrameHeaderBytes:], s0, s1)
		if s0 != binary.BigEndian.Uint32(frame[16:]) || s1 != binary.BigEndian.Uint32(frame[20:]) {
			return committed, nil
		}
		if _, err := w.Write(frame); err != nil {
			return 0, err
		}
		written += int64(len(frame))
		if binary.BigEndian.Uint32(frame[4:]) != 0 { // the database's size after a commit
			committed = written
		}
	}
}

// ignoreShortRead: a log that ends part-way through a header or frame
// ends there, as SQLite reads it; other read errors stand.
func ignoreShortRead(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	return err
}

// walChecksum runs the log's checksum over b (a multiple of 8 bytes) from
// s0, s1, reading b as 32-bit words in order.
func walChecksum(order binary.ByteOrder, b []byte, s0, s1 uint32) (uint32, uint32) {
	for i := 0; i+8 <= len(b); i += 8 {
		s0 += order.Uint32(b[i:]) + s1
		s1 += order.Uint32(b[i+4:]) + s0
	}
	return s0, s1
}
