package environment

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
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
	order, pageSize, ok := walHeader(header)
	if !ok {
		return 0, nil
	}
	s0, s1 := walChecksum(order, header[:24], 0, 0)
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

// walHeader reads a log's header: the byte order of its checksums and its
// page size, and whether SQLite takes it as one (its magic, version, page
// size and checksum hold). A log whose header it does not take is one SQLite
// reads as empty, and a writer starts it again, frames and all.
func walHeader(header []byte) (order binary.ByteOrder, pageSize uint32, ok bool) {
	if len(header) < walHeaderBytes {
		return nil, 0, false
	}
	switch binary.BigEndian.Uint32(header) {
	case walMagicLittle:
		order = binary.LittleEndian
	case walMagicBig:
		order = binary.BigEndian
	default:
		return nil, 0, false
	}
	pageSize = binary.BigEndian.Uint32(header[8:])
	if binary.BigEndian.Uint32(header[4:]) != walVersion || pageSize < 512 || pageSize > 65536 || pageSize&(pageSize-1) != 0 {
		return nil, 0, false
	}
	s0, s1 := walChecksum(order, header[:24], 0, 0)
	if s0 != binary.BigEndian.Uint32(header[24:]) || s1 != binary.BigEndian.Uint32(header[28:]) {
		return nil, 0, false
	}
	return order, pageSize, true
}

// checkLog refuses, with ErrCorrupt, a write-ahead log beside file (the
// environment's file at path, its links resolved) that holds frames SQLite
// would drop without a word: one beside a file that is empty or missing
// (SQLite reads such a file as a new database and deletes its log, so a
// reader listed no records and a writer erased them), and one whose header
// SQLite does not take (it reads the log as empty, and a writer starts it
// again). A log of a header or less holds no record and passes. The file and
// the log are left as they are.
func checkLog(path, file string) error {
	log := file + "-wal"
	info, err := os.Lstat(log)
	if err != nil || !info.Mode().IsRegular() || info.Size() <= walHeaderBytes {
		return nil
	}
	main, err := os.Stat(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s does not exist (%w), but its write-ahead log %s holds %d bytes: the records committed there "+
			"belong to the file that is gone; both are left as they are (put the file back beside its log, or remove the log "+
			"to start with no records)", ErrCorrupt, path, fs.ErrNotExist, log, info.Size())
	case err == nil && main.Size() == 0:
		return fmt.Errorf("%w: %s is empty, but its write-ahead log %s holds %d bytes: the records committed there "+
			"belong to a file that was emptied or replaced, and SQLite would delete the log; both are left as they are "+
			"(put the file back beside its log, or remove the log to start with no records)", ErrCorrupt, path, log, info.Size())
	}
	// A writer rewrites the header in place when it starts the log again:
	// a header read as it does so is read once more.
	for attempt := 0; ; attempt++ {
		header, err := readHeader(log)
		if err != nil {
			return nil // SQLite says why, as it opens the log
		}
		if _, _, ok := walHeader(header); ok {
			return nil
		}
		if attempt == 1 {
			return fmt.Errorf("%w: the write-ahead log %s of %s has a damaged header: SQLite would read its %d bytes as no "+
				"records, and a writer would start it again over them; both are left as they are (remove the log to open "+
				"the file without the records it held)", ErrCorrupt, log, path, info.Size())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readHeader(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	header := make([]byte, walHeaderBytes)
	_, err = io.ReadFull(f, header)
	return header, err
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
