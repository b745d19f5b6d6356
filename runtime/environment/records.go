package environment

import (
	"context"
	"database/sql"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/goccy/go-json"

	"github.com/vkrt/vkrt/internal/strictjson"
)

// Record is a value an environment can store: its kind names the table of
// meaning its JSON body belongs to ("memory", …). Kind must not depend on the
// value, since typed queries ask it of the zero value (of a pointer type,
// of the zero value it points to).
type Record interface {
	Kind() string
}

// kindOf is the kind of the records a T holds. A pointer type's zero value
// is nil, of which a Kind method of the type it points to cannot be asked
// (Go panics: "value method … called using nil pointer"): it is asked of
// that type's zero value.
//
// An interface type (Record itself) has no zero value to ask: its nil
// panicked. It is refused with ErrInvalidRecord, as the records' type
// decodes them, and an interface type can hold any.
func kindOf[T Record]() (string, error) {
	var zero T
	t := reflect.TypeFor[T]()
	switch t.Kind() {
	case reflect.Interface:
		return "", fmt.Errorf("%w: records are decoded as a type of one kind, not as the interface type %v", ErrInvalidRecord, t)
	case reflect.Pointer:
		if r, ok := reflect.New(t.Elem()).Interface().(T); ok {
			return r.Kind(), nil
		}
	}
	return zero.Kind(), nil
}

// isNil: rec holds no value to store, a nil pointer, map or slice, which
// encodes as the JSON null.
func isNil(rec Record) bool {
	if rec == nil {
		return true
	}
	switch v := reflect.ValueOf(rec); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice:
		return v.IsNil()
	}
	return false
}

// KindMemory is the kind of the memory records clients write: a stream's
// pool report at a moment the caller named.
const KindMemory = "memory"

// Entry is one stored record: where it sits, what it is, and its JSON body.
type Entry struct {
	ID    int64
	Kind  string
	Label string
	// Time is when the record was put; the zero Time where the stored time
	// is not an integer, which only another program writing the file can
	// leave (SQLite keeps what a column is given, whatever its type).
	Time time.Time
	Body []byte
}

// Decode unmarshals the body into v. A number that does not fit its field
// (past the field's range, negative for an unsigned one, fractional or in
// exponent form for an integer one) is refused with an error matching
// strictjson.ErrNumberDoesNotFit, never wrapped. A value of the wrong kind
// for its field is told in the body's terms, the field's JSON path, what
// it takes and what the body holds ('field "seq": want an integer from
// ... to ..., got a string'), not in Go's, and still matches the
// *json.UnmarshalTypeError it comes from.
func (e Entry) Decode(v any) error {
	if err := strictjson.Unmarshal(e.Body, v); err != nil {
		return decodeFailed(e.ID, e.Kind, v, err)
	}
	return nil
}

// Typed is an entry together with its body decoded.
type Typed[T Record] struct {
	Entry
	Value T
}

// Decode decodes an entry as a T, refusing an entry of another kind with
// ErrKindMismatch.
func Decode[T Record](e Entry) (T, error) {
	var v T
	kind, err := kindOf[T]()
	if err != nil {
		return v, err
	}
	if e.Kind != kind {
		return v, fmt.Errorf("%w: record %d is of kind %q, asked to decode it as %T of kind %q", ErrKindMismatch, e.ID, e.Kind, v, kind)
	}
	err = e.Decode(&v)
	return v, err
}

// Query selects records. The zero Query selects every record.
type Query struct {
	// Kind selects records of one kind; empty selects every kind.
	Kind string
	// LabelGlob selects labels matching a glob: '*' any run of characters,
	// '?' one character, '[...]' a set (SQLite GLOB, case-sensitive). Empty
	// selects every label.
	LabelGlob string
	// Since selects records written at or after this time; zero selects all.
	Since time.Time
	// Last, when positive, keeps only the newest Last records.
	Last int
}

// Put stores rec under label as one transaction and returns its entry. The
// body is rec's JSON encoding. A nil rec, or a nil pointer, map or slice,
// is refused with ErrInvalidRecord: it holds no record, and its body would
// be the JSON null; so is one JSON cannot encode (a NaN, a channel).
func (e *Env) Put(ctx context.Context, label string, rec Record) (Entry, error) {
	if e.isNil() {
		return Entry{}, ErrNil
	}
	if isNil(rec) {
		if rec == nil {
			return Entry{}, fmt.Errorf("%w: nil record for label %q", ErrInvalidRecord, label)
		}
		return Entry{}, fmt.Errorf("%w: nil %T record for label %q", ErrInvalidRecord, rec, label)
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: encoding %T record %q: %w", ErrInvalidRecord, rec, label, err)
	}
	return e.PutJSON(ctx, rec.Kind(), label, body)
}

// PutJSON stores a body that is already JSON, as one transaction. A body
// that is not valid JSON in UTF-8 (CheckBody) is refused with
// ErrInvalidRecord, and nothing is stored.
func (e *Env) PutJSON(ctx context.Context, kind, label string, body []byte) (Entry, error) {
	if err := e.writable(); err != nil {
		return Entry{}, err
	}
	if ctx == nil {
		return Entry{}, named(e.name, ErrNilContext)
	}
	if err := validateKind(kind); err != nil {
		return Entry{}, err
	}
	if err := validateLabel(label); err != nil {
		return Entry{}, err
	}
	if len(body) > MaxBodyBytes {
		return Entry{}, fmt.Errorf("%w: body of %q record %q is %d bytes, at most %d allowed", ErrInvalidRecord, kind, label, len(body), MaxBodyBytes)
	}
	if p := bodyProblem(body); p != "" {
		return Entry{}, fmt.Errorf("%w: body of %q record %q %s", ErrInvalidRecord, kind, label, p)
	}
	at := e.now()
	if at.Before(minTime) || at.After(maxTime) {
		return Entry{}, fmt.Errorf("%w: %q record %q: the clock reads %v; a record's time is kept in nanoseconds since 1970 "+
			"in 64 bits, from %v to %v", ErrInvalidRecord, kind, label, at, minTime, maxTime)
	}
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return Entry{}, e.failedWrite(dbError(e.path, e.busy, err), "writing %q record %q", kind, label)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, "INSERT INTO records (kind, label, time_ns, body) VALUES (?, ?, ?, ?)",
		kind, label, at.UnixNano(), string(body))
	if err != nil {
		return Entry{}, e.failedWrite(dbError(e.path, e.busy, err), "writing %q record %q", kind, label)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return Entry{}, e.failedWrite(dbError(e.path, e.busy, err), "writing %q record %q", kind, label)
	}
	if err := tx.Commit(); err != nil {
		return Entry{}, e.failedWrite(dbError(e.path, e.busy, err), "committing %q record %q", kind, label)
	}
	if err := e.sameFile(); err != nil {
		return Entry{}, fmt.Errorf("%w (the %q record %q was committed as record %d, maybe into the file that went)", err, kind, label, id)
	}
	return Entry{ID: id, Kind: kind, Label: label, Time: time.Unix(0, at.UnixNano()), Body: body}, nil
}

// Get returns the record with the given id, or ErrNoRecord. Of an Env
// opened ReadOnly it is refused a damaged file with ErrCorrupt, as Each is
// (the first read checks the whole file).
func (e *Env) Get(ctx context.Context, id int64) (Entry, error) {
	if err := e.callable(ctx); err != nil {
		return Entry{}, err
	}
	if err := e.checkOnce(ctx); err != nil {
		return Entry{}, err
	}
	var ent Entry
	err := e.read(func(db *sql.DB) (err error) {
		ent, err = scanEntry(db.QueryRowContext(ctx, "SELECT "+entryColumns+" FROM records WHERE id = ?", id))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, errNoTable) {
		return Entry{}, fmt.Errorf("%w: environment %q has no record %d", ErrNoRecord, e.name, id)
	}
	if err != nil {
		return Entry{}, namedf(e.name, dbError(e.path, e.busy, err), "reading record %d", id)
	}
	return ent, nil
}

// Query returns the records q selects, oldest first (in the order they were
// committed): Each, collected.
func (e *Env) Query(ctx context.Context, q Query) ([]Entry, error) {
	return collect(func(fn func(Entry) error) error { return e.Each(ctx, q, fn) })
}

// collect is what each lists, in order: nil if it lists nothing, and nil
// with its error if it fails.
func collect[T any](each func(fn func(T) error) error) ([]T, error) {
	var out []T
	if err := each(func(v T) error {
		out = append(out, v)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// Kinds returns the kinds of the records stored, sorted, each once: none
// for an environment with no records. Of an Env opened ReadOnly it is
// refused a damaged file with ErrCorrupt, as Each is.
func (e *Env) Kinds(ctx context.Context) ([]string, error) {
	if err := e.callable(ctx); err != nil {
		return nil, err
	}
	if err := e.checkOnce(ctx); err != nil {
		return nil, err
	}
	var kinds []string
	err := e.read(func(db *sql.DB) error {
		kinds = nil // read again where the file changed under the first try
		rows, err := db.QueryContext(ctx, "SELECT DISTINCT kind FROM records ORDER BY kind")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			kinds = append(kinds, k)
		}
		return rows.Err()
	})
	if errors.Is(err, errNoTable) {
		return nil, nil
	}
	if err != nil {
		return nil, namedf(e.name, dbError(e.path, e.busy, err), "reading kinds")
	}
	return kinds, nil
}

// EachPage is how many records Each reads at a time, at most.
const EachPage = 256

// eachPageBytes ends a page of Each early once its bodies add up to this
// much: a page of EachPage bodies as large as MaxBodyBytes is 64 GiB.
const eachPageBytes = 16 << 20

// Each calls fn with each record q selects, oldest first, reading EachPage
// of them at a time, fewer where their bodies reach 16 MiB: a listing
// holds one page at once, not every record (20,000 memory records of
// 1.7 kB held 145 MB in vkrt records when they were all read first). The records are those stored when Each began:
// records are never changed or removed, and ones put meanwhile have
// larger ids than any it lists, so it leaves them out. An error fn
// returns ends Each and is returned as it is. The first Each (or Get, or
// Kinds) of an Env opened ReadOnly reads the whole file once for SQLite's
// quick check and fails on a damaged one with ErrCorrupt, the error a
// writer's Open gives. A nil fn is refused with ErrInvalidRecord.
func (e *Env) Each(ctx context.Context, q Query, fn func(Entry) error) error {
	if err := e.callable(ctx); err != nil {
		return err
	}
	if fn == nil {
		// It would be called with the first record, a nil function's panic.
		return fmt.Errorf("%w: the listing was given no function (nil) to call with the records", ErrInvalidRecord)
	}
	where, args, err := q.clauses()
	if err != nil {
		return err
	}
	if err := e.checkOnce(ctx); err != nil {
		return err
	}
	filter := ""
	if len(where) > 0 {
		filter = " AND " + strings.Join(where, " AND ")
	}
	// The ids to list: from on, up to top. With Last, from is the Last-th
	// newest selected id. Past the first page, the pages go on past the
	// last id listed. (From past an id below the first, the least id an
	// integer key takes, -2^63, was never listed, and with Last the id
	// below it wrapped to the largest: nothing was.)
	var from, top int64
	var found bool
	err = e.read(func(db *sql.DB) error {
		var maxID sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT max(id) FROM records").Scan(&maxID); err != nil {
			return err
		}
		top, found, from = maxID.Int64, maxID.Valid, math.MinInt64
		if !found || q.Last == 0 {
			return nil
		}
		var low sql.NullInt64
		stmt := "SELECT min(id) FROM (SELECT id FROM records NOT INDEXED WHERE id <= ?" + filter + " ORDER BY id DESC LIMIT ?)"
		if err := db.QueryRowContext(ctx, stmt, append(append([]any{top}, args...), q.Last)...).Scan(&low); err != nil {
			return err
		}
		found, from = low.Valid, low.Int64
		return nil
	})
	if errors.Is(err, errNoTable) || err == nil && !found {
		return nil
	}
	if err != nil {
		return namedf(e.name, dbError(e.path, e.busy, err), "reading records")
	}
	// NOT INDEXED: by the kind's index SQLite read every record of the
	// kind and sorted them for each page (20,000 records listed in 11 s,
	// 7 s read at once); by id, a page reads on from where the last ended.
	first := "SELECT " + entryColumns + " FROM records NOT INDEXED WHERE id >= ? AND id <= ?" + filter + " ORDER BY id LIMIT ?"
	next := "SELECT " + entryColumns + " FROM records NOT INDEXED WHERE id > ? AND id <= ?" + filter + " ORDER BY id LIMIT ?"
	stmt := first
	page := make([]Entry, 0, EachPage)
	for {
		cut := false // the page ended at eachPageBytes, not at its last row
		err := e.read(func(db *sql.DB) error {
			page, cut = page[:0], false
			rows, err := db.QueryContext(ctx, stmt, append(append([]any{from, top}, args...), EachPage)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			size := 0
			for rows.Next() {
				ent, err := scanEntry(rows)
				if err != nil {
					return err
				}
				page = append(page, ent)
				if size += len(ent.Body); size >= eachPageBytes {
					cut = true
					break
				}
			}
			return rows.Err()
		})
		if errors.Is(err, errNoTable) {
			return nil // the file went: nothing more to list (page holds the last one's)
		}
		if err != nil {
			return namedf(e.name, dbError(e.path, e.busy, err), "reading records")
		}
		for _, ent := range page {
			if err := fn(ent); err != nil {
				return err
			}
		}
		if len(page) < EachPage && !cut {
			return nil
		}
		from, stmt = page[len(page)-1].ID, next
	}
}

// checkOnce refuses a damaged file, read-only, with the writer's ErrCorrupt
// (quickCheck), once per Env: SQLite reads a broken page of records as one
// that holds none, so a listing of a damaged file was empty, or short, and
// said nothing, and so did Get (ErrNoRecord) and Kinds. quick_check reads
// the whole file, as a listing does, so only the first read pays for it;
// the pools a reader opens again when a writer changed the files are not
// checked again, as a writer checks the file before it writes. A writer checked its file when it opened it.
func (e *Env) checkOnce(ctx context.Context) error {
	if !e.readOnly {
		return nil
	}
	e.checkMu.Lock()
	defer e.checkMu.Unlock()
	if e.checked {
		return nil
	}
	err := e.read(func(db *sql.DB) error { return quickCheck(ctx, db, e.path) })
	if errors.Is(err, errNoTable) {
		err = nil // no records to check
	}
	if err != nil {
		return err
	}
	e.checked = true
	return nil
}

// clauses are the conditions q puts on records, with their arguments.
func (q Query) clauses() (where []string, args []any, err error) {
	if q.Kind != "" {
		if err := validateKind(q.Kind); err != nil {
			return nil, nil, err
		}
	}
	if err := validateGlob(q.LabelGlob); err != nil {
		return nil, nil, err
	}
	if q.Last < 0 {
		return nil, nil, fmt.Errorf("%w: Last is %d, must be 0 (all) or positive", ErrInvalidRecord, q.Last)
	}
	if q.Kind != "" {
		where, args = append(where, "kind = ?"), append(args, q.Kind)
	}
	if q.LabelGlob != "" {
		where, args = append(where, "label GLOB ?"), append(args, q.LabelGlob)
	}
	switch {
	case q.Since.IsZero() || q.Since.Before(minTime):
		// every record is at or after the earliest time one can have
	case q.Since.After(maxTime):
		where = append(where, "0") // and none after the latest
	default:
		where, args = append(where, "time_ns >= ?"), append(args, q.Since.UnixNano())
	}
	return where, args, nil
}

// QueryAs returns the records of T's kind that q selects, decoded. q.Kind
// must be empty or T's kind. It holds them all at once: EachAs takes them
// one at a time.
func QueryAs[T Record](ctx context.Context, e *Env, q Query) ([]Typed[T], error) {
	out, err := collect(func(fn func(Typed[T]) error) error { return EachAs(ctx, e, q, fn) })
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []Typed[T]{}
	}
	return out, nil
}

// EachAs calls fn with each record of T's kind that q selects, decoded,
// oldest first, reading them as Each does: a page at a time, the records
// stored when it began. q.Kind must be empty or T's kind. A record that
// cannot be decoded ends the listing with its error, as an error from fn
// does with that error.
func EachAs[T Record](ctx context.Context, e *Env, q Query, fn func(Typed[T]) error) error {
	var zero T
	kind, err := kindOf[T]()
	if err != nil {
		return err
	}
	if q.Kind != "" && q.Kind != kind {
		return fmt.Errorf("%w: query asks for kind %q, decoding as %T of kind %q", ErrKindMismatch, q.Kind, zero, kind)
	}
	q.Kind = kind
	var each func(Entry) error // nil for a nil fn, which Each refuses
	if fn != nil {
		each = func(ent Entry) error {
			v, err := Decode[T](ent)
			if err != nil {
				return err
			}
			return fn(Typed[T]{Entry: ent, Value: v})
		}
	}
	return e.Each(ctx, q, each)
}

type scanner interface{ Scan(dest ...any) error }

// entryColumns are what scanEntry reads. A time that is not an integer
// reads as NULL: scanned as one, a row another program wrote with a time
// of 'abc' failed the whole query, and every listing with it. A NULL kind,
// label or body (a schema another program loosened) reads as empty, which
// the body's decoder refuses, for that record alone.
const entryColumns = "id, coalesce(kind, ''), coalesce(label, ''), CASE typeof(time_ns) WHEN 'integer' THEN time_ns END, coalesce(body, '')"

func scanEntry(s scanner) (Entry, error) {
	var ent Entry
	var ns sql.NullInt64
	var body string
	if err := s.Scan(&ent.ID, &ent.Kind, &ent.Label, &ns, &body); err != nil {
		return Entry{}, err
	}
	if ns.Valid {
		ent.Time = time.Unix(0, ns.Int64)
	}
	ent.Body = []byte(body)
	return ent, nil
}

const maxKindLen, maxLabelLen = 64, 4096

// MaxBodyBytes bounds a record's body: far past any report (a memory
// record is kilobytes), and under what SQLite stores in one value (10^9
// bytes), which it refuses with an error of its own.
const MaxBodyBytes = 256 << 20

// minTime and maxTime bound the times a record can have: its time is kept
// as nanoseconds since 1970 in an int64, and time.UnixNano of a time
// outside them is meaningless.
var minTime, maxTime = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

// CheckKind says what is wrong with a record's kind, if anything, as Put
// and Query would (an error matching ErrInvalidRecord): a command line
// checks its flag with it before it opens an environment.
func CheckKind(kind string) error { return validateKind(kind) }

func validateKind(kind string) error {
	if kind == "" || len(kind) > maxKindLen {
		return fmt.Errorf("%w: kind %q must be 1 to %d bytes", ErrInvalidRecord, kind, maxKindLen)
	}
	for _, r := range kind {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%w: kind %q contains %q; kinds use lower-case letters, digits, '-', '_' and '.'", ErrInvalidRecord, kind, r)
		}
	}
	return nil
}

// CheckBody says what is wrong with a record's body, if anything, as
// PutJSON would (an error matching ErrInvalidRecord; its size aside): it is
// not valid JSON, or not valid UTF-8. A reader checks with it a body
// another program stored.
func CheckBody(body []byte) error {
	if p := bodyProblem(body); p != "" {
		return fmt.Errorf("%w: the body %s", ErrInvalidRecord, p)
	}
	return nil
}

// bodyProblem says what is wrong with a body, or "".
func bodyProblem(body []byte) string {
	// encoding/json's Valid, not goccy's: goccy's stops at a NUL byte,
	// taking `{}` followed by NUL and anything at all for JSON.
	if !stdjson.Valid(body) {
		// Where and why: JSON nested past encoding/json's 10,000 levels
		// is valid, yet no reader decodes it, and the bare "is not valid
		// JSON" read as a body of broken syntax.
		var raw stdjson.RawMessage
		var se *stdjson.SyntaxError
		if err := stdjson.Unmarshal(body, &raw); errors.As(err, &se) {
			if se.Offset < 1 {
				return fmt.Sprintf("is not valid JSON (%d bytes): %v", len(body), se)
			}
			// Offset counts the bytes read, the one refused included.
			return fmt.Sprintf("is not valid JSON (byte %d of %d): %v", se.Offset-1, len(body), se)
		}
		return fmt.Sprintf("is not valid JSON (%d bytes)", len(body))
	}
	// JSON text is UTF-8, yet Valid takes any byte in a string: such a
	// body was stored as it was, and the line of vkrt records --json that
	// quoted it was JSON no reader took.
	if !utf8.Valid(body) {
		at := 0
		for {
			r, n := utf8.DecodeRune(body[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return fmt.Sprintf("is not valid UTF-8 (byte %d of %d)", at, len(body))
	}
	return ""
}

// CheckLabel says what is wrong with a record's label, if anything, as Put
// would (an error matching ErrInvalidRecord): a caller checks it before it
// opens an environment to put the record in.
func CheckLabel(label string) error { return validateLabel(label) }

func validateLabel(label string) error {
	switch {
	case label == "":
		return fmt.Errorf("%w: the label is empty; name what the record is a snapshot of", ErrInvalidRecord)
	case len(label) > maxLabelLen:
		return fmt.Errorf("%w: label is %d bytes, at most %d allowed", ErrInvalidRecord, len(label), maxLabelLen)
	case !utf8.ValidString(label) || strings.ContainsRune(label, 0):
		return fmt.Errorf("%w: label %q is not NUL-free UTF-8", ErrInvalidRecord, label)
	}
	return nil
}

// validateGlob refuses a set that never closes, which GLOB would silently
// treat as matching nothing.
func validateGlob(glob string) error {
	if err := CheckLabelGlob(glob); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	return nil
}

// maxGlobBytes is the longest pattern SQLite's GLOB takes
// (SQLITE_MAX_LIKE_PATTERN_LENGTH); a label is at most maxLabelLen bytes.
const maxGlobBytes = 50000

// CheckLabelGlob says what is wrong with a Query's LabelGlob, if anything:
// one longer than SQLite's GLOB takes (50,000 bytes), one holding a NUL
// byte or one that is not UTF-8 (no label holds either), a set ('[') that never closes, or one with a range whose ends are
// reversed ("[z-a]"), which GLOB would silently treat as matching nothing.
// A command line checks its flag with it before it opens an environment.
func CheckLabelGlob(glob string) error {
	if len(glob) > maxGlobBytes {
		// SQLite's own refusal read "SQL logic error: LIKE or GLOB
		// pattern too complex (1)", matching no error kind.
		return fmt.Errorf("label glob is %d bytes long, at most %d allowed (a label is at most %d)", len(glob), maxGlobBytes, maxLabelLen)
	}
	if at := strings.IndexByte(glob, 0); at >= 0 {
		// GLOB ends the pattern at it: "a\x00zzz" matched the label "a",
		// though no label holds a NUL.
		return fmt.Errorf("label glob %q holds a NUL byte at byte %d, which no label holds", glob, at)
	}
	if !utf8.ValidString(glob) {
		// GLOB reads a byte that is not UTF-8 as U+FFFD: "a\xffb" matched
		// the label "a\ufffdb", though every label is UTF-8.
		at := 0
		for at < len(glob) {
			r, n := utf8.DecodeRuneInString(glob[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return fmt.Errorf("label glob %q is not valid UTF-8 (byte %d), which every label is", glob, at)
	}
	for i := 0; i < len(glob); i++ {
		if glob[i] != '[' {
			continue
		}
		j := i + 1
		if j < len(glob) && glob[j] == '^' {
			j++
		}
		if j < len(glob) && glob[j] == ']' {
			j++ // a ']' first in the set is a member
		}
		end := strings.IndexByte(glob[j:], ']')
		if end < 0 {
			return fmt.Errorf("label glob %q opens a set at byte %d that never closes", glob, i)
		}
		if lo, hi, ok := reversedRange(glob[i+1 : j+end]); ok {
			return fmt.Errorf("label glob %q has a set at byte %d whose range %c-%c matches nothing (its ends are reversed: %c-%c)", glob, i, lo, hi, hi, lo)
		}
		i = j + end
	}
	return nil
}

// reversedRange finds a range of a set's members (what lies between '['
// and ']') whose low end is past its high end, read as SQLite's GLOB reads
// a set: a '-' between two characters is a range, a '-' first or last is
// itself, and a range's high end starts no other.
func reversedRange(set string) (lo, hi rune, ok bool) {
	set = strings.TrimPrefix(set, "^")
	runes := []rune(set)
	prior := rune(-1)
	k := 0
	if len(runes) > 0 && runes[0] == ']' {
		// A ']' first is a member that starts no range: SQLite reads
		// "[]-A]" as the set of ']', '-' and 'A'.
		k = 1
	}
	for ; k < len(runes); k++ {
		r := runes[k]
		if r == '-' && prior >= 0 && k+1 < len(runes) {
			if prior > runes[k+1] {
				return prior, runes[k+1], true
			}
			prior = -1
			k++
			continue
		}
		prior = r
	}
	return 0, 0, false
}

// failedWrite is the error of a write that failed doing what format and
// args tell, told as ErrClosed where Close ran meanwhile and as ErrReplaced
// where the file went: SQLite then fails with an I/O error, or writes into
// an empty file it made at the path, which match no sentinel. The message
// names the environment once, and the error matches both the sentinel and
// SQLite's error.
func (e *Env) failedWrite(err error, format string, args ...any) error {
	if e.closed.Load() {
		// Close removed the log: the write met a closed pool, not a
		// file that went.
		return named(e.name, &stoppedError{stop: ErrClosed, doing: fmt.Sprintf(format, args...), cause: err})
	}
	if gone := e.replaced(); errors.Is(gone, ErrReplaced) && !errors.Is(err, ErrReplaced) {
		return named(e.name, &stoppedError{stop: gone, doing: fmt.Sprintf(format, args...), cause: err})
	}
	return namedf(e.name, err, format, args...)
}

// stoppedError is a write that failed as the environment stopped under
// it (stop: ErrClosed, or ErrReplaced with the file's path), with what it
// was doing and SQLite's error. It matches both.
type stoppedError struct {
	stop  error
	doing string
	cause error
}

func (s *stoppedError) Error() string {
	return fmt.Sprintf("%s (%s failed: %s)", s.stop, s.doing, strings.TrimPrefix(s.cause.Error(), "environment: "))
}

func (s *stoppedError) Unwrap() []error { return []error{s.stop, s.cause} }
