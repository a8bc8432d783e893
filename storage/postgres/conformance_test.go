//go:build postgres

package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
	"edgepipe/storage/postgres/pgtest"
	"edgepipe/storage/storetest"
)

// The Postgres tests need a server: EDGEPIPE_TEST_DATABASE_URL names one
// whose user may create databases (scripts/postgres.sh starts a throwaway
// cluster and prints it). Each test gets a database of its own.

// testURL returns the server's URL; without one the tests skip, or fail
// when CI is set (a skipped suite must not pass CI).
func testURL(t testing.TB) string { return pgtest.ServerURL(t) }

// newDatabase creates a fresh database on the test server and returns its
// URL; it is dropped when t ends.
func newDatabase(t testing.TB) string { return pgtest.FreshDatabase(t, "edgepipe_", false) }

func openTest(t *testing.T, url string, clock pipeline.Clock) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{URL: url, Clock: clock, MaxDeliveries: 3, MaxConns: 8})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openOneConn opens a store on a new database with a pool of one
// connection, so what its statements leave on the connection (prepared
// statements, settings) can be read back through s.pool.
func openOneConn(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{URL: newDatabase(t), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStoreConformance(t *testing.T) {
	testURL(t)
	storetest.Exercise(t, storetest.Harness{
		NewDatabase: func(t *testing.T) string { return newDatabase(t) },
		Open: func(t *testing.T, db string, clock pipeline.Clock) storetest.JobStore {
			return openTest(t, db, clock)
		},
		Raw: rawPostgres,
		RefuseInserts: func(t *testing.T, db storetest.DB, table string) {
			t.Helper()
			if _, err := db.Exec(context.Background(), `CREATE TRIGGER refuse_`+table+` BEFORE INSERT ON `+table+`
				FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('inserts refused by the test')`); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// rawPostgres is the suite's second connection: a pgx connection of its own.
func rawPostgres(t *testing.T, url string) storetest.DB {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &rawDB{conn: conn}
}

type rawDB struct{ conn *pgx.Conn }

// dollars rewrites the suite's ? and ?N placeholders as $N.
func dollars(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] != '?' {
			b.WriteByte(q[i])
			continue
		}
		j := i + 1
		for j < len(q) && q[j] >= '0' && q[j] <= '9' {
			j++
		}
		if j > i+1 {
			b.WriteString("$" + q[i+1:j])
		} else {
			n++
			b.WriteString("$" + strconv.Itoa(n))
		}
		i = j - 1
	}
	return b.String()
}

func (r *rawDB) QueryRow(ctx context.Context, q string, args ...any) storetest.Row {
	return r.conn.QueryRow(ctx, dollars(q), args...)
}

func (r *rawDB) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := r.conn.Exec(ctx, dollars(q), args...)
	return tag.RowsAffected(), err
}

func (r *rawDB) Query(ctx context.Context, q string, args ...any) ([][]string, error) {
	rows, err := r.conn.Query(ctx, dollars(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = fmt.Sprint(v)
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
