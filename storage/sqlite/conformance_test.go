package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/storage/storetest"
)

// The job-store contract, shared with every driver (storage/storetest),
// run against SQLite: always, hermetic.
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, storetest.Harness{
		NewDatabase: func(t *testing.T) string { return filepath.Join(t.TempDir(), "edgepipe.db") },
		Open: func(t *testing.T, db string, clock pipeline.Clock) storetest.JobStore {
			return openTest(t, db, clock)
		},
		Raw: rawSQLite,
		RefuseInserts: func(t *testing.T, db storetest.DB, table string) {
			t.Helper()
			if _, err := db.Exec(context.Background(), `CREATE TRIGGER refuse_`+table+` BEFORE INSERT ON `+table+`
				BEGIN SELECT RAISE(ABORT, 'inserts refused by the test'); END`); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// rawSQLite is the suite's second connection: a database/sql handle of its
// own on the file, not the store's pools.
func rawSQLite(t *testing.T, path string) storetest.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+uriPath(path)+"?_busy_timeout=10000&_foreign_keys=1")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return rawDB{db}
}

type rawDB struct{ db *sql.DB }

func (r rawDB) QueryRow(ctx context.Context, q string, args ...any) storetest.Row {
	return r.db.QueryRowContext(ctx, q, args...)
}

func (r rawDB) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := r.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (r rawDB) Query(ctx context.Context, q string, args ...any) ([][]string, error) {
	rows, err := r.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out [][]string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := make([]string, len(cols))
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			row[i] = fmt.Sprint(v)
		}
		out = append(out, row)
	}
	return out, rows.Err()
}
