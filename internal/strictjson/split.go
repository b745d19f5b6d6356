package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The decoders of the memory package read nested objects level by level,
// each value's text handed to the next level. Splitting each level with
// encoding/json (into a map of raw messages, or token by token) validated
// and copied every byte once per level it lies under: a memory record of
// 1.7 kB took 210–290 µs. Members, Elements and String split one level in
// one pass over its bytes with no copy, and accept exactly what
// encoding/json accepts: a document they refuse gets encoding/json's own
// error, so messages are the same as before.

// maxDepth is encoding/json's limit on nested arrays and objects.
const maxDepth = 10000

// Member is one member of a JSON object: its name, decoded, and its value's
// text as it stands in the object.
type Member struct {
	Name  string
	Value json.RawMessage
}

// ErrTooManyElements: an array with more elements than its reader takes.
// Typed form: *TooManyError.
var ErrTooManyElements = errors.New("json: too many elements")

// TooManyError is ErrTooManyElements with the limit.
type TooManyError struct{ Limit int }

func (e *TooManyError) Error() string { return fmt.Sprintf("more than %d elements", e.Limit) }

// Is makes a *TooManyError match ErrTooManyElements.
func (e *TooManyError) Is(target error) bool { return target == ErrTooManyElements }

// Members splits the JSON object in data (white space around it allowed)
// into its members, in order, a name given twice kept twice. It refuses
// anything json.Valid refuses, with the error json.Unmarshal gives, and a
// valid document that is not an object.
func Members(data []byte) ([]Member, error) {
	s := splitter{data: data}
	s.space()
	if !s.is('{') {
		return nil, s.refuse("want a JSON object")
	}
	s.i++
	members := make([]Member, 0, 8) // most objects here have at most 8
	s.space()
	if s.is('}') {
		s.i++
	} else {
		for {
			s.space()
			start := s.i
			if !s.is('"') || !s.str() {
				return nil, s.refuse("")
			}
			name := decodedName(data[start:s.i])
			s.space()
			if !s.is(':') {
				return nil, s.refuse("")
			}
			s.i++
			s.space()
			v := s.i
			if !s.value(1) {
				return nil, s.refuse("")
			}
			members = append(members, Member{Name: name, Value: data[v:s.i]})
			if more, ok := s.afterItem('}'); !ok {
				return nil, s.refuse("")
			} else if !more {
				break
			}
		}
	}
	if s.space(); s.i != len(data) {
		return nil, s.refuse("")
	}
	return members, nil
}

// Elements splits the JSON array in data (white space around it allowed)
// into its elements' text, in order. An array of more than limit elements
// is refused with a *TooManyError once its element limit+1 begins, before
// the rest is read; otherwise it refuses what Members does, and a valid
// document that is not an array. Members is not written over a shared
// loop taking a closure: the splitter then escapes to the heap, and a
// memory record decoded in 54-65 µs against 42-59 µs (BenchmarkDecodeRecord, one sitting).
func Elements(data []byte, limit int) ([]json.RawMessage, error) {
	s := splitter{data: data}
	s.space()
	if !s.is('[') {
		return nil, s.refuse("want a JSON array")
	}
	s.i++
	elems := []json.RawMessage{}
	s.space()
	if s.is(']') {
		s.i++
	} else {
		for {
			s.space()
			if len(elems) == limit {
				return nil, &TooManyError{Limit: limit}
			}
			v := s.i
			if !s.value(1) {
				return nil, s.refuse("")
			}
			elems = append(elems, data[v:s.i])
			if more, ok := s.afterItem(']'); !ok {
				return nil, s.refuse("")
			} else if !more {
				break
			}
		}
	}
	if s.space(); s.i != len(data) {
		return nil, s.refuse("")
	}
	return elems, nil
}

// Valid reports whether data is one JSON value, white space around it
// allowed, as json.Valid does.
func Valid(data []byte) bool {
	s := splitter{data: data}
	s.space()
	if !s.value(0) {
		return false
	}
	s.space()
	return s.i == len(data)
}

// String decodes the JSON string in data (white space around it allowed),
// as json.Unmarshal into a string does: escapes resolved, invalid UTF-8
// made U+FFFD. It refuses what json.Unmarshal refuses, with its error,
// and any other value, null too (which json.Unmarshal takes as no string).
func String(data []byte) (string, error) {
	s := splitter{data: data}
	s.space()
	start := s.i
	if !s.is('"') || !s.str() {
		return "", s.refuse("want a JSON string")
	}
	end := s.i
	if s.space(); s.i != len(data) {
		return "", s.refuse("")
	}
	return decodedName(data[start:end]), nil
}

// decodedName is the value of a well-formed JSON string token, quotes
// included: its bytes where they are printable ASCII with no escape, as
// most names and labels are, else what encoding/json makes of it.
func decodedName(quoted []byte) string {
	if name, ok := plainName(quoted[1 : len(quoted)-1]); ok {
		return name
	}
	var name string
	if json.Unmarshal(quoted, &name) != nil {
		// Not reached: the token was checked.
		return string(quoted[1 : len(quoted)-1])
	}
	return name
}

// plainName is a string token's bytes as a string where they are
// printable ASCII with no escape.
func plainName(b []byte) (string, bool) {
	for _, c := range b {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return "", false
		}
	}
	return string(b), true
}

// splitter reads JSON text from data[i:], checking it as encoding/json's
// scanner does.
type splitter struct {
	data []byte
	i    int
}

func (s *splitter) is(c byte) bool { return s.i < len(s.data) && s.data[s.i] == c }

func (s *splitter) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// refuse is the error for data: encoding/json's where it refuses the
// text, else (valid JSON of another kind) want.
func (s *splitter) refuse(want string) error {
	var v json.RawMessage
	if err := json.Unmarshal(s.data, &v); err != nil {
		return err
	}
	if want == "" {
		// Not reached while the splitter and encoding/json agree, which
		// FuzzSplitMatchesEncodingJSON checks.
		want = "malformed JSON"
	}
	return fmt.Errorf("json: %s, got %s", want, quote(trimSpace(s.data)))
}

// value passes one JSON value (no white space before it) inside depth
// arrays and objects, and reports whether it is well formed.
func (s *splitter) value(depth int) bool {
	if s.i >= len(s.data) {
		return false
	}
	switch c := s.data[s.i]; c {
	case '"':
		return s.str()
	case '{', '[':
		if depth >= maxDepth { // it would be depth+1 deep
			return false
		}
		return s.container(c, depth)
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		return s.number()
	}
}

// container passes an object or array that opens at s.i inside depth
// others.
func (s *splitter) container(open byte, depth int) bool {
	close := byte(']')
	if open == '{' {
		close = '}'
	}
	s.i++
	s.space()
	if s.is(close) {
		s.i++
		return true
	}
	for {
		s.space()
		if open == '{' {
			if !s.is('"') || !s.str() {
				return false
			}
			s.space()
			if !s.is(':') {
				return false
			}
			s.i++
			s.space()
		}
		if !s.value(depth + 1) {
			return false
		}
		if more, ok := s.afterItem(close); !more {
			return ok
		}
	}
}

// afterItem passes the comma or the closing bracket close after a member
// or element: more after a comma, ok false where neither comes.
func (s *splitter) afterItem(close byte) (more, ok bool) {
	s.space()
	switch {
	case s.is(','):
		s.i++
		return true, true
	case s.is(close):
		s.i++
		return false, true
	}
	return false, false
}

// str passes a string token that opens at s.i.
func (s *splitter) str() bool {
	for s.i++; s.i < len(s.data); {
		switch c := s.data[s.i]; {
		case c == '"':
			s.i++
			return true
		case c == '\\':
			if s.i+1 >= len(s.data) {
				return false
			}
			switch s.data[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.data) {
					return false
				}
				for _, h := range s.data[s.i+2 : s.i+6] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 6
			default:
				return false
			}
		case c < 0x20:
			return false
		default:
			s.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func (s *splitter) literal(word string) bool {
	if len(s.data)-s.i < len(word) || string(s.data[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// number passes a number token at s.i: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *splitter) number() bool {
	if s.is('-') {
		s.i++
	}
	switch {
	case s.is('0'):
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.is('.') {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.is('e') || s.is('E') {
		s.i++
		if s.is('+') || s.is('-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *splitter) digits() int {
	start := s.i
	for s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}
