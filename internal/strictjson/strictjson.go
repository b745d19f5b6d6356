// Package strictjson is the one decoding path for the JSON vkrt reads
// (layouts, reports, environment records): a number must fit the field it
// fills exactly, or decoding fails with an error matching ErrNumberDoesNotFit.
//
// goccy/go-json, fast at encoding, silently wraps integers past 2^64 on
// decoding (18446744073709551617 into a uint64 reads as 1), so nothing
// here decodes numbers through it: integers are checked against the JSON
// grammar and parsed with strconv, and whole values go through
// encoding/json, which range-checks every numeric field. Decoders that read
// an object level by level split each level with Members, Elements and
// String, which check the text as encoding/json does in one pass.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// ErrNumberDoesNotFit: a JSON number that is not a value of the field it
// fills — negative or fractional for an unsigned field, in exponent form for
// an integer field, or out of the field's range. Typed form: *NumberError.
var ErrNumberDoesNotFit = errors.New("json: number does not fit its field")

// NumberError is ErrNumberDoesNotFit with the text of the number and the
// type it was to fill. For a field of one of Go's integer types its
// message says what is wrong: a fractional part or an exponent (4.0 and
// 1e3 are refused too: the field takes digits alone), a minus sign for an
// unsigned field, or a value past the field's range, which it gives.
type NumberError struct {
	// Number is the JSON text of the number, at most 40 bytes of it, or
	// "?" where the field takes no number at all (a string, a bool, an
	// array): encoding/json does not give the text then.
	Number string
	// Type is the Go type of the field, "uint64" for ParseUint64.
	Type string
	// Field is the path of the field where encoding/json knows it.
	Field string

	// why is what is wrong with the number, where the field is an
	// integer of Go's: "does not fit" alone told 4.0 and 1e3, whole
	// numbers both, from numbers past the field's range.
	why string
}

func (e *NumberError) Error() string {
	if e.Number == "?" {
		// "number ? does not fit field name of type string" told of a
		// number that could not be read.
		if e.Field != "" {
			return fmt.Sprintf("json: a number where field %s of type %s takes none", e.Field, e.Type)
		}
		return fmt.Sprintf("json: a number where %s takes none", e.Type)
	}
	var msg string
	if e.Field != "" {
		msg = fmt.Sprintf("json: number %s does not fit field %s of type %s", e.Number, e.Field, e.Type)
	} else {
		msg = fmt.Sprintf("json: number %s does not fit %s", e.Number, e.Type)
	}
	if e.why != "" {
		msg += ": " + e.why
	}
	return msg
}

// integerKinds are the kinds of Go's integer types, by their names.
var integerKinds = map[string]reflect.Kind{
	"int": reflect.Int, "int8": reflect.Int8, "int16": reflect.Int16, "int32": reflect.Int32, "int64": reflect.Int64,
	"uint": reflect.Uint, "uint8": reflect.Uint8, "uint16": reflect.Uint16, "uint32": reflect.Uint32, "uint64": reflect.Uint64,
	"uintptr": reflect.Uintptr,
}

// whyNot says what is wrong with the JSON number num for an integer
// field of kind k, or "" for a field of another kind: a fraction or an
// exponent (the field takes digits alone, even for a whole number such as
// 4.0 or 1e3), a minus sign for an unsigned field, or else a value past
// the field's range.
func whyNot(num []byte, k reflect.Kind) string {
	var bits int
	switch k {
	case reflect.Int8, reflect.Uint8:
		bits = 8
	case reflect.Int16, reflect.Uint16:
		bits = 16
	case reflect.Int32, reflect.Uint32:
		bits = 32
	case reflect.Int64, reflect.Uint64:
		bits = 64
	case reflect.Int, reflect.Uint, reflect.Uintptr:
		bits = strconv.IntSize
	default:
		return ""
	}
	signed := k >= reflect.Int && k <= reflect.Int64
	fraction, exponent := bytes.IndexByte(num, '.') >= 0, bytes.IndexAny(num, "eE") >= 0
	const digits = ", and the field takes a whole number in digits alone"
	switch {
	case fraction && exponent:
		return "it has a fractional part and an exponent" + digits
	case fraction:
		return "it has a fractional part" + digits
	case exponent:
		return "it has an exponent" + digits
	case !signed && len(num) > 0 && num[0] == '-':
		return fmt.Sprintf("it has a minus sign, and the field is unsigned (0 to %d)", uint64(1)<<bits-1)
	case signed:
		return fmt.Sprintf("the field holds %d to %d", -int64(1)<<(bits-1), int64(uint64(1)<<(bits-1)-1))
	}
	return fmt.Sprintf("the field holds 0 to %d", uint64(1)<<bits-1)
}

// Is makes a *NumberError match ErrNumberDoesNotFit.
func (e *NumberError) Is(target error) bool { return target == ErrNumberDoesNotFit }

const maxQuoted = 40

// NewNumberError is the *NumberError for the number literal num that does
// not fit a field of type typ, its text cut to what every NumberError
// quotes: a megabyte-long number gives a short error.
//
// Where typ names one of Go's integer types (as reflect.Type.String does),
// the message says what is wrong with the number: a fraction or an
// exponent, a minus sign for an unsigned type, or a value past its range.
func NewNumberError(num, typ, field string) *NumberError {
	return &NumberError{Number: quote([]byte(num)), Type: typ, Field: field, why: whyNot([]byte(num), integerKinds[typ])}
}

func quote(b []byte) string {
	if len(b) > maxQuoted {
		return string(b[:maxQuoted]) + "…"
	}
	return string(b)
}

// trimSpace drops what JSON counts as white space, and nothing more.
func trimSpace(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }

// IsNumber reports whether raw (surrounding space aside) is a JSON number
// token of any value.
func IsNumber(raw []byte) bool {
	t := trimSpace(raw)
	i := 0
	if i < len(t) && t[i] == '-' {
		i++
	}
	digits := func() int {
		start := i
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			i++
		}
		return i - start
	}
	switch {
	case i < len(t) && t[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(t) && t[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		i++
		if i < len(t) && (t[i] == '+' || t[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(t)
}

// ParseUint64 reads a JSON value that must be a non-negative integer of at
// most 64 bits, written without fraction or exponent: 0, 42,
// 18446744073709551615. A number of another value (-1, 1.5, 1e6,
// 18446744073709551616) is refused with a *NumberError; anything that is not
// a number at all with a plain error.
func ParseUint64(raw []byte) (uint64, error) {
	t := trimSpace(raw)
	if !IsNumber(t) {
		return 0, fmt.Errorf("json: want a non-negative integer, got %q", quote(t))
	}
	if t[0] == '-' || bytes.ContainsAny(t, ".eE") {
		return 0, &NumberError{Number: quote(t), Type: "uint64", why: whyNot(t, reflect.Uint64)}
	}
	v, err := strconv.ParseUint(string(t), 10, 64)
	if err != nil {
		return 0, &NumberError{Number: quote(t), Type: "uint64", why: whyNot(t, reflect.Uint64)}
	}
	return v, nil
}

// Unmarshal decodes data into v as encoding/json does — which refuses a
// number that does not fit an integer or float field, where goccy/go-json
// wraps it — and gives such a refusal as a *NumberError.
//
// Where v is a json.Unmarshaler (as a pointer to a record or layout is),
// the text is checked in one pass here and handed to it, as encoding/json
// would after two passes of its own.
func Unmarshal(data []byte, v any) error {
	var err error
	if u, ok := v.(json.Unmarshaler); ok && nonNilPointer(v) && Valid(data) {
		err = u.UnmarshalJSON(trimSpace(data))
	} else {
		err = json.Unmarshal(data, v)
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if num, ok := strings.CutPrefix(typeErr.Value, "number "); ok {
			return &NumberError{Number: quote([]byte(num)), Type: typeErr.Type.String(), Field: typeErr.Field,
				why: whyNot([]byte(num), typeErr.Type.Kind())}
		}
		if typeErr.Value == "number" {
			return &NumberError{Number: "?", Type: typeErr.Type.String(), Field: typeErr.Field}
		}
	}
	return err
}

// nonNilPointer says whether v is what json.Unmarshal decodes into, not
// refuses: a pointer, not nil.
func nonNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && !rv.IsNil()
}

// Squeezer drops the white space of JSON text that separates a token from
// a bracket, brace, comma or colon, for text that comes in pieces: Append
// squeezes each piece onto what came before. What the text means is
// unchanged, and white space between two other tokens (never valid JSON)
// is kept as one space, so what was invalid stays invalid. Strings are
// kept as they are. A file padded with a gigabyte of spaces then costs its
// readers the size of its values alone.
type Squeezer struct {
	// MaxStringBytes, where positive, bounds the bytes inside the text's
	// strings, all of them together (quotes and escapes counted): past it
	// Append fails with a *StringBytesError. Text whose strings are names
	// then cannot hide a gigabyte in one.
	MaxStringBytes int64

	stringBytes              int64
	inString, escaped, space bool
	kept                     bool // some byte was kept: last is the latest
	last                     byte

	out       int64 // the bytes Append has appended, all told
	run       int64 // the white space since the last byte kept
	changed   bool  // a byte's offset moved: the text is verbatim up to changedAt
	changedAt int64
}

// Verbatim is how many bytes at the head of the squeezed text so far stand
// at the offsets they had in the text given: white space was dropped (or a
// run of it kept as one space) only past them. A position a decoder gives
// in the squeezed text below it is the text's own; above it, it is not.
func (s *Squeezer) Verbatim() int64 {
	if s.changed {
		return s.changedAt
	}
	return s.out
}

// ErrStringBytes is text with more bytes in its strings than a Squeezer's
// MaxStringBytes; the error is a *StringBytesError.
var ErrStringBytes = errors.New("json: too many bytes in strings")

// StringBytesError is text whose strings hold more than Limit bytes.
type StringBytesError struct{ Limit int64 }

func (e *StringBytesError) Error() string {
	return fmt.Sprintf("json: more than %d bytes in strings", e.Limit)
}

func (e *StringBytesError) Is(target error) bool { return target == ErrStringBytes }

// Append appends src, squeezed as the text so far, to dst.
func (s *Squeezer) Append(dst, src []byte) ([]byte, error) {
	for _, c := range src {
		if s.inString {
			if s.stringBytes++; s.MaxStringBytes > 0 && s.stringBytes > s.MaxStringBytes {
				return dst, &StringBytesError{Limit: s.MaxStringBytes}
			}
			dst = append(dst, c)
			s.out++
			switch {
			case s.escaped:
				s.escaped = false
			case c == '\\':
				s.escaped = true
			case c == '"':
				s.inString = false
			}
			s.last = c
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			s.space = true
			s.run++
			continue
		}
		if s.space {
			var kept int64
			if s.kept && !structural(s.last) && !structural(c) {
				kept = 1
			}
			if s.run != kept && !s.changed {
				s.changed, s.changedAt = true, s.out
			}
			if kept == 1 {
				dst = append(dst, ' ')
				s.out++
			}
		}
		s.space, s.run = false, 0
		dst = append(dst, c)
		s.out++
		s.last, s.kept = c, true
		if s.inString = c == '"'; s.inString {
			s.stringBytes++
		}
	}
	return dst, nil
}

func structural(c byte) bool {
	switch c {
	case '[', ']', '{', '}', ',', ':':
		return true
	}
	return false
}

// MemberNames lists the member names of the JSON object in data, in order,
// a name given twice listed twice: the check a decoder into a struct or a
// map cannot make, as it keeps the last. It lists none for anything but a
// valid object (Members splits it).
func MemberNames(data []byte) []string {
	members, err := Members(data)
	if err != nil {
		return nil
	}
	var names []string
	for _, m := range members {
		names = append(names, m.Name)
	}
	return names
}

// CheckMembers refuses an object (valid JSON, decoded already) with a
// member name given twice, or one not spelled as one of allowed: a struct
// decoder takes "Alignment" for "alignment", and the last of two.
func CheckMembers(data []byte, allowed ...string) error {
	seen := make(map[string]bool, len(allowed))
	for _, name := range MemberNames(data) {
		if !slices.Contains(allowed, name) {
			return fmt.Errorf("json: unknown field %q (known: %s)", name, strings.Join(allowed, ", "))
		}
		if seen[name] {
			return fmt.Errorf("json: field %q given twice", name)
		}
		seen[name] = true
	}
	return nil
}
