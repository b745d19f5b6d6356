package memory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"

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
	members map[string]json.RawMessage
}

func isJSONNull(data []byte) bool { return bytes.Equal(bytes.TrimSpace(data), []byte("null")) }

// decodeObject reads a JSON object whose member names are all in allowed.
func decodeObject(data []byte, what string, allowed ...string) (jsonObject, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return jsonObject{}, fmt.Errorf("memory: %s: want a JSON object, got %s", what, abbreviate(trimmed))
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &members); err != nil {
		return jsonObject{}, fmt.Errorf("memory: %s: %w", what, err)
	}
	if dup, ok := duplicateMember(trimmed); ok {
		return jsonObject{}, fmt.Errorf("memory: %s: field %s given twice", what, abbreviate([]byte(dup)))
	}
	for name := range members {
		if !slices.Contains(allowed, name) {
			return jsonObject{}, fmt.Errorf("memory: %s: unknown field %s (known: %v)", what, abbreviate([]byte(name)), allowed)
		}
	}
	return jsonObject{what: what, members: members}, nil
}

// uint64 decodes a member that must be present and a non-negative integer.
func (o jsonObject) uint64(name string) (uint64, error) {
	raw, ok := o.members[name]
	if !ok {
		return 0, fmt.Errorf("memory: %s: missing field %q", o.what, name)
	}
	return decodeUint64(raw, o.what+"."+name)
}

// optionalUint64 decodes a member that may be absent or null.
func (o jsonObject) optionalUint64(name string) (*uint64, error) {
	raw, ok := o.members[name]
	if !ok || isJSONNull(raw) {
		return nil, nil
	}
	v, err := decodeUint64(raw, o.what+"."+name)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// optionalBool is a member that may be left out (false) or be true or
// false.
func (o jsonObject) optionalBool(name string) (bool, error) {
	raw, ok := o.members[name]
	if !ok {
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
	raw, ok := o.members[name]
	if !ok {
		return nil, fmt.Errorf("memory: %s: missing field %q", o.what, name)
	}
	return raw, nil
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
	var s string
	if err := json.Unmarshal(trimmed, &s); err != nil {
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
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("memory: %s: %w", what, err)
	}
	var elems []json.RawMessage
	for dec.More() {
		if len(elems) == limit {
			return nil, fmt.Errorf("memory: %s: more than %d elements", what, limit)
		}
		var elem json.RawMessage
		if err := dec.Decode(&elem); err != nil {
			return nil, fmt.Errorf("memory: %s: %w", what, err)
		}
		elems = append(elems, elem)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("memory: %s: %w", what, err)
	}
	if elems == nil {
		elems = []json.RawMessage{}
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
	// encoding/json checks syntax with a scanner; goccy's Valid decodes
	// the whole document into maps and slices first.
	if !json.Valid(trimmed) {
		var probe json.RawMessage
		return "", nil, fmt.Errorf("memory: %s: not valid JSON: %w", what, json.Unmarshal(trimmed, &probe))
	}
	// Streamed, not decoded into a map: the one member's body is taken as
	// it is, and a second member is refused before it is read.
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil {
		return "", nil, fmt.Errorf("memory: %s: %w", what, err)
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", nil, fmt.Errorf("memory: %s: %w", what, err)
		}
		n, _ := tok.(string)
		if len(names) == 1 {
			if n == names[0] {
				return "", nil, fmt.Errorf("memory: %s: variant %s given twice", what, abbreviate([]byte(n)))
			}
			return "", nil, fmt.Errorf("memory: %s: want exactly one variant, got %s and %s", what,
				abbreviate([]byte(names[0])), abbreviate([]byte(n)))
		}
		names = append(names, n)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", nil, fmt.Errorf("memory: %s: %w", what, err)
		}
		body = raw
	}
	if _, err := dec.Token(); err != nil {
		return "", nil, fmt.Errorf("memory: %s: %w", what, err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		return "", nil, fmt.Errorf("memory: %s: trailing data after the variant (%v, %v)", what, tok, err)
	}
	if len(names) != 1 {
		return "", nil, fmt.Errorf("memory: %s: want exactly one variant, got none", what)
	}
	return names[0], body, nil
}

// duplicateMember finds a member name given twice in a JSON object that has
// already decoded: a map would silently keep the last one.
func duplicateMember(object []byte) (string, bool) {
	seen := map[string]bool{}
	for _, name := range strictjson.MemberNames(object) {
		if seen[name] {
			return name, true
		}
		seen[name] = true
	}
	return "", false
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
