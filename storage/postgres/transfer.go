package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// The row-level half of edgepipe export / import (storage/transfer owns the
// format and the policy).

// ExportRows reads the tables p names, in order, from one REPEATABLE READ
// read-only transaction: one snapshot, while writers go on.
func (s *Store) ExportRows(ctx context.Context, p *pipeline.ExportParams) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return translate(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	desc, types, err := describe(ctx, tx, false)
	if err != nil {
		return err
	}
	if err := p.Begin(desc); err != nil {
		return err
	}
	for _, name := range p.Tables {
		t, ok := findTable(desc, name)
		if !ok {
			return fmt.Errorf("postgres: export: no table %s", name)
		}
		if err := exportTable(ctx, tx, t, types[name], p.Row); err != nil {
			return err
		}
	}
	seqs := map[string]int64{}
	for _, t := range desc.Tables {
		seq, err := sequenceOf(ctx, tx, t.Name)
		if err != nil {
			return err
		}
		if seq == "" {
			continue
		}
		var v int64
		if err := tx.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM `+seq).Scan(&v); err != nil {
			return fmt.Errorf("postgres: sequence of %s: %w", t.Name, translate(err))
		}
		seqs[t.Name] = v
	}
	return p.End(seqs)
}

func exportTable(ctx context.Context, tx pgx.Tx, t pipeline.TransferTable, types []string, emit func(string, []any) error) error {
	sel := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		sel[i] = pgx.Identifier{c}.Sanitize()
		if types[i] == "json" || types[i] == "jsonb" {
			sel[i] += "::text" // the text, not a decoded value
		}
	}
	order, err := primaryKey(ctx, tx, t.Name)
	if err != nil {
		return err
	}
	q := `SELECT ` + strings.Join(sel, ", ") + ` FROM ` + pgx.Identifier{t.Name}.Sanitize()
	if len(order) > 0 {
		q += ` ORDER BY ` + quoteList(order)
	}
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("postgres: export %s: %w", t.Name, translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return fmt.Errorf("postgres: export %s: %w", t.Name, translate(err))
		}
		for i, v := range vals {
			switch x := v.(type) {
			case nil, int64, string:
			case int32:
				vals[i] = int64(x)
			case int16:
				vals[i] = int64(x)
			default:
				return fmt.Errorf("postgres: export %s.%s: unexpected value of type %T", t.Name, t.Columns[i], v)
			}
		}
		if err := emit(t.Name, vals); err != nil {
			return err
		}
	}
	return translate(rows.Err())
}

// describe lists the store's tables, their columns and column types (and,
// with count, their row counts), leaving out the migration bookkeeping.
func describe(ctx context.Context, tx pgx.Tx, count bool) (pipeline.TransferStore, map[string][]string, error) {
	d := pipeline.TransferStore{Driver: "postgres"}
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&d.SchemaVersion); err != nil {
		return d, nil, fmt.Errorf("postgres: schema version: %w", translate(err))
	}
	rows, err := tx.Query(ctx, `SELECT c.table_name, c.column_name, c.data_type
		FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
		  AND c.table_name NOT IN ('schema_migrations', 'job_keys')
		ORDER BY c.table_name, c.ordinal_position`)
	if err != nil {
		return d, nil, fmt.Errorf("postgres: describe: %w", translate(err))
	}
	types := map[string][]string{}
	for rows.Next() {
		var table, col, typ string
		if err := rows.Scan(&table, &col, &typ); err != nil {
			rows.Close()
			return d, nil, translate(err)
		}
		if n := len(d.Tables); n == 0 || d.Tables[n-1].Name != table {
			d.Tables = append(d.Tables, pipeline.TransferTable{Name: table})
		}
		t := &d.Tables[len(d.Tables)-1]
		t.Columns = append(t.Columns, col)
		types[table] = append(types[table], typ)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return d, nil, fmt.Errorf("postgres: describe: %w", translate(err))
	}
	if count {
		for i := range d.Tables {
			t := &d.Tables[i]
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{t.Name}.Sanitize()).Scan(&t.Rows); err != nil {
				return d, nil, fmt.Errorf("postgres: count %s: %w", t.Name, translate(err))
			}
		}
	}
	return d, types, nil
}

func findTable(d pipeline.TransferStore, name string) (pipeline.TransferTable, bool) {
	for _, t := range d.Tables {
		if t.Name == name {
			return t, true
		}
	}
	return pipeline.TransferTable{}, false
}

func primaryKey(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = to_regclass($1) AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, pgx.Identifier{table}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("postgres: primary key of %s: %w", table, translate(err))
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: primary key of %s: %w", table, translate(err))
	}
	return cols, nil
}

// sequenceOf names the sequence behind the table's id column (identity or
// serial), already quoted, or "" when it has none.
func sequenceOf(ctx context.Context, tx pgx.Tx, table string) (string, error) {
	var seq *string
	err := tx.QueryRow(ctx, `SELECT pg_get_serial_sequence($1, 'id')
		WHERE EXISTS (SELECT 1 FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $2 AND column_name = 'id')`,
		pgx.Identifier{table}.Sanitize(), table).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && seq == nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("postgres: sequence of %s: %w", table, translate(err))
	}
	return *seq, nil
}

// importBatch is how many rows one COPY carries.
const importBatch = 1000

// ImportRows writes every row p gives in one transaction, with COPY (which
// keeps the given values of identity columns), then sets every id sequence
// past both the source's value and the largest imported id, so SSE cursors
// and dead-letter ids stay valid and no id is handed out twice. Inserting
// the rows as they are trips no guard: the guards refuse updates, deletes
// and truncation, and an insert of a job in its final status is none of
// them. Each job's key row (job_keys, which export leaves out: it is made
// from the job's own columns) is written by jobs' insert trigger. The tables are locked for the transaction: no other
// process writes while the import runs.
func (s *Store) ImportRows(ctx context.Context, p *pipeline.ImportParams) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return translate(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	desc, _, err := describe(ctx, tx, false)
	if err != nil {
		return err
	}
	names := make([]string, len(desc.Tables))
	for i, t := range desc.Tables {
		names[i] = t.Name
	}
	if len(names) > 0 {
		if _, err := tx.Exec(ctx, `LOCK TABLE `+quoteList(names)+` IN EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("postgres: import: lock tables: %w", translate(err))
		}
	}
	if desc, _, err = describe(ctx, tx, true); err != nil {
		return err
	}
	if err := p.Begin(desc); err != nil {
		return err
	}
	if err := copyRows(ctx, tx, p.Next); err != nil {
		return err
	}
	seqs, err := p.End()
	if err != nil {
		return err
	}
	for _, t := range desc.Tables {
		if err := setSequence(ctx, tx, t.Name, seqs[t.Name]); err != nil {
			return err
		}
	}
	return translate(tx.Commit(ctx))
}

// copyRows sends the rows in COPYs of at most importBatch rows of one table.
func copyRows(ctx context.Context, tx pgx.Tx, next func() (string, []string, []any, error)) error {
	var (
		table string
		cols  []string
		batch [][]any
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(batch)); err != nil {
			return fmt.Errorf("postgres: import %s: %w", table, translate(err))
		}
		batch = batch[:0]
		return nil
	}
	for {
		t, c, vals, err := next()
		if errors.Is(err, io.EOF) {
			return flush()
		}
		if err != nil {
			return err
		}
		if t != table || len(batch) >= importBatch {
			if err := flush(); err != nil {
				return err
			}
			table, cols = t, c
		}
		batch = append(batch, vals)
	}
}

func setSequence(ctx context.Context, tx pgx.Tx, table string, floor int64) error {
	seq, err := sequenceOf(ctx, tx, table)
	if err != nil || seq == "" {
		return err
	}
	var top int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&top); err != nil {
		return fmt.Errorf("postgres: sequence of %s: %w", table, translate(err))
	}
	top = max(top, floor)
	if top == 0 {
		return nil // nothing handed out yet: the sequence starts fresh
	}
	if _, err := tx.Exec(ctx, `SELECT setval($1, $2, true)`, seq, top); err != nil {
		return fmt.Errorf("postgres: sequence of %s: %w", table, translate(err))
	}
	return nil
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}
