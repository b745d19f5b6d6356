package printable

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLabel(t *testing.T) {
	for in, want := range map[string]string{
		"after step 3":     "after step 3",
		"café · 5 µs":      "café · 5 µs",
		"after step\u202e": `"after step\u202e"`,
		"two\nlines":       `"two\nlines"`,
		"\x1b[31mred":      `"\x1b[31mred"`,
		"\xff":             `"\xff"`,
		`"quoted"`:         `"\"quoted\""`,
		"a ":               `"a "`,
		" a":               `" a"`,
		"   ":              `"   "`,
		"a b":              "a b",
		"":                 "",
	} {
		require.Equal(t, want, Label(in), "%q", in)
	}
}

// Escaped escapes what Label would quote, and adds no quotes.
func TestEscaped(t *testing.T) {
	for in, want := range map[string]string{
		"reading /tmp/run.trace":        "reading /tmp/run.trace",
		`a "quoted" word`:               `a "quoted" word`,
		"reading /tmp/a\x1b[31mb.trace": `reading /tmp/a\x1b[31mb.trace`,
		"two\nlines":                    `two\nlines`,
		"bad \xff byte":                 `bad \xff byte`,
		"naïve":                         "naïve",
	} {
		require.Equal(t, want, Escaped(in), "%q", in)
	}
}

func TestCountAgreesWithItsNumber(t *testing.T) {
	require.Equal(t, "1 line", Count(1, "line"))
	require.Equal(t, "0 lines", Count(0, "line"))
	require.Equal(t, "2 device allocations", Count(uint64(2), "device allocation"))
	require.Equal(t, "-1 slots", Count(-1, "slot"))
	require.Equal(t, "18446744073709551615 events", Count(^uint64(0), "event"))
}
