// Package printable shows strings that came from users and guests (record
// labels, file names) so that they cannot act on what shows them: a
// terminal, a table, a page.
package printable

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Label is s as it is, or s quoted as Go quotes it where s holds a rune
// that is not printable (one unicode.IsPrint refuses: a newline, a tab, an
// escape, a bidirectional override that would turn the text after it
// around, a space other than ' '), is not valid UTF-8 (its bytes would show
// as U+FFFD), starts with a double quote, or starts or ends with a space
// (a table's padding or a page's layout hides it): so two labels never
// show as one ("a\nb" and the label of those six characters did, and "a"
// and "a " still did).
func Label(s string) string {
	if shows(s) && !strings.HasPrefix(s, `"`) && !strings.HasPrefix(s, " ") && !strings.HasSuffix(s, " ") {
		return s
	}
	return strconv.Quote(s)
}

// Escaped is s with what Label would quote escaped as Go escapes it, but
// unquoted: for a line that holds a label among words of its own (a
// progress bar's "reading PATH"), where quotes would take in the words.
func Escaped(s string) string {
	if shows(s) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// shows says whether s shows as it is: valid UTF-8, every rune printable.
func shows(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

// Count is n nouns in words: "1 slot", "0 slots", "2 slots". The nouns it
// is given take an s in the plural.
func Count[N ~int | ~int64 | ~uint32 | ~uint64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
