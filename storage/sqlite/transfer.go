package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"

	"edgepipe/pipeline"
)

// The row-level half of edgepipe export / import (storage/transfer owns the
// format and the policy).

// ExportRows reads the tables p names, in order, from one read transaction
// (a WAL snapshot: writers may go on, the export sees one moment).
func (s *Store) ExportRows(ctx context.Context, p *pipeline.ExportParams) error {
	conn, err := s.read.Conn(ctx)
	if err != nil {
		return translate(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil) // the read pool opens the file read-only
	if err != nil {
		return translate(err)
	}
	defer func() { _ = tx.Rollback() }()
	// A deferred transaction takes its snapshot at its first read.
	desc, err := describe(ctx, tx, false)
	if err != nil {
		return err
	}
	if err := p.Begin(desc); err != nil {
		return err
	}
	for _, name := range p.Tables {
		t, ok := findTable(desc, name)
		if !ok {
			return fmt.Errorf("sqlite: export: no table %s", name)
		}
		if err := exportTable(ctx, tx, t, p.Row); err != nil {
			return err
		}
	}
	seqs, err := sequences(ctx, tx)
	if err != nil {
		return err
	}
	return p.End(seqs)
}

func exportTable(ctx context.Context, tx *sql.Tx, t pipeline.TransferTable, emit func(string, []any) error) error {
	rows, err := tx.QueryContext(ctx, `SELECT `+quoteList(t.Columns)+` FROM `+quote(t.Name)+` ORDER BY rowid`) //nolint:gosec // G202: quoted names from the schema, not input
	if err != nil {
		return fmt.Errorf("sqlite: export %s: %w", t.Name, translate(err))
	}
	defer rows.Close()
	vals := make([]any, len(t.Columns))
	ptrs := make([]any, len(t.Columns))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("sqlite: export %s: %w", t.Name, err)
		}
		out := make([]any, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case nil, int64, string:
				out[i] = v
			case []byte:
				out[i] = string(v)
			default:
				return fmt.Errorf("sqlite: export %s.%s: unexpected value of type %T", t.Name, t.Columns[i], v)
			}
		}
		if err := emit(t.Name, out); err != nil {
			return err
		}
	}
	return translate(rows.Err())
}

// queryer is what describe and sequences read through.
type queryer interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// describe lists the store's tables and columns (and, with count, their
// row counts), leaving out the migration bookkeeping.
func describe(ctx context.Context, q queryer, count bool) (pipeline.TransferStore, error) {
	d := pipeline.TransferStore{Driver: "sqlite"}
	if err := q.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&d.SchemaVersion); err != nil {
		return d, fmt.Errorf("sqlite: schema version: %w", translate(err))
	}
	names, err := firstColumn(ctx, q, `SELECT name FROM sqlite_master WHERE type = 'table'
		AND name NOT LIKE 'sqlite_%' AND name <> 'schema_migrations' ORDER BY name`)
	if err != nil {
		return d, err
	}
	for _, n := range names {
		cols, err := firstColumn(ctx, q, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, n)
		if err != nil {
			return d, err
		}
		t := pipeline.TransferTable{Name: n, Columns: cols}
		if count {
			if err := q.QueryRowContext(ctx, `SELECT count(*) FROM `+quote(n)).Scan(&t.Rows); err != nil {
				return d, fmt.Errorf("sqlite: count %s: %w", n, translate(err))
			}
		}
		d.Tables = append(d.Tables, t)
	}
	return d, nil
}

// firstColumn returns the first column of every row of query.
func firstColumn(ctx context.Context, q queryer, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: describe: %w", translate(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, translate(rows.Err())
}

func findTable(d pipeline.TransferStore, name string) (pipeline.TransferTable, bool) {
	for _, t := range d.Tables {
		if t.Name == name {
			return t, true
		}
	}
	return pipeline.TransferTable{}, false
}

// sequences reads what each AUTOINCREMENT table handed out last: more than
// its largest id when rows were deleted (acked queue messages, purged dead
// letters), and an id once handed out is never handed out again.
func sequences(ctx context.Context, q queryer) (map[string]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, seq FROM sqlite_sequence`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: sequences: %w", translate(err))
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var n string
		var v int64
		if err := rows.Scan(&n, &v); err != nil {
			return nil, err
		}
		out[n] = v
	}
	return out, translate(rows.Err())
}

// ImportRows writes every row p gives in one write transaction, then moves
// each AUTOINCREMENT sequence past what the source handed out. Inserting
// the rows as they are trips no trigger: the triggers guard updates and
// deletes, and an insert of a job in its final status is neither.
func (s *Store) ImportRows(ctx context.Context, p *pipeline.ImportParams) error {
	tx, err := s.write.BeginTx(ctx, nil) // BEGIN IMMEDIATE: no other writer meanwhile
	if err != nil {
		return translate(err)
	}
	defer func() { _ = tx.Rollback() }()
	desc, err := describe(ctx, tx, true)
	if err != nil {
		return err
	}
	if err := p.Begin(desc); err != nil {
		return err
	}
	if err := importRows(ctx, tx, p.Next); err != nil {
		return err
	}
	seqs, err := p.End()
	if err != nil {
		return err
	}
	if err := setSequences(ctx, tx, seqs); err != nil {
		return err
	}
	return s.commit(tx)
}

func importRows(ctx context.Context, tx *sql.Tx, next func() (string, []string, []any, error)) error {
	var (
		stmt    *sql.Stmt
		current string
	)
	defer func() {
		if stmt != nil {
			stmt.Close()
		}
	}()
	for {
		table, cols, vals, err := next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if stmt == nil || table != current {
			if stmt != nil {
				stmt.Close()
			}
			ph := strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ")
			stmt, err = tx.PrepareContext(ctx, `INSERT INTO `+quote(table)+` (`+quoteList(cols)+`) VALUES (`+ph+`)`) //nolint:gosec // G202: quoted names from the schema and "?" placeholders
			if err != nil {
				return fmt.Errorf("sqlite: import %s: %w", table, translate(err))
			}
			current = table
		}
		if _, err := stmt.ExecContext(ctx, vals...); err != nil {
			return fmt.Errorf("sqlite: import %s: %w", table, translate(err))
		}
	}
}

// setSequences raises each AUTOINCREMENT table's sequence to the source's
// value (SQLite itself raised it to the largest inserted id).
func setSequences(ctx context.Context, tx *sql.Tx, seqs map[string]int64) error {
	for table, v := range seqs {
		var ddl string
		err := tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&ddl)
		if errors.Is(err, sql.ErrNoRows) || !strings.Contains(strings.ToUpper(ddl), "AUTOINCREMENT") {
			continue // the target hands out these ids without a sequence
		}
		if err != nil {
			return fmt.Errorf("sqlite: sequence of %s: %w", table, translate(err))
		}
		res, err := tx.ExecContext(ctx, `UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?`, v, table)
		if err != nil {
			return fmt.Errorf("sqlite: sequence of %s: %w", table, translate(err))
		}
		if n, _ := res.RowsAffected(); n == 0 && v > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)`, table, v); err != nil {
				return fmt.Errorf("sqlite: sequence of %s: %w", table, translate(err))
			}
		}
	}
	return nil
}

func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = quote(n)
	}
	return strings.Join(q, ", ")
}
