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
		"":                 "",
	} {
		require.Equal(t, want, Label(in), "%q", in)
	}
}
