package environment

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/vkrt/vkrt/internal/strictjson"
)

// decodeError is a body that does not decode, told in the record's terms:
// the field of the body (its JSON path), what the field takes and what the
// body holds there, where encoding/json told it in Go's ("cannot unmarshal
// string into Go struct field sampleRecord.seq of type int"). It unwraps to
// the decoder's error, so its kind (strictjson.ErrNumberDoesNotFit, a
// *json.UnmarshalTypeError) still matches.
type decodeError struct {
	msg string
	err error
}

func (e *decodeError) Error() string { return e.msg }
func (e *decodeError) Unwrap() error { return e.err }

// decodeProblem says what of the body into v err refuses, in the body's
// terms, or "" where err tells it already (a type's own decoder, a body
// that is not JSON) or is a caller's misuse (v no pointer), which Go's
// words tell best.
func decodeProblem(err error, v any) string {
	switch e := err.(type) {
	case *json.UnmarshalTypeError:
		_, field := fieldType(reflect.TypeOf(v), e.Field)
		return fmt.Sprintf("%s: want %s, got %s", fieldWords(field), wantWords(e.Type), gotWords(e.Value))
	case *strictjson.NumberError:
		t, field := fieldType(reflect.TypeOf(v), e.Field)
		if t == nil {
			return fmt.Sprintf("%s: the number %s does not fit it", fieldWords(field), e.Number)
		}
		if e.Number == "?" {
			// strictjson's word for a number where the field takes no
			// number at all.
			return fmt.Sprintf("%s: want %s, got a number", fieldWords(field), wantWords(t))
		}
		return fmt.Sprintf("%s: the number %s does not fit it: want %s", fieldWords(field), e.Number, wantWords(t))
	}
	return ""
}

func fieldWords(path string) string {
	if path == "" {
		return "the body"
	}
	return fmt.Sprintf("field %q", path)
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// wantWords is what a field of type t takes, in JSON's words.
func wantWords(t reflect.Type) string {
	if t = peelPointer(t); t == nil {
		return "a value"
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("an integer from %d to %d", int64(-1)<<(bits-1), int64(math.MaxInt64>>(64-bits)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("an integer from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return fmt.Sprintf("an array of %d", t.Len())
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Interface:
		return "any value"
	}
	return "another kind of value"
}

// gotWords is what encoding/json found in the body ("string", "number",
// "number 1.5", "bool", "array", "object"), in words.
func gotWords(value string) string {
	switch {
	case value == "bool":
		return "true or false"
	case value == "array", value == "object":
		return "an " + value
	case strings.HasPrefix(value, "number "):
		return "the number " + strings.TrimPrefix(value, "number ")
	case value == "":
		return "another kind of value"
	}
	return "a " + value
}

// fieldType is the type of the field at the JSON path (names joined by
// '.', as encoding/json gives it) of a value of type t, with the
// containers (pointers, slices, arrays, maps) around it peeled as
// encoding/json's paths peel them, or nil where it cannot be found; and
// the path as the body spells it: encoding/json names an embedded
// struct on the way by its Go name ("Wrapped.count"), which the body
// knows nothing of.
func fieldType(t reflect.Type, path string) (reflect.Type, string) {
	t = peel(t)
	if path == "" {
		return t, ""
	}
	var shown []string
	for name := range strings.SplitSeq(path, ".") {
		if t == nil || t.Kind() != reflect.Struct {
			return nil, path
		}
		if f, ok := t.FieldByName(name); ok && f.Anonymous && f.Tag.Get("json") == "" && peelPointer(f.Type).Kind() == reflect.Struct {
			t = peelPointer(f.Type)
			continue
		}
		t = peel(jsonField(t, name, 0))
		shown = append(shown, name)
	}
	return t, strings.Join(shown, ".")
}

// peel strips pointers, slices, arrays and maps down to what they hold.
func peel(t reflect.Type) reflect.Type {
	for t != nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		default:
			return t
		}
	}
	return nil
}

// jsonField is the type of the field of struct t that encoding/json names
// name (its tag's name, else its own, case-insensitively), looking into
// embedded structs as encoding/json does, or nil.
func jsonField(t reflect.Type, name string, depth int) reflect.Type {
	if depth > 8 {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		if f.Anonymous && tag == "" {
			if inner := peelPointer(f.Type); inner.Kind() == reflect.Struct {
				if found := jsonField(inner, name, depth+1); found != nil {
					return found
				}
				continue
			}
		}
		fieldName := f.Name
		if tag != "" {
			fieldName = tag
		}
		if strings.EqualFold(fieldName, name) {
			return f.Type
		}
	}
	return nil
}

// peelPointer strips the pointers around t; nil stays nil.
func peelPointer(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// decodeFailed is the error of record id, of kind, whose body err refused
// to decode into v.
func decodeFailed(id int64, kind string, v any, err error) error {
	var invalid *json.InvalidUnmarshalError
	if errors.As(err, &invalid) {
		// The caller's misuse (v no pointer), told in Go's terms.
		return fmt.Errorf("environment: decoding record %d (kind %q) into %T: %w", id, kind, v, err)
	}
	if p := decodeProblem(err, v); p != "" {
		return &decodeError{msg: fmt.Sprintf("environment: decoding record %d (kind %q): %s", id, kind, p), err: err}
	}
	return fmt.Errorf("environment: decoding record %d (kind %q): %w", id, kind, err)
}
