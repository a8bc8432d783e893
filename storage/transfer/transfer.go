// Package transfer copies a whole job store into another one: edgepipe
// export writes a store to a file, edgepipe import writes that file into an
// empty store, with any driver at either end (the embedded SQLite to
// Postgres when a deployment outgrows one machine, and back).
//
// The file is JSON Lines, self-describing and versioned:
//
//	{"format":"edgepipe-export","version":1,"source":{"driver":"sqlite","schema_version":4},"exported_at":"…","tables":[{"name":"jobs","columns":["id",…]},…]}
//	{"table":"jobs","row":{"id":"v1-…","status":"succeeded",…}}
//	…
//	{"end":{"rows":{"jobs":12,…},"sequences":{"job_events":340,…}}}
//
// The header names the source and lists every table with its columns; one
// line per row follows, tables in dependency order (a row only points at
// rows above it); the end line counts the rows of each table and carries
// the last id each id sequence handed out. Values are JSON strings,
// integers or null; JSON columns travel as their text. A file without its
// end line, or whose counts disagree, is refused before anything commits.
//
// Every jobs row carries instance_id (the id a tenant knows): a source
// without that column exports instance_id = id, and a target without it
// accepts a row only when the two are equal.
//
// The drivers move rows (ExportRows, ImportRows with pipeline's params);
// this package owns the format and the rules.
package transfer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"edgepipe/pipeline"
)

// Format and Version identify the file; Version changes when a reader of
// an older version could misread a newer file.
const (
	Format  = "edgepipe-export"
	Version = 1
)

// Tables is every table a job store holds, in dependency order: jobs
// first, then what points at jobs, webhook_outbox after the job_events it
// points at. A store with a table not listed here cannot be exported (its
// rows would be lost without a word).
var Tables = []string{
	"jobs",
	"job_events",
	"units",
	"provider_calls",
	"object_claims",
	"assets",
	"queue_messages",
	"dead_letters",
	"webhook_outbox",
	"process_bindings",
	"rate_buckets",
	"rate_slots",
	"provider_proofs",
}

// Source is a job store that can be read whole (both drivers).
type Source interface {
	ExportRows(ctx context.Context, p *pipeline.ExportParams) error
}

// Target is a job store that can be written whole (both drivers).
type Target interface {
	ImportRows(ctx context.Context, p *pipeline.ImportParams) error
}

var (
	// ErrNotEmpty: the target store already holds rows; an import only
	// goes into an empty store.
	ErrNotEmpty = errors.New("the target job store is not empty")
	// ErrFormat: the file is not a complete edgepipe export of a version
	// this binary reads.
	ErrFormat = errors.New("not a complete edgepipe export")
	// ErrIncompatible: the file holds data the target's schema cannot
	// keep (a newer source than the target's edgepipe).
	ErrIncompatible = errors.New("the export does not fit the target's schema")
)

// header is the file's first line.
type header struct {
	Format     string      `json:"format"`
	Version    int         `json:"version"`
	Source     sourceInfo  `json:"source"`
	ExportedAt string      `json:"exported_at"`
	Tables     []tableInfo `json:"tables"`
}

type sourceInfo struct {
	Driver        string `json:"driver"`
	SchemaVersion int    `json:"schema_version"`
}

type tableInfo struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
}

// line is every line after the header: a row, or the end.
type line struct {
	Table string                     `json:"table,omitempty"`
	Row   map[string]json.RawMessage `json:"row,omitempty"`
	End   *end                       `json:"end,omitempty"`
}

type rowLine struct {
	Table string         `json:"table"`
	Row   map[string]any `json:"row"`
}

type end struct {
	Rows      map[string]int64 `json:"rows"`
	Sequences map[string]int64 `json:"sequences"`
}

// Summary says what was moved.
type Summary struct {
	Driver        string
	SchemaVersion int
	Rows          map[string]int64
	Sequences     map[string]int64
}

// Total is the number of rows moved.
func (s Summary) Total() int64 {
	var n int64
	for _, v := range s.Rows {
		n += v
	}
	return n
}

// Export writes the whole store to w; now stamps the header.
func Export(ctx context.Context, src Source, w io.Writer, now time.Time) (Summary, error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	sum := Summary{Rows: map[string]int64{}}
	cols := map[string][]string{}
	addInstanceID := false
	err := src.ExportRows(ctx, &pipeline.ExportParams{
		Tables: Tables,
		Begin: func(st pipeline.TransferStore) error {
			if err := knownTables(st); err != nil {
				return err
			}
			sum.Driver, sum.SchemaVersion = st.Driver, st.SchemaVersion
			h := header{Format: Format, Version: Version, Source: sourceInfo{st.Driver, st.SchemaVersion},
				ExportedAt: now.UTC().Format(time.RFC3339Nano)}
			for _, name := range Tables {
				t, _ := find(st, name)
				c := t.Columns
				if name == "jobs" && !contains(c, "instance_id") {
					addInstanceID = true
					c = append(append([]string(nil), c...), "instance_id")
				}
				cols[name] = t.Columns
				h.Tables = append(h.Tables, tableInfo{Name: name, Columns: c})
			}
			return enc.Encode(h)
		},
		Row: func(table string, values []any) error {
			c := cols[table]
			row := make(map[string]any, len(c)+1)
			for i, v := range values {
				if s, ok := v.(string); ok && !utf8.ValidString(s) {
					return fmt.Errorf("%s.%s of row %d is not valid UTF-8; it cannot be exported", table, c[i], sum.Rows[table]+1)
				}
				row[c[i]] = v
			}
			if table == "jobs" && addInstanceID {
				row["instance_id"] = row["id"]
			}
			sum.Rows[table]++
			return enc.Encode(rowLine{Table: table, Row: row})
		},
		End: func(seqs map[string]int64) error {
			sum.Sequences = seqs
			rows := map[string]int64{}
			for _, t := range Tables {
				rows[t] = sum.Rows[t]
			}
			return enc.Encode(line{End: &end{Rows: rows, Sequences: seqs}})
		},
	})
	if err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return sum, fmt.Errorf("export: write: %w", err)
	}
	return sum, nil
}

// knownTables refuses a store holding a table this package does not know.
func knownTables(st pipeline.TransferStore) error {
	for _, t := range st.Tables {
		if !contains(Tables, t.Name) {
			return fmt.Errorf("%w: the %s store has a table %s that export does not know (upgrade edgepipe)", ErrIncompatible, st.Driver, t.Name)
		}
	}
	for _, name := range Tables {
		if _, ok := find(st, name); !ok {
			return fmt.Errorf("%w: the %s store has no table %s (run edgepipe migrate)", ErrIncompatible, st.Driver, name)
		}
	}
	return nil
}

func find(st pipeline.TransferStore, name string) (pipeline.TransferTable, bool) {
	for _, t := range st.Tables {
		if t.Name == name {
			return t, true
		}
	}
	return pipeline.TransferTable{}, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// maxLine bounds one line of the file (a job row carries its whole
// storyboard).
const maxLine = 64 << 20

// Import writes the file r into the empty store dst, in one transaction:
// either every row is there, with its ids, timestamps and statuses, or
// nothing is.
func Import(ctx context.Context, dst Target, r io.Reader) (Summary, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), maxLine)
	h, err := readHeader(sc)
	if err != nil {
		return Summary{}, err
	}
	im := &importer{sc: sc, h: h, sum: Summary{Driver: h.Source.Driver, SchemaVersion: h.Source.SchemaVersion, Rows: map[string]int64{}}}
	err = dst.ImportRows(ctx, &pipeline.ImportParams{Begin: im.begin, Next: im.next, End: im.end})
	if err != nil {
		return im.sum, fmt.Errorf("import: %w", err)
	}
	return im.sum, nil
}

func readHeader(sc *bufio.Scanner) (header, error) {
	var h header
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return h, fmt.Errorf("import: read: %w", err)
		}
		return h, fmt.Errorf("%w: the file is empty", ErrFormat)
	}
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Format != Format {
		return h, fmt.Errorf("%w: the first line is not an edgepipe export header", ErrFormat)
	}
	if h.Version != Version {
		return h, fmt.Errorf("%w: format version %d, this edgepipe reads version %d", ErrFormat, h.Version, Version)
	}
	return h, nil
}

// importer reads the rows after the header and checks them against it.
type importer struct {
	sc    *bufio.Scanner
	h     header
	line  int
	cols  map[string][]string        // table -> the columns written to the target
	drop  map[string]map[string]bool // table -> columns the target lacks (only jobs.instance_id when equal to id)
	order map[string]int             // table -> position in the header
	last  int                        // position of the last table seen
	sum   Summary
	done  bool
	// endRows is the end line's count of each table.
	endRows map[string]int64
}

// begin checks the target is empty and can keep every column of the file.
func (im *importer) begin(dst pipeline.TransferStore) error {
	var full []string
	for _, t := range dst.Tables {
		if t.Rows > 0 {
			full = append(full, fmt.Sprintf("%s has %d rows", t.Name, t.Rows))
		}
	}
	if len(full) > 0 {
		return fmt.Errorf("%w (%s): import only into a freshly migrated database", ErrNotEmpty, strings.Join(full, ", "))
	}
	im.cols, im.drop, im.order = map[string][]string{}, map[string]map[string]bool{}, map[string]int{}
	for i, ht := range im.h.Tables {
		t, ok := find(dst, ht.Name)
		if !ok {
			return fmt.Errorf("%w: the %s store has no table %s", ErrIncompatible, dst.Driver, ht.Name)
		}
		im.order[ht.Name] = i
		im.drop[ht.Name] = map[string]bool{}
		for _, c := range ht.Columns {
			switch {
			case contains(t.Columns, c):
				im.cols[ht.Name] = append(im.cols[ht.Name], c)
			case ht.Name == "jobs" && c == "instance_id":
				im.drop[ht.Name][c] = true // kept only as the id itself
			default:
				return fmt.Errorf("%w: the %s store (schema %d) has no column %s.%s; upgrade edgepipe where you import",
					ErrIncompatible, dst.Driver, dst.SchemaVersion, ht.Name, c)
			}
		}
	}
	im.last = -1
	return nil
}

func (im *importer) next() (string, []string, []any, error) {
	if im.done {
		return "", nil, nil, io.EOF
	}
	if !im.sc.Scan() {
		if err := im.sc.Err(); err != nil {
			return "", nil, nil, fmt.Errorf("read: %w", err)
		}
		return "", nil, nil, fmt.Errorf("%w: the file ends without its end line (cut short?)", ErrFormat)
	}
	im.line++
	n := im.line + 1
	var l line
	dec := json.NewDecoder(bytes.NewReader(im.sc.Bytes()))
	dec.UseNumber()
	if err := dec.Decode(&l); err != nil {
		return "", nil, nil, fmt.Errorf("%w: line %d: %v", ErrFormat, n, err)
	}
	if l.End != nil {
		im.done = true
		im.sum.Sequences, im.endRows = l.End.Sequences, l.End.Rows
		return "", nil, nil, io.EOF
	}
	pos, ok := im.order[l.Table]
	if !ok {
		return "", nil, nil, fmt.Errorf("%w: line %d: table %q is not in the header", ErrFormat, n, l.Table)
	}
	if pos < im.last {
		return "", nil, nil, fmt.Errorf("%w: line %d: a %s row after rows of a later table", ErrFormat, n, l.Table)
	}
	im.last = pos
	vals, err := im.values(l, n)
	if err != nil {
		return "", nil, nil, err
	}
	im.sum.Rows[l.Table]++
	return l.Table, im.cols[l.Table], vals, nil
}

// values decodes a row into the target's columns.
func (im *importer) values(l line, n int) ([]any, error) {
	ht := im.h.Tables[im.order[l.Table]]
	if len(l.Row) != len(ht.Columns) {
		return nil, fmt.Errorf("%w: line %d: %d values for the %d columns of %s", ErrFormat, n, len(l.Row), len(ht.Columns), l.Table)
	}
	decoded := make(map[string]any, len(l.Row))
	for _, c := range ht.Columns {
		raw, ok := l.Row[c]
		if !ok {
			return nil, fmt.Errorf("%w: line %d: %s row without %s", ErrFormat, n, l.Table, c)
		}
		v, err := decodeValue(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %s.%s: %v", ErrFormat, n, l.Table, c, err)
		}
		decoded[c] = v
	}
	for c := range im.drop[l.Table] {
		if decoded[c] != decoded["id"] {
			return nil, fmt.Errorf("%w: job %v has instance id %v, and the target keeps no instance id apart from the id; upgrade edgepipe where you import",
				ErrIncompatible, decoded["id"], decoded[c])
		}
	}
	cols := im.cols[l.Table]
	vals := make([]any, len(cols))
	for i, c := range cols {
		vals[i] = decoded[c]
	}
	return vals, nil
}

func decodeValue(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case nil, string:
		return x, nil
	case json.Number:
		i, err := x.Int64()
		if err != nil {
			return nil, fmt.Errorf("%s is not an integer", x)
		}
		return i, nil
	}
	return nil, fmt.Errorf("a %T where a string, an integer or null belongs", v)
}

// end checks the end line against the rows read.
func (im *importer) end() (map[string]int64, error) {
	if !im.done {
		return nil, fmt.Errorf("%w: the end line is missing", ErrFormat)
	}
	if im.sc.Scan() {
		return nil, fmt.Errorf("%w: data after the end line", ErrFormat)
	}
	return im.sum.Sequences, im.checkCounts()
}

func (im *importer) checkCounts() error {
	want := im.endRows
	for _, t := range im.h.Tables {
		if im.sum.Rows[t.Name] != want[t.Name] {
			return fmt.Errorf("%w: %d %s rows, the end line says %d", ErrFormat, im.sum.Rows[t.Name], t.Name, want[t.Name])
		}
	}
	for t := range want {
		if _, ok := im.order[t]; !ok {
			return fmt.Errorf("%w: the end line counts a table %s the header does not list", ErrFormat, t)
		}
	}
	return nil
}
