package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/spf13/cobra"

	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
)

// allKinds is the --kind value that lists records of every kind.
const allKinds = "all"

func newRecordsCmd() *cobra.Command {
	var (
		envName string
		glob    string
		kind    string
		last    int
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "records",
		Short: "the memory records of an environment",
		Long: `List the records of an environment, oldest first: by default its memory
records (a stream's pool report at a moment a workload named), one row each
with the number of pools (the dynamic ones and the persistent one), the bytes
reserved and in use across them, and the sum of their peak pages. --json
writes one object per line: id, kind, label, time and the record itself;
a record reported on stderr has an "error" besides, and one whose stored
body is not JSON in UTF-8 (a damaged file, another program's row) has
"record": null and the body as a string in "record_text", each byte that is
not UTF-8 as U+FFFD.

The environment is opened read-only: records works in a directory it cannot
write and never gets in the way of a process writing records. Control
characters in a label or a kind (a newline, a tab) are shown escaped, the
label or kind quoted; so is one that starts or ends with a space.
A memory record that cannot be decoded, or a record of any kind whose body
is not JSON in UTF-8, is listed with '-' for its figures (with --json,
written as stored where it is JSON); such records are reported on stderr,
the first 100 by a line each and the rest by their number, and the command
exits non-zero once every record is written. Kinds are open
(an application names its own): a --kind no record has lists nothing, and
stderr names the kinds the environment holds, or says it holds no records
(as it says for --kind all); the command succeeds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Bad flags are the flags' errors, not the environment's.
			if last < 0 {
				return fmt.Errorf("--last %d: want a count of the newest records, or 0 for all", last)
			}
			// A backslash first: "x\[" is an escape to its writer, not
			// a set that never closes.
			if err := checkGlobEscapes(glob); err != nil {
				return err
			}
			if err := environment.CheckLabelGlob(glob); err != nil {
				return fmt.Errorf("--label: %w", err)
			}
			q := environment.Query{LabelGlob: glob, Last: last, Kind: kind}
			if kind == allKinds {
				q.Kind = ""
			} else if err := environment.CheckKind(kind); err != nil {
				// A kind no record can have ("ALL") was the environment's
				// error, after it was opened, and did not say how to list
				// every kind.
				return fmt.Errorf("--kind: %w ('%s' lists every kind)", err, allKinds)
			}
			return listRecords(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), envName, q, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&envName, "env", environment.DefaultName, "`NAME` of the environment (directory: $"+environment.DirEnvVar+", else the XDG data directory)")
	f.StringVar(&glob, "label", "", "only labels matching `GLOB` ('*', '?', '[...]', no escape character: '[*]' matches a '*'; '': every label)")
	f.StringVar(&kind, "kind", environment.KindMemory, "record `KIND`, or '"+allKinds+"' for every kind")
	f.IntVar(&last, "last", 0, "only the newest `N` records (0: all)")
	f.BoolVar(&asJSON, "json", false, "one JSON object per line")
	return cmd
}

func init() { rootCmd.AddCommand(newRecordsCmd()) }

// checkGlobEscapes refuses a --label glob with a backslash where a shell's
// glob, fnmatch or path.Match takes it as an escape: before '*', '?', '[',
// ']' or another backslash, or ending the glob (which those refuse). A
// label glob is SQLite's GLOB, which has no escape character: it matched
// the backslash itself, so "a\*" listed labels starting "a\" and not the
// label "a*", and "\" was taken where path.Match calls it malformed. A
// backslash in a set ("[\]") is a member, as it is to GLOB; past a set
// that never closes, the rest is read as outside one.
func checkGlobEscapes(glob string) error {
	for i := 0; i < len(glob); i++ {
		switch glob[i] {
		case '[':
			// Past the set: a ']' just after '[' or "[^" is a member.
			j := i + 1
			if j < len(glob) && glob[j] == '^' {
				j++
			}
			if j < len(glob) && glob[j] == ']' {
				j++
			}
			if end := strings.IndexByte(glob[j:], ']'); end >= 0 {
				i = j + end
			}
		case '\\':
			const noEscape = "a label glob has no escape character (it is SQLite's GLOB)"
			if i+1 == len(glob) {
				return fmt.Errorf("--label %s: %s: the backslash ending it would match a backslash, where path.Match calls it malformed; write [\\] to match a backslash", printable.Label(glob), noEscape)
			}
			next := glob[i+1]
			if !strings.ContainsRune(`*?[]\\`, rune(next)) {
				continue
			}
			if next == '\\' {
				return fmt.Errorf("--label %s: %s: the backslashes at byte %d match two backslashes, not one; write [\\] to match a backslash", printable.Label(glob), noEscape, i)
			}
			itself := "[" + string(next) + "]"
			if next == ']' {
				itself = "]" // outside a set, ']' is itself
			}
			return fmt.Errorf("--label %s: %s: the backslash at byte %d would match a backslash, not escape the '%c' after it; write %s to match a '%c' itself, and [\\] for a backslash",
				printable.Label(glob), noEscape, i, next, itself, next)
		}
	}
	return nil
}

// recordLine is one record in --json output.
type recordLine struct {
	ID     int64           `json:"id"`
	Kind   string          `json:"kind"`
	Label  string          `json:"label"`
	Time   *time.Time      `json:"time"`   // null where the stored time is not a number
	Record json.RawMessage `json:"record"` // null where the stored body is not JSON in UTF-8
	// RecordText is the stored body, as a string, where it is not JSON in
	// UTF-8 (its bytes that are not UTF-8 as U+FFFD): written as stored,
	// the line was no JSON, and the encoder's error ended the listing.
	RecordText *string `json:"record_text,omitempty"`
	// Error says why the record could not be decoded, as stderr does.
	Error string `json:"error,omitempty"`
}

func listRecords(ctx context.Context, out, stderr io.Writer, envName string, q environment.Query, asJSON bool) error {
	// Kinds are open (an application names its own), so a kind no record
	// has lists nothing and succeeds; stderr says so and names the kinds
	// there are, where a misspelt --kind looked like an empty environment.
	noneOfKind := noRecordsOfKind(stderr, envName, q.Kind)
	if asJSON {
		// Every record is written as stored, or as text where it is not
		// JSON; one the table could not show still fails the command, as
		// the table does.
		enc := json.NewEncoder(out)
		undecodable, err := eachRecord(ctx, envName, q, "written as stored, or as record_text where not JSON", noneOfKind, func(e environment.Entry, _ *memory.Record, bad error) error {
			line := recordLine{ID: e.ID, Kind: e.Kind, Label: e.Label, Record: e.Body}
			if bad != nil {
				line.Error = bad.Error()
				if environment.CheckBody(e.Body) != nil {
					// Each byte that is not UTF-8 becomes U+FFFD, as the help
					// says (ToValidUTF8 made a run of them one).
					text := string([]rune(string(e.Body)))
					line.Record, line.RecordText = json.RawMessage("null"), &text
				}
			}
			if !e.Time.IsZero() {
				t := e.Time.UTC()
				line.Time = &t
			}
			if err := enc.Encode(line); err != nil {
				return fmt.Errorf("writing record %d: %w", e.ID, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if undecodable != nil {
			return undecodable
		}
		return nil
	}
	// The table holds its rows' text only, not the records.
	var t textTable
	t.row("ID", "TIME", "KIND", "LABEL", "POOLS", "RESERVED", "IN USE", "PEAK PAGES")
	undecodable, err := eachRecord(ctx, envName, q, "listed with '-'", noneOfKind, func(e environment.Entry, rec *memory.Record, _ error) error {
		pools, reserved, inUse, peak := "-", "-", "-", "-"
		if rec != nil {
			u := rec.Report.Usage()
			pools = strconv.Itoa(len(rec.Report.Dynamic) + 1) // the dynamic pools and the persistent one
			reserved, inUse = memory.FormatBytes(u.BytesReserved), memory.FormatBytes(u.BytesInUse)
			peak = strconv.FormatUint(peakPages(rec.Report), 10)
		}
		when := "-"
		if !e.Time.IsZero() {
			when = e.Time.UTC().Format(recordTimeLayout)
		}
		// A kind another program stored may hold a newline or a tab, as
		// a label may: shown raw, it split the row.
		t.row(strconv.FormatInt(e.ID, 10), when, printable.Label(e.Kind), printable.Label(e.Label), pools, reserved, inUse, peak)
		return nil
	})
	if err != nil {
		return err
	}
	if err := t.write(out); err != nil {
		return err
	}
	if undecodable != nil {
		return undecodable
	}
	return nil
}

// noRecordsOfKind is eachRecord's noneOfKind for a listing of kind's
// records in environment envName: it says on stderr that the environment
// holds no records, or names the kinds it holds.
func noRecordsOfKind(stderr io.Writer, envName, kind string) func(kinds []string) {
	return func(kinds []string) {
		if len(kinds) == 0 {
			fmt.Fprintf(stderr, "vkrt: environment %q holds no records\n", envName)
			return
		}
		// Quoted once: Go's quoting escapes what printable.Label would,
		// and a kind it quoted was quoted again ("\"a\\nb\"").
		quoted := make([]string, len(kinds))
		for i, k := range kinds {
			quoted[i] = strconv.Quote(k)
		}
		fmt.Fprintf(stderr, "vkrt: no record of kind %q in environment %q (its kinds: %s)\n", kind, envName, strings.Join(quoted, ", "))
	}
}

// eachRecord opens an environment read-only, so that reading never
// creates it or gets in the way of a process writing records, and calls fn
// with each record q selects, oldest first, a page at a time
// (environment.Env.Each), with its decoded memory record (nil for a
// record of another kind or one that cannot be decoded) and, for one that
// cannot be decoded, why. Those are counted in undecodable, the first
// maxUndecodableNamed of them named, which a reader returns once it has
// shown the rest; shown says what became of them. An
// error of fn ends the listing. Where nothing is listed, noneOfKind (if
// not nil) is called with the kinds the environment holds if q names a
// kind not among them, or if it holds none.
func eachRecord(ctx context.Context, name string, q environment.Query, shown string, noneOfKind func(kinds []string),
	fn func(environment.Entry, *memory.Record, error) error) (undecodable *undecodableError, _ error) {
	if ctx == nil {
		ctx = context.Background()
	}
	env, err := environment.OpenContext(ctx, name, environment.ReadOnly())
	if err != nil {
		return nil, err
	}
	defer env.Close()
	total := 0
	err = env.Each(ctx, q, func(e environment.Entry) error {
		total++
		rec, err := memoryRecord(e)
		if err != nil {
			if undecodable == nil {
				undecodable = &undecodableError{Shown: shown}
			}
			undecodable.Count++
			if len(undecodable.Entries) < maxUndecodableNamed {
				named := e
				named.Body = nil // named, not kept
				undecodable.Entries = append(undecodable.Entries, named)
				undecodable.Errs = append(undecodable.Errs, err)
			}
		}
		return fn(e, rec, err)
	})
	if undecodable != nil {
		undecodable.Total = total
	}
	if err == nil && total == 0 && noneOfKind != nil {
		kinds, err := env.Kinds(ctx)
		if err != nil {
			return nil, err
		}
		// Every kind asked for (vkrt records --kind all) in an environment
		// of none: said as for one kind, where it listed nothing, silently.
		if (q.Kind != "" && !slices.Contains(kinds, q.Kind)) || len(kinds) == 0 {
			noneOfKind(kinds)
		}
	}
	return undecodable, err
}

// memoryRecord decodes a memory record: nil for a record of another kind,
// and an error for one that cannot be decoded, or of any kind whose body
// is not JSON in UTF-8 (environment.CheckBody), which only another
// program or damage leaves.
func memoryRecord(e environment.Entry) (*memory.Record, error) {
	if e.Time.IsZero() {
		return nil, fmt.Errorf("record %d: %w", e.ID, errRecordTime)
	}
	if e.Kind != memory.RecordKind {
		if err := environment.CheckBody(e.Body); err != nil {
			return nil, fmt.Errorf("record %d (kind %q): %w", e.ID, e.Kind, err)
		}
		return nil, nil
	}
	var rec memory.Record
	if err := e.Decode(&rec); err != nil {
		return nil, err
	}
	// The decoder checked the JSON, and took any byte in a string.
	if !utf8.Valid(e.Body) {
		return nil, fmt.Errorf("record %d (kind %q): %w", e.ID, e.Kind, environment.CheckBody(e.Body))
	}
	if err := checkTotals(e, rec.Report); err != nil {
		return nil, err
	}
	return &rec, nil
}

// maxUndecodableNamed bounds the undecodable records an undecodableError
// names, as the report's page does: an environment of 100,000 of them kept
// every one's label and reason in memory and wrote a line each on stderr.
const maxUndecodableNamed = 100

// undecodableError names the memory records of an environment that could
// not be decoded, the first maxUndecodableNamed of them, and counts them
// all; it matches each named one's decoding error (errors.Is,
// strictjson.ErrNumberDoesNotFit for a number out of range).
type undecodableError struct {
	Entries []environment.Entry // the records named, with Errs[i] for Entries[i]
	Errs    []error
	Count   int    // the records that could not be decoded, named or not
	Total   int    // the records read, those of every kind included
	Shown   string // what became of the undecodable ones
}

// Error says how many records could not be decoded, then why for each of
// those named, a line each indented under it, and how many more there are:
// joined, the second and later reasons were lines of their own that stderr
// showed without the "vkrt: " every error line starts with, as if each
// were a failure of its own.
func (e *undecodableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %s could not be decoded (%s):", e.Count, printable.Count(e.Total, "record"), e.Shown)
	for _, err := range e.Errs {
		b.WriteString("\n  ")
		b.WriteString(strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	if more := e.Count - len(e.Errs); more > 0 {
		fmt.Fprintf(&b, "\n  and %s, not named here", printable.Count(more, "more record"))
	}
	return b.String()
}

func (e *undecodableError) Unwrap() []error { return e.Errs }

// errRecordTime: a record whose stored time is not a number, as only
// another program writing the environment's file can leave.
var errRecordTime = errors.New("its stored time is not a number of nanoseconds")

// errTotalsOverflow: a memory record whose pools' figures add up past what
// 64 bits hold; summed, they would wrap to a small number and be shown as
// one.
var errTotalsOverflow = errors.New("the pools' figures add up past 2^64-1")

// checkTotals refuses a report whose totals overflow: each usage figure
// and the peak pages summed over the pools, and the bars a report stacks
// (each pool's reserved or live bytes, whichever is more, on top of the
// reserved bytes of the pools before it).
func checkTotals(e environment.Entry, r memory.Report) error {
	names := [...]string{"number_allocs", "bytes_in_use", "bytes_padding", "bytes_reserved", "pages_peak", "stacked bytes"}
	var sums [len(names)]uint64
	for _, p := range append([]memory.PoolReport{r.Persistent}, r.Dynamic...) {
		u := p.Usage
		for i, v := range [...]uint64{u.NumberAllocs, u.BytesInUse, u.BytesPadding, u.BytesReserved, p.PagesPeak, max(u.BytesReserved, u.BytesInUse)} {
			var carry uint64
			if sums[i], carry = bits.Add64(sums[i], v, 0); carry != 0 {
				return fmt.Errorf("record %d (kind %q): %w: %s", e.ID, e.Kind, errTotalsOverflow, names[i])
			}
		}
	}
	return nil
}

// recordTimeLayout is a record's time in the table: UTC, as --json and
// report give it (the table gave local time with no zone).
const recordTimeLayout = "2006-01-02 15:04:05Z"

// peakPages sums every pool's high-water mark: the device allocations a
// plan capped at this report would hold at most.
func peakPages(r memory.Report) uint64 {
	n := r.Persistent.PagesPeak
	for _, p := range r.Dynamic {
		n += p.PagesPeak
	}
	return n
}
