package main

import (
	"bytes"
	"io"
	"strings"

	"github.com/rivo/uniseg"
)

// textTable lays out rows of cells in columns by the width each cell takes
// on a terminal, as text/tabwriter does by its count of code points: a
// trace name or a record label in CJK or with emoji takes two columns a
// character, and tabwriter, counting one, pushed the rest of its row out
// of line.
type textTable struct {
	// alignRight puts each cell at the right of its column. Every cell,
	// the last of a row too, is then in a column (tabwriter.AlignRight
	// with each cell ended by a tab); left-aligned, a row's last cell is
	// written as it is, past the columns.
	alignRight bool
	rows       [][]string
}

// tablePadding is the spaces each column adds to its widest cell.
const tablePadding = 2

func (t *textTable) row(cells ...string) { t.rows = append(t.rows, cells) }

// write writes the rows, a line each.
func (t *textTable) write(w io.Writer) error {
	var widths []int
	for _, r := range t.rows {
		cols := len(r)
		if !t.alignRight {
			cols-- // the last cell is no column's
		}
		for i := 0; i < cols; i++ {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], uniseg.StringWidth(r[i]))
		}
	}
	var b bytes.Buffer
	for _, r := range t.rows {
		for i, c := range r {
			if !t.alignRight && i == len(r)-1 {
				b.WriteString(c)
				break
			}
			pad := strings.Repeat(" ", widths[i]+tablePadding-uniseg.StringWidth(c))
			if t.alignRight {
				b.WriteString(pad)
				b.WriteString(c)
			} else {
				b.WriteString(c)
				b.WriteString(pad)
			}
		}
		b.WriteByte('\n')
	}
	_, err := w.Write(b.Bytes())
	return err
}
