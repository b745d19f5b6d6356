package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	gojson "github.com/goccy/go-json"
	"github.com/stretchr/testify/require"
)

// numbersThatDoNotFitUint64 are JSON numbers no uint64 field may take.
var numbersThatDoNotFitUint64 = []string{
	"18446744073709551616", // 2^64
	"18446744073709551617", // 2^64+1: goccy/go-json reads 1
	"36893488147419103233", // 2^65+1
	"99999999999999999999", // wraps to 7766279631452241919
	"-1", "-0", "1e6", "1E6", "1.5", "1.0", "0.0", "1e-3",
	"184467440737095516160000000000",
}

func TestParseUint64RefusesNumbersThatDoNotFit(t *testing.T) {
	for _, n := range numbersThatDoNotFitUint64 {
		_, err := ParseUint64([]byte(n))
		require.ErrorIs(t, err, ErrNumberDoesNotFit, n)
		var ne *NumberError
		require.True(t, errors.As(err, &ne), n)
		require.Equal(t, "uint64", ne.Type)
	}
}

func TestParseUint64RefusesNull(t *testing.T) {
	_, err := ParseUint64([]byte(" null "))
	require.ErrorContains(t, err, "want a non-negative integer")
}

func TestParseUint64RefusesWhatIsNotANumber(t *testing.T) {
	for _, s := range []string{"", " ", `"1"`, "null", "true", "01", "+1", "1.", ".5", "1e", "0x10", "1 2", "[1]", "１"} {
		_, err := ParseUint64([]byte(s))
		require.Error(t, err, "%q", s)
		require.NotErrorIs(t, err, ErrNumberDoesNotFit, "%q is not a number at all", s)
	}
}

func TestParseUint64ReadsEveryUint64(t *testing.T) {
	for s, want := range map[string]uint64{
		"0": 0, "1": 1, " 42\n": 42, "4294967296": 1 << 32,
		"18446744073709551615": 1<<64 - 1,
	} {
		got, err := ParseUint64([]byte(s))
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
}

type sample struct {
	U64 uint64  `json:"u64"`
	U32 uint32  `json:"u32"`
	I64 int64   `json:"i64"`
	F64 float64 `json:"f64"`
}

// TestUnmarshalRefusesNumbersThatDoNotFitWhereGoccyWraps pins why the
// decoding path exists: the same document goccy/go-json accepts with a
// wrapped value is refused here.
func TestUnmarshalRefusesNumbersThatDoNotFitWhereGoccyWraps(t *testing.T) {
	doc := []byte(`{"u64":18446744073709551617}`)
	var wrapped sample
	if gojson.Unmarshal(doc, &wrapped) == nil {
		t.Logf("goccy/go-json reads %s as u64=%d", doc, wrapped.U64)
	}
	for _, d := range []string{
		`{"u64":18446744073709551617}`, `{"u64":18446744073709551616}`, `{"u64":-1}`, `{"u64":1e6}`, `{"u64":1.5}`,
		`{"u32":4294967296}`, `{"u32":-1}`,
		`{"i64":9223372036854775808}`, `{"i64":-9223372036854775809}`, `{"i64":1e3}`,
		`{"f64":1e400}`,
	} {
		var s sample
		err := Unmarshal([]byte(d), &s)
		require.ErrorIs(t, err, ErrNumberDoesNotFit, d)
		require.Contains(t, err.Error(), "does not fit", d)
	}
}

func TestUnmarshalReadsNumbersThatFit(t *testing.T) {
	var s sample
	require.NoError(t, Unmarshal([]byte(`{"u64":18446744073709551615,"u32":4294967295,"i64":-9223372036854775808,"f64":1.5e300}`), &s))
	require.Equal(t, sample{U64: 1<<64 - 1, U32: 1<<32 - 1, I64: -1 << 63, F64: 1.5e300}, s)
}

func TestNumberErrorQuotesAtMost40Bytes(t *testing.T) {
	long := make([]byte, 1<<20)
	for i := range long {
		long[i] = '9'
	}
	_, err := ParseUint64(long)
	require.ErrorIs(t, err, ErrNumberDoesNotFit)
	require.Less(t, len(err.Error()), 120)
}

func FuzzParseUint64(f *testing.F) {
	for _, n := range numbersThatDoNotFitUint64 {
		f.Add([]byte(n))
	}
	for _, s := range []string{"0", "18446744073709551615", "01", "1e", "-"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if string(trimSpace(raw)) == "null" {
			return // encoding/json leaves a uint64 as it was on null; ParseUint64 wants a number
		}
		got, err := ParseUint64(raw)
		var ref uint64
		refErr := Unmarshal(raw, &ref)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("ParseUint64(%q) = %d, %v; encoding/json: %d, %v", raw, got, err, ref, refErr)
		}
		if err == nil && got != ref {
			t.Fatalf("ParseUint64(%q) = %d, encoding/json %d", raw, got, ref)
		}
	})
}

// Squeeze is a Squeezer over the whole of b at once.
func Squeeze(b []byte) []byte {
	var s Squeezer
	out, err := s.Append(nil, b)
	if err != nil {
		panic(err) // no bound set
	}
	return out
}

func TestSqueezeDropsOnlySpaceThatSeparatesNothing(t *testing.T) {
	for in, want := range map[string]string{
		"": "",
		" { \"a b\" : [ 1 , 2 ] ,\n\"c\":\tnull } ": `{"a b":[1,2],"c":null}`,
		`[1 2]`:            `[1 2]`,
		"[1 \n\t 2]":       `[1 2]`,
		`"a" "b"`:          `"a" "b"`,
		`"a\" b" `:         `"a\" b"`,
		`"a\\" , "b"`:      `"a\\","b"`,
		"[ true , false ]": `[true,false]`,
	} {
		require.Equal(t, want, string(Squeeze([]byte(in))), "%q", in)
	}
}

// Verbatim is where the squeezed text first parts from the text given:
// the offsets a decoder gives below it are the text's own.
func TestSqueezerVerbatimIsWhereTheOffsetsStopMatching(t *testing.T) {
	for in, want := range map[string]int64{
		"":                    0,
		`{"a":[1,2]}`:         11,
		`[1 2]`:               5,  // one space between tokens is kept
		"[1\t2]":              5,  // as a space, at its offset
		`[1  2]`:              2,  // two are one
		`{"a": 1}`:            5,  // dropped after the colon
		" {}":                 0,  // dropped ahead of the text
		"{}\n":                2,  // dropped past its end
		`{"a b  c":1, "d":2}`: 12, // white space in strings is kept
		"{\"a\":1,\n,}":       7,
	} {
		var s Squeezer
		_, err := s.Append(nil, []byte(in))
		require.NoError(t, err)
		require.Equal(t, want, s.Verbatim(), "%q", in)
	}
}

// MaxStringBytes bounds the bytes of every string together, quotes and
// escapes counted, read in pieces or at once; white space and other
// tokens do not count.
func TestSqueezerBoundsTheBytesInStrings(t *testing.T) {
	text := `{ "ab" : [ 1, "c\"d" ] }` // strings of 4 and 6 bytes
	for _, c := range []struct {
		limit int64
		ok    bool
	}{{0, true}, {10, true}, {9, false}, {4, false}, {1, false}} {
		for cut := range len(text) + 1 {
			s := Squeezer{MaxStringBytes: c.limit}
			out, err := s.Append(nil, []byte(text[:cut]))
			if err == nil {
				out, err = s.Append(out, []byte(text[cut:]))
			}
			if c.ok {
				require.NoError(t, err, "limit %d", c.limit)
				require.Equal(t, `{"ab":[1,"c\"d"]}`, string(out))
				continue
			}
			require.ErrorIs(t, err, ErrStringBytes, "limit %d, cut at %d", c.limit, cut)
			var e *StringBytesError
			require.ErrorAs(t, err, &e)
			require.Equal(t, c.limit, e.Limit)
		}
	}
}

// Squeezed text is valid JSON exactly when the text was, and means the
// same: encoding/json compacts both to the same bytes.
func FuzzSqueeze(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2, {"b": "c d"}]}`, `[1 2]`, `"x\" y"`, " [ ] ", `{"a" : tru e}`, `1 2`} {
		f.Add(s, uint(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, in string, cut uint) {
		// In two pieces, it is squeezed as in one.
		var s Squeezer
		at := int(cut % uint(len(in)+1))
		head, err := s.Append(nil, []byte(in[:at]))
		require.NoError(t, err)
		pieces, err := s.Append(head, []byte(in[at:]))
		require.NoError(t, err)
		out := Squeeze([]byte(in))
		require.Equal(t, string(out), string(pieces), "cut at %d", at)
		// Below Verbatim, each byte is where it was (a space for any
		// white space).
		v := s.Verbatim()
		require.LessOrEqual(t, v, int64(len(out)))
		for i := range v {
			if out[i] != in[i] && !(out[i] == ' ' && bytes.IndexByte([]byte(" \t\r\n"), in[i]) >= 0) {
				t.Fatalf("%q squeezed to %q: byte %d moved, below Verbatim %d", in, out, i, v)
			}
		}
		require.Equal(t, json.Valid([]byte(in)), json.Valid(out), "%q squeezed to %q", in, out)
		if !json.Valid([]byte(in)) {
			return
		}
		var a, b bytes.Buffer
		require.NoError(t, json.Compact(&a, []byte(in)))
		require.NoError(t, json.Compact(&b, out))
		require.Equal(t, a.String(), b.String())
	})
}

func TestMemberNamesListsTopLevelNamesInOrder(t *testing.T) {
	in := `{"a":1, "b" : {"a":2,"c":[{"d":3}]}, "e\"f":"g:h", "a":"\\" , "i\u0041":[":"]}`
	require.Equal(t, []string{"a", "b", `e"f`, "a", "iA"}, MemberNames([]byte(in)))
	require.Empty(t, MemberNames([]byte(`{}`)))
	require.Empty(t, MemberNames([]byte(`["a", "b"]`)))
	require.NoError(t, CheckMembers([]byte(`{"b":1,"a":2}`), "a", "b"))
	require.EqualError(t, CheckMembers([]byte(`{"a":1,"a":2}`), "a", "b"), `json: field "a" given twice`)
	require.EqualError(t, CheckMembers([]byte(`{"A":1}`), "a", "b"), `json: unknown field "A" (known: a, b)`)
}

// MemberNames lists what a decoder reading the object token by token
// finds at its top.
func FuzzMemberNames(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":{"c":"d"}}`, `{"x\"y":[1,{"z":2}],"x\"y":null}`, `{}`, `[{"a":1}]`, `"s"`, "{\"\xff\":1,\"\xfe\":2}", "{\"a\x7f\":1}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if !json.Valid([]byte(in)) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(in)))
		tok, _ := dec.Token()
		var want []string
		if tok == json.Delim('{') {
			for dec.More() {
				name, err := dec.Token()
				require.NoError(t, err)
				want = append(want, name.(string))
				var skip json.RawMessage
				require.NoError(t, dec.Decode(&skip))
			}
		}
		require.Equal(t, want, MemberNames([]byte(in)), "%q", in)
	})
}

// A number refused for an integer field says what is wrong with it, not
// "does not fit" alone: 4.0 and 1e3 are whole numbers, and were told
// they did not fit as a number past the field's range is. The kind stays
// ErrNumberDoesNotFit.
func TestNumberErrorSaysWhatIsWrong(t *testing.T) {
	for doc, want := range map[string]string{
		`{"i64":4.0}`:                  "json: number 4.0 does not fit field i64 of type int64: it has a fractional part, and the field takes a whole number in digits alone",
		`{"i64":1e3}`:                  "json: number 1e3 does not fit field i64 of type int64: it has an exponent, and the field takes a whole number in digits alone",
		`{"u32":1.5E2}`:                "json: number 1.5E2 does not fit field u32 of type uint32: it has a fractional part and an exponent, and the field takes a whole number in digits alone",
		`{"u32":-1}`:                   "json: number -1 does not fit field u32 of type uint32: it has a minus sign, and the field is unsigned (0 to 4294967295)",
		`{"u32":4294967296}`:           "json: number 4294967296 does not fit field u32 of type uint32: the field holds 0 to 4294967295",
		`{"i64":-9223372036854775809}`: "json: number -9223372036854775809 does not fit field i64 of type int64: the field holds -9223372036854775808 to 9223372036854775807",
		`{"f64":1e400}`:                "json: number 1e400 does not fit field f64 of type float64",
	} {
		var s sample
		err := Unmarshal([]byte(doc), &s)
		require.ErrorIs(t, err, ErrNumberDoesNotFit, doc)
		require.EqualError(t, err, want)
	}
	for num, want := range map[string]string{
		"4.0":                  "json: number 4.0 does not fit uint64: it has a fractional part, and the field takes a whole number in digits alone",
		"1e3":                  "json: number 1e3 does not fit uint64: it has an exponent, and the field takes a whole number in digits alone",
		"-0":                   "json: number -0 does not fit uint64: it has a minus sign, and the field is unsigned (0 to 18446744073709551615)",
		"18446744073709551616": "json: number 18446744073709551616 does not fit uint64: the field holds 0 to 18446744073709551615",
	} {
		_, err := ParseUint64([]byte(num))
		require.ErrorIs(t, err, ErrNumberDoesNotFit, num)
		require.EqualError(t, err, want)
	}
	require.EqualError(t, NewNumberError("2.0", "uint8", "device.alignment"),
		"json: number 2.0 does not fit field device.alignment of type uint8: it has a fractional part, and the field takes a whole number in digits alone")
	require.EqualError(t, NewNumberError("2.0", "memory.Pages", "pages"), "json: number 2.0 does not fit field pages of type memory.Pages")
}

// A number where the field takes no number at all (a string, a bool, an
// array) says so: it read "json: number ? does not fit field s of type
// string". The kind and the "?" stay, which readers tell it by.
func TestNumberWhereTheFieldTakesNoneSaysSo(t *testing.T) {
	var v struct {
		S string `json:"s"`
		B []bool `json:"b"`
	}
	for doc, want := range map[string]string{
		`{"s":5}`:        "json: a number where field s of type string takes none",
		`{"b":[true,1]}`: "json: a number where field b of type bool takes none",
	} {
		err := Unmarshal([]byte(doc), &v)
		require.ErrorIs(t, err, ErrNumberDoesNotFit, doc)
		require.EqualError(t, err, want)
		var ne *NumberError
		require.ErrorAs(t, err, &ne)
		require.Equal(t, "?", ne.Number)
	}
	var s string
	require.EqualError(t, Unmarshal([]byte(`5`), &s), "json: a number where string takes none")
}
