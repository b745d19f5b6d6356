package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/rivo/uniseg"
	"github.com/stretchr/testify/require"
)

// On ASCII the tables read as text/tabwriter wrote them, right-aligned
// with every cell ended by a tab and left-aligned with the last cell
// unended, as the commands used it.
func TestTextTableMatchesTabwriterOnASCII(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for trial := range 200 {
		cols := 1 + rng.IntN(6)
		var rows [][]string
		for range 1 + rng.IntN(5) {
			r := make([]string, cols)
			for i := range r {
				r[i] = strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(12))
			}
			rows = append(rows, r)
		}
		for _, right := range []bool{false, true} {
			var want, got bytes.Buffer
			flags, end := uint(0), ""
			if right {
				flags, end = tabwriter.AlignRight, "\t"
			}
			tw := tabwriter.NewWriter(&want, 0, 4, 2, ' ', flags)
			tt := textTable{alignRight: right}
			for _, r := range rows {
				fmt.Fprintln(tw, strings.Join(r, "\t")+end)
				tt.row(r...)
			}
			require.NoError(t, tw.Flush())
			require.NoError(t, tt.write(&got))
			require.Equal(t, want.String(), got.String(), "trial %d, right-aligned %v: %q", trial, right, rows)
		}
	}
}

// A cell of wide characters (CJK, emoji) takes two terminal columns a
// character: the columns after it still start at one place on every line.
func TestTextTableAlignsWideCharacters(t *testing.T) {
	rows := [][]string{
		{"ID", "LABEL", "RESERVED", "IN USE"},
		{"1", "训练步骤", "20.97 MB", "3.74 MB"},
		{"2", "step", "1.00 MB", "0 B"},
		{"3", "🚀 launch", "2.10 GB", "1.00 GB"},
	}
	for _, right := range []bool{false, true} {
		tt := textTable{alignRight: right}
		for _, r := range rows {
			tt.row(r...)
		}
		var b bytes.Buffer
		require.NoError(t, tt.write(&b))
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		require.Len(t, lines, len(rows))
		// Where each row's third cell starts (left-aligned) or its second
		// ends (right-aligned), in terminal columns.
		mark := func(line string, r []string) int {
			cell := r[2]
			if right {
				cell = r[1]
				i := strings.Index(line, cell) + len(cell)
				return uniseg.StringWidth(line[:i])
			}
			return uniseg.StringWidth(line[:strings.Index(line, cell)])
		}
		want := mark(lines[0], rows[0])
		for i, l := range lines {
			require.Equal(t, want, mark(l, rows[i]), "right-aligned %v, line %d: %q", right, i, l)
		}
	}
}
