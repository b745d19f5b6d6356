package memory

import (
	"bytes"
	"fmt"

	"github.com/vkrt/vkrt/internal/strictjson"
)

// A plan's slots are millions of numbers: they are read here straight from
// the JSON into integers, rather than through a raw value apiece (which
// took a 2^24-slot plan 4.4 GB and half a minute to read), and an array
// past its limit is refused by its count of commas, before it is read.

// decodeUintTuples reads a JSON array of non-negative integers, flat
// ([a, b, …], tuple 0) or of arrays of exactly tuple of them ([[a, b, c],
// …]), into one slice, tuple by tuple. It holds at most limit numbers
// (limit tuples when tuple > 0). name names number k for an error; each
// number is as strictjson.ParseUint64 reads it. Errors begin with what.
func decodeUintTuples(raw []byte, what string, tuple, limit int, name func(k int) string) ([]uint64, error) {
	s := uintScanner{t: raw}
	s.space()
	if !s.take('[') {
		return nil, fmt.Errorf("memory: %s: want a JSON array, got %s", what, abbreviate(s.rest()))
	}
	// Each comma parts two numbers: a well-formed array holds one more
	// number than it has commas. An array of more than limit is refused
	// before any is read, and the rest is read into one slice of the size
	// the commas give: a 2^24-slot plan took 1.8 GB and 9 s when the slice
	// grew by appending, and its refusal past the limit 5.7 s.
	per := max(tuple, 1)
	numbers := bytes.Count(raw, []byte{','}) + 1
	if numbers/per > limit {
		return nil, &tooManyError{what: what, limit: limit}
	}
	out := make([]uint64, 0, numbers)
	s.space()
	if !s.take(']') {
		for n := 0; ; n++ {
			if n == limit {
				return nil, &tooManyError{what: what, limit: limit}
			}
			var err error
			if tuple == 0 {
				out, err = s.number(out, name)
			} else {
				out, err = s.tuple(out, what, tuple, name)
			}
			if err != nil {
				return nil, err
			}
			s.space()
			if s.take(']') {
				break
			}
			if !s.take(',') {
				return nil, fmt.Errorf("memory: %s: want , or ] after element %d, got %s", what, len(out)/per-1, abbreviate(s.rest()))
			}
		}
	}
	s.space()
	if len(s.rest()) > 0 {
		return nil, fmt.Errorf("memory: %s: data after the array: %s", what, abbreviate(s.rest()))
	}
	return out, nil
}

// uintScanner reads a JSON array of numbers from t, from byte i on.
type uintScanner struct {
	t []byte
	i int
}

func (s *uintScanner) rest() []byte { return s.t[s.i:] }

// space skips what JSON counts as white space.
func (s *uintScanner) space() {
	for s.i < len(s.t) {
		switch s.t[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// take skips c if it comes next.
func (s *uintScanner) take(c byte) bool {
	if s.i < len(s.t) && s.t[s.i] == c {
		s.i++
		return true
	}
	return false
}

// number appends the number that comes next (space before it skipped),
// named by name(len(out)) in an error. Its token runs to the next
// separator, so anything but a number there (a string, an object, null)
// is refused whole by ParseUint64.
func (s *uintScanner) number(out []uint64, name func(k int) string) ([]uint64, error) {
	s.space()
	start := s.i
	for s.i < len(s.t) {
		c := s.t[s.i]
		if c == ',' || c == ']' || c == '[' || c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			break
		}
		s.i++
	}
	if v, ok := plainDigits(s.t[start:s.i]); ok {
		return append(out, v), nil
	}
	v, err := strictjson.ParseUint64(s.t[start:s.i])
	if err != nil {
		return nil, fmt.Errorf("memory: %s: %w", name(len(out)), err)
	}
	return append(out, v), nil
}

// plainDigits reads the number most tokens are: 1 to 19 decimal digits
// without a leading zero, or 0, which cannot overflow. Anything else
// (more digits, a sign, a fraction, an exponent, not a number) is
// strictjson.ParseUint64's to read or refuse.
func plainDigits(t []byte) (uint64, bool) {
	if len(t) == 0 || len(t) > 19 || (t[0] == '0' && len(t) > 1) {
		return 0, false
	}
	var v uint64
	for _, c := range t {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// tuple appends the n numbers of the array that comes next.
func (s *uintScanner) tuple(out []uint64, what string, n int, name func(k int) string) ([]uint64, error) {
	at := len(out) / n
	s.space()
	if !s.take('[') {
		return nil, fmt.Errorf("memory: %s[%d]: want an array of %d numbers, got %s", what, at, n, abbreviate(s.rest()))
	}
	for k := 0; k < n; k++ {
		var err error
		if out, err = s.number(out, name); err != nil {
			return nil, err
		}
		s.space()
		if k < n-1 && !s.take(',') {
			return nil, fmt.Errorf("memory: %s[%d]: want %d numbers, got %d", what, at, n, k+1)
		}
	}
	if !s.take(']') {
		return nil, fmt.Errorf("memory: %s[%d]: want %d numbers, got more", what, at, n)
	}
	return out, nil
}

// tooManyError is an array of more elements than its limit.
type tooManyError struct {
	what  string
	limit int
}

func (e *tooManyError) Error() string {
	return fmt.Sprintf("memory: %s: more than %d elements", e.what, e.limit)
}
