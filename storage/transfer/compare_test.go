package transfer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"edgepipe/storage/transfer"
)

// dump is every table of a database read through a connection of the test's
// own, each value in one canonical text: integers in decimal, NULL as
// "NULL", JSON columns re-encoded (Postgres' jsonb reorders and respaces
// what it keeps, and means the same).
type dump map[string]tableDump

type tableDump struct {
	columns []string
	rows    []map[string]string
}

// jsonColumns hold JSON: compared by meaning.
var jsonColumns = map[string]bool{"job_events.detail_json": true, "units.result_json": true}

func canonical(table, col string, v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case int64, int32, int16, int:
		return fmt.Sprint(x)
	case []byte:
		v = string(x)
	case map[string]any: // pgx decodes json and jsonb
		b, _ := json.Marshal(x)
		return string(b)
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Sprintf("%T:%v", v, v)
	}
	if jsonColumns[table+"."+col] {
		var j any
		if err := json.Unmarshal([]byte(s), &j); err == nil {
			b, _ := json.Marshal(j)
			return string(b)
		}
	}
	return "'" + s
}

// rowsQuerier is a raw connection of either driver.
type rowsQuerier func(ctx context.Context, table string) (cols []string, rows [][]any, err error)

func dumpWith(t *testing.T, q rowsQuerier) dump {
	t.Helper()
	d := dump{}
	for _, table := range transfer.Tables {
		cols, rows, err := q(context.Background(), table)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		td := tableDump{columns: cols}
		for _, r := range rows {
			m := map[string]string{}
			for i, c := range cols {
				m[c] = canonical(table, c, r[i])
			}
			td.rows = append(td.rows, m)
		}
		d[table] = td
	}
	return d
}

func sqliteRows(t *testing.T, path string) rowsQuerier {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return func(ctx context.Context, table string) ([]string, [][]any, error) {
		rows, err := db.QueryContext(ctx, `SELECT * FROM `+table)
		if err != nil {
			return nil, nil, err
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			return nil, nil, err
		}
		var out [][]any
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return nil, nil, err
			}
			out = append(out, vals)
		}
		return cols, out, rows.Err()
	}
}

// sequenceReader reads what a database hands out next per table.
func sqliteSequences(t *testing.T, path string) map[string]int64 {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name, seq FROM sqlite_sequence`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var n string
		var v int64
		if err := rows.Scan(&n, &v); err != nil {
			t.Fatal(err)
		}
		out[n] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameRows wants every table of want in got, row for row and value for
// value. A column only one side has is instance_id (a store from before
// tenant-scoped ids): there it must equal id.
func sameRows(t *testing.T, want, got dump) {
	t.Helper()
	total := 0
	for _, table := range transfer.Tables {
		w, g := want[table], got[table]
		if len(w.rows) != len(g.rows) {
			t.Errorf("%s: %d rows, want %d", table, len(g.rows), len(w.rows))
			continue
		}
		var cols []string
		for _, c := range w.columns {
			if contains(g.columns, c) {
				cols = append(cols, c)
			} else if !(table == "jobs" && c == "instance_id") {
				t.Errorf("%s: the target lost column %s", table, c)
			}
		}
		for _, c := range g.columns {
			if !contains(w.columns, c) && !(table == "jobs" && c == "instance_id") {
				t.Errorf("%s: the target has a column %s the source has not", table, c)
			}
		}
		ws, gs := render(w, cols), render(g, cols)
		for i := range ws {
			if ws[i] != gs[i] {
				t.Errorf("%s: row differs\n got %s\nwant %s", table, gs[i], ws[i])
			}
		}
		// A side without instance_id stands for instance_id = id.
		if table == "jobs" && contains(w.columns, "instance_id") != contains(g.columns, "instance_id") {
			td := w
			if !contains(w.columns, "instance_id") {
				td = g
			}
			for _, r := range td.rows {
				if r["instance_id"] != r["id"] {
					t.Errorf("job %s has instance id %s, the other side none", r["id"], r["instance_id"])
				}
			}
		}
		total += len(w.rows)
	}
	if total == 0 {
		t.Fatal("compared no rows at all")
	}
}

func render(td tableDump, cols []string) []string {
	out := make([]string, len(td.rows))
	for i, r := range td.rows {
		parts := make([]string, len(cols))
		for j, c := range cols {
			parts[j] = c + "=" + r[c]
		}
		out[i] = strings.Join(parts, " ")
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
