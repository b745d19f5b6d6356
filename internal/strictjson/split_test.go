package strictjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMembersSplitsAnObjectInOrderWithoutCopying(t *testing.T) {
	doc := []byte(` { "b" : [1, {"x":2}] ,"a":"s\"}","b":null, "\u00e9":{} } `)
	members, err := Members(doc)
	require.NoError(t, err)
	require.Equal(t, []Member{
		{Name: "b", Value: []byte(`[1, {"x":2}]`)},
		{Name: "a", Value: []byte(`"s\"}"`)},
		{Name: "b", Value: []byte(`null`)},
		{Name: "é", Value: []byte(`{}`)},
	}, members)
	// The values are the document's own bytes.
	doc[bytes.IndexByte(doc, '1')] = '7'
	require.Equal(t, "[7, {\"x\":2}]", string(members[0].Value))

	members, err = Members([]byte("{}"))
	require.NoError(t, err)
	require.Empty(t, members)
}

func TestMembersRefusesWithEncodingJSONsError(t *testing.T) {
	for _, doc := range []string{``, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1} x`, `{"a":01}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}", `{a:1}`, `{"a":tru}`} {
		var v json.RawMessage
		want := json.Unmarshal([]byte(doc), &v)
		require.Error(t, want, doc)
		_, err := Members([]byte(doc))
		require.EqualError(t, err, want.Error(), doc)
	}
	_, err := Members([]byte(` [1] `))
	require.EqualError(t, err, `json: want a JSON object, got [1]`)
}

func TestElementsStopsPastTheLimitBeforeReadingOn(t *testing.T) {
	elems, err := Elements([]byte(`[1, "a" ,[2,3],{}]`), 4)
	require.NoError(t, err)
	require.Equal(t, []json.RawMessage{json.RawMessage("1"), json.RawMessage(`"a"`), json.RawMessage("[2,3]"), json.RawMessage("{}")}, elems)

	elems, err = Elements([]byte(` [ ] `), 0)
	require.NoError(t, err)
	require.NotNil(t, elems)
	require.Empty(t, elems)

	// The third element is never read: the array is refused for its count.
	_, err = Elements([]byte(`[1,2,{{{`), 2)
	require.ErrorIs(t, err, ErrTooManyElements)
	var tooMany *TooManyError
	require.ErrorAs(t, err, &tooMany)
	require.Equal(t, 2, tooMany.Limit)

	_, err = Elements([]byte(`[1,2`), 5)
	require.EqualError(t, err, "unexpected end of JSON input")
	_, err = Elements([]byte(`{}`), 5)
	require.EqualError(t, err, "json: want a JSON array, got {}")
}

func TestStringDecodesAsEncodingJSONDoes(t *testing.T) {
	for _, doc := range []string{`"plain"`, ` "tab\there" `, `"\u00e9\ud83d\ude00"`, "\"\xff\"", `""`} {
		var want string
		require.NoError(t, json.Unmarshal([]byte(doc), &want), doc)
		got, err := String([]byte(doc))
		require.NoError(t, err, doc)
		require.Equal(t, want, got, doc)
	}
	_, err := String([]byte(`1`))
	require.EqualError(t, err, "json: want a JSON string, got 1")
	_, err = String([]byte(`"a" "b"`))
	require.Error(t, err)
}

func TestSplittingHonoursEncodingJSONsDepthLimit(t *testing.T) {
	nested := func(n int) []byte {
		return []byte(`{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`)
	}
	_, err := Members(nested(maxDepth))
	require.NoError(t, err)
	_, err = Members(nested(maxDepth + 1))
	require.ErrorContains(t, err, "exceeded max depth")
}

// FuzzSplitMatchesEncodingJSON: the splitters accept exactly what
// encoding/json accepts, refuse with its error, and split an accepted
// object or array into the members or elements it decodes to.
func FuzzSplitMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,2.5e-3,true,false,null,"x"]}`, `[{"a":{"b":[]}}, -0, 1E+2]`,
		`{"a":"\ud800"}`, "{\"\xff\":1}", `{"a":1,"a":2}`, `[1,]`, `{"a" 1}`, `"s"`, ` 12 `, `[01]`, `["\u12"]`, "[\"\t\"]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var any json.RawMessage
		want := json.Unmarshal(doc, &any)
		require.Equal(t, json.Valid(doc), Valid(doc))
		trimmed := bytes.Trim(doc, " \t\r\n")
		members, err := Members(doc)
		switch {
		case want != nil:
			require.EqualError(t, err, want.Error())
		case len(trimmed) > 0 && trimmed[0] == '{':
			require.NoError(t, err)
			var asMap map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(doc, &asMap))
			names := MemberNames(trimmed)
			require.Len(t, members, len(names))
			for i, m := range members {
				require.Equal(t, names[i], m.Name)
				require.True(t, json.Valid(m.Value))
			}
			for _, m := range members {
				if want := asMap[m.Name]; len(members) == len(asMap) {
					require.Equal(t, string(want), string(m.Value))
				}
			}
		default:
			require.Error(t, err)
		}
		elems, err := Elements(doc, 1<<20)
		switch {
		case want != nil:
			require.EqualError(t, err, want.Error())
		case len(trimmed) > 0 && trimmed[0] == '[':
			require.NoError(t, err)
			var asSlice []json.RawMessage
			require.NoError(t, json.Unmarshal(doc, &asSlice))
			require.Len(t, elems, len(asSlice))
			for i := range elems {
				require.Equal(t, string(asSlice[i]), string(elems[i]))
			}
		default:
			require.Error(t, err)
		}
		// Unmarshal hands an Unmarshaler what encoding/json would.
		var direct, through handed
		wantErr := json.Unmarshal(doc, &direct)
		err = Unmarshal(doc, &through)
		require.Equal(t, wantErr == nil, err == nil)
		require.Equal(t, direct, through)
		str, err := String(doc)
		var wantStr string
		wantErr = json.Unmarshal(doc, &wantStr)
		// A null is no string: json.Unmarshal leaves the string as it
		// was, String refuses it.
		if want == nil && wantErr == nil && trimmed[0] == '"' {
			require.NoError(t, err)
			require.Equal(t, wantStr, str)
		} else {
			require.Error(t, err)
		}
	})
}

// handed keeps the text its UnmarshalJSON was given.
type handed struct{ text string }

func (h *handed) UnmarshalJSON(data []byte) error {
	h.text = string(data)
	return nil
}

// Unmarshal refuses a nil pointer or a value, as encoding/json does, rather
// than calling its UnmarshalJSON.
func TestUnmarshalRefusesWhatEncodingJSONRefuses(t *testing.T) {
	var nilHanded *handed
	require.Equal(t, json.Unmarshal([]byte(`{}`), nilHanded), Unmarshal([]byte(`{}`), nilHanded))
	var inv *json.InvalidUnmarshalError
	require.ErrorAs(t, Unmarshal([]byte(`{}`), nilHanded), &inv)
	require.ErrorAs(t, Unmarshal([]byte(`{}`), valueHanded{}), &inv)
}

// valueHanded is an Unmarshaler by value, which json.Unmarshal refuses.
type valueHanded struct{}

func (valueHanded) UnmarshalJSON([]byte) error { return nil }

// A number that does not fit, refused by encoding/json inside an
// Unmarshaler, is a *NumberError either way Unmarshal takes.
func TestUnmarshalGivesANumberErrorFromInsideAnUnmarshaler(t *testing.T) {
	var w wrapped
	err := Unmarshal([]byte(`{"u32": 4294967296}`), &w)
	require.ErrorIs(t, err, ErrNumberDoesNotFit)
	var ne *NumberError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, "4294967296", ne.Number)
}

// wrapped decodes itself with encoding/json, as a plan file's device does.
type wrapped struct{ U32 uint32 }

func (w *wrapped) UnmarshalJSON(data []byte) error {
	var v struct {
		U32 uint32 `json:"u32"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	w.U32 = v.U32
	return nil
}
