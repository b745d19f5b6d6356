package memory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vkrt/vkrt/internal/strictjson"
)

// Everything here decodes with encoding/json: goccy/go-json (which the
// module uses to encode) wraps integers past 2^64 on decoding, its
// streaming decoder was ten times slower on an 80 MB layout, and it
// panicked (index out of range in Stream.readBuf) on a 514-byte record
// that FuzzRecordJSON found.
//
// The decoders here are strict on purpose: a record or layout that does not
// have exactly the shape the contract shows is an error, never a silently
// different value. Unknown fields, unknown variants, nulls where a number is
// due, wrong types, trailing data and numbers that do not fit their field
// (past 2^64, negative, fractional, in exponent form) are refused.

// jsonObject is a decoded JSON object whose members are decoded on demand.
type jsonObject struct {
	what    string
	members []strictjson.Member // names unique
}

// get is the value of the member name, nil where there is none (a
// member's value is never empty).
func (o jsonObject) get(name string) json.RawMessage {
	for _, m := range o.members {
		if m.Name == name {
			return m.Value
		}
	}
	return nil
}

func isJSONNull(data []byte) bool { return bytes.Equal(bytes.TrimSpace(data), []byte("null")) }

// decodeObject reads a JSON object whose member names are all in allowed,
// none given twice (a map would silently keep the last one).
func decodeObject(data []byte, what string, allowed ...string) (jsonObject, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return jsonObject{}, fmt.Errorf("memory: %s: want a JSON object, got %s", what, abbreviate(trimmed))
	}
	members, err := strictjson.Members(trimmed)
	if err != nil {
		return jsonObject{}, fmt.Errorf("memory: %s: %w", what, err)
	}
	if dup, ok := duplicateName(members); ok {
		return jsonObject{}, fmt.Errorf("memory: %s: field %s given twice", what, abbreviate([]byte(dup)))
	}
	for _, m := range members {
		if !slices.Contains(allowed, m.Name) {
			return jsonObject{}, fmt.Errorf("memory: %s: unknown field %s (known: %v)", what, abbreviate([]byte(m.Name)), allowed)
		}
	}
	return jsonObject{what: what, members: members}, nil
}

// duplicateName is the first member name given a second time: compared
// pair by pair in the few members an object here has, by a set in a
// hostile one of thousands.
func duplicateName(members []strictjson.Member) (string, bool) {
	if len(members) > 16 {
		seen := make(map[string]bool, len(members))
		for _, m := range members {
			if seen[m.Name] {
				return m.Name, true
			}
			seen[m.Name] = true
		}
		return "", false
	}
	for i, m := range members {
		for _, earlier := range members[:i] {
			if earlier.Name == m.Name {
				return m.Name, true
			}
		}
	}
	return "", false
}

// uint64 decodes a member that must be present and a non-negative integer.
func (o jsonObject) uint64(name string) (uint64, error) {
	raw := o.get(name)
	if raw == nil {
		return 0, fmt.Errorf("memory: %s: missing field %q", o.what, name)
	}
	return o.memberUint64(raw, name)
}

// optionalUint64 decodes a member that may be absent or null.
func (o jsonObject) optionalUint64(name string) (*uint64, error) {
	raw := o.get(name)
	if raw == nil || isJSONNull(raw) {
		return nil, nil
	}
	v, err := o.memberUint64(raw, name)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// optionalBool is a member that may be left out (false) or be true or
// false.
func (o jsonObject) optionalBool(name string) (bool, error) {
	raw := o.get(name)
	if raw == nil {
		return false, nil
	}
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("memory: %s: %s: want true or false, got %s", o.what, name, abbreviate(raw))
}

// raw returns a member that must be present.
func (o jsonObject) raw(name string) (json.RawMessage, error) {
	raw := o.get(name)
	if raw == nil {
		return nil, fmt.Errorf("memory: %s: missing field %q", o.what, name)
	}
	return raw, nil
}

// memberUint64 is decodeUint64 for the member name, its path joined only
// for an error: joined for every member, the joining took 7 % of
// BenchmarkDecodeRecord's CPU profile.
func (o jsonObject) memberUint64(raw []byte, name string) (uint64, error) {
	v, err := strictjson.ParseUint64(raw)
	if err != nil {
		return 0, fmt.Errorf("memory: %s.%s: %w", o.what, name, err)
	}
	return v, nil
}

// decodeUint64 reads a number through the module's one checked path: goccy
// would wrap 2^64+1 to 1.
func decodeUint64(raw []byte, what string) (uint64, error) {
	v, err := strictjson.ParseUint64(raw)
	if err != nil {
		return 0, fmt.Errorf("memory: %s: %w", what, err)
	}
	return v, nil
}

func decodeString(raw []byte, what string) (string, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '"' {
		return "", fmt.Errorf("memory: %s: want a string, got %s", what, abbreviate(trimmed))
	}
	s, err := strictjson.String(trimmed)
	if err != nil {
		return "", fmt.Errorf("memory: %s: %w", what, err)
	}
	return s, nil
}

// decodeArray splits a JSON array into its raw elements; null is refused,
// and so is an array of more than limit elements, before the rest is read:
// a layout of millions of pools is refused at once, not after it is built.
func decodeArray(raw []byte, what string, limit int) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return nil, fmt.Errorf("memory: %s: want a JSON array, got %s", what, abbreviate(trimmed))
	}
	elems, err := strictjson.Elements(trimmed, limit)
	if errors.Is(err, strictjson.ErrTooManyElements) {
		return nil, fmt.Errorf("memory: %s: more than %d elements", what, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("memory: %s: %w", what, err)
	}
	return elems, nil
}

// decodeVariant reads an externally tagged enum value: "Name" for a unit
// variant, {"Name": body} for one with data.
func decodeVariant(data []byte, what string) (name string, body json.RawMessage, err error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '"' {
		name, err = decodeString(trimmed, what)
		return name, nil, err
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return "", nil, fmt.Errorf("memory: %s: want a variant name or a one-member object, got %s", what, abbreviate(trimmed))
	}
	members, err := strictjson.Members(trimmed)
	if err != nil {
		return "", nil, fmt.Errorf("memory: %s: not valid JSON: %w", what, err)
	}
	switch {
	case len(members) == 0:
		return "", nil, fmt.Errorf("memory: %s: want exactly one variant, got none", what)
	case len(members) > 1 && members[1].Name == members[0].Name:
		return "", nil, fmt.Errorf("memory: %s: variant %s given twice", what, abbreviate([]byte(members[0].Name)))
	case len(members) > 1:
		return "", nil, fmt.Errorf("memory: %s: want exactly one variant, got %s and %s", what,
			abbreviate([]byte(members[0].Name)), abbreviate([]byte(members[1].Name)))
	}
	return members[0].Name, members[0].Value, nil
}

func unknownVariant(what, name string, known ...string) error {
	return fmt.Errorf("memory: %s: unknown variant %s (known: %v)", what, abbreviate([]byte(name)), known)
}

// abbreviate quotes at most 40 bytes of JSON for an error message.
func abbreviate(data []byte) string {
	if len(data) == 0 {
		return "nothing"
	}
	if len(data) > 40 {
		return fmt.Sprintf("%q…", data[:40])
	}
	return fmt.Sprintf("%q", data)
}

// nestedError is the error of a part of what is decoded, named by where it
// lies (its path, "Sliced layout[0]"): its message says "memory: " once,
// where each level's own prefix stacked up ("Sliced layout[0]: memory:
// sliced pool: ...").
type nestedError struct {
	where string
	err   error
}

func nested(where string, err error) error { return &nestedError{where: where, err: err} }

func (e *nestedError) Error() string {
	return "memory: " + e.where + ": " + strings.TrimPrefix(e.err.Error(), "memory: ")
}

func (e *nestedError) Unwrap() error { return e.err }
