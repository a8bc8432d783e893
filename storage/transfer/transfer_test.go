package transfer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/storage/sqlite"
	"edgepipe/storage/transfer"
)

func openSQLite(t *testing.T, clock pipeline.Clock) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "target.db")
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Clock: clock, MaxDeliveries: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, path
}

// SQLite → SQLite: check is clean before and after, every row of every
// table is the same through a raw connection, the sequences hand out no id
// twice, and an SSE cursor from before resumes at the same event.
func TestRoundTripSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := buildHistory(t)
	mustCheck(t, h.store, h.objects, h.clock, "the source")
	file := exportOf(t, h.store)

	dst, path := openSQLite(t, h.clock)
	sum, err := transfer.Import(ctx, dst, bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rows["jobs"] != 10 || sum.Rows["assets"] != 4 || sum.Rows["webhook_outbox"] != 2 || sum.Rows["dead_letters"] < 2 ||
		sum.Rows["queue_messages"] == 0 || sum.Rows["process_bindings"] != 1 || sum.Rows["object_claims"] != 1 ||
		sum.Rows["provider_proofs"] != 2 {
		t.Fatalf("imported %v", sum.Rows)
	}
	mustCheck(t, dst, h.objects, h.clock, "the target")
	sameRows(t, dumpWith(t, sqliteRows(t, h.path)), dumpWith(t, sqliteRows(t, path)))
	src, got := sqliteSequences(t, h.path), sqliteSequences(t, path)
	for table, v := range src {
		if got[table] < v {
			t.Errorf("sequence of %s at %d, the source handed out %d", table, got[table], v)
		}
	}
	resumes(t, dst, h)

	// The imported store runs on: a new job's event ids follow the old ones.
	if _, _, err := dst.CreateJob(ctx, pipeline.NewJob{ID: "v1-after", Tenant: "acme", Operation: "render_video",
		IdempotencyKey: "key-after", RequestFingerprint: "fp", Input: json.RawMessage(`{}`), Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatal(err)
	}
	evs, err := dst.Events(ctx, "v1-after", 0, 10)
	if err != nil || len(evs) != 1 || evs[0].ID <= h.next {
		t.Fatalf("new job's events %+v (%v), want ids after %d", evs, err, h.next)
	}
}

// resumes: the event after the cursor is the same event in the target.
func resumes(t *testing.T, dst interface {
	Events(ctx context.Context, jobID string, afterID int64, limit int) ([]pipeline.Event, error)
}, h *history) {
	t.Helper()
	evs, err := dst.Events(context.Background(), h.cursorJob, h.cursor, 1)
	if err != nil || len(evs) != 1 {
		t.Fatalf("resume after %d: %v %v", h.cursor, evs, err)
	}
	if evs[0].ID != h.next || evs[0].Kind != pipeline.EventRedriven {
		t.Fatalf("resumed at event %d (%s), want %d (redriven)", evs[0].ID, evs[0].Kind, h.next)
	}
}

// An import into a store that holds anything is refused, and writes
// nothing.
func TestImportRefusesNonEmptyTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := buildHistory(t)
	file := exportOf(t, h.store)
	dst, path := openSQLite(t, nil)
	if _, _, err := dst.CreateJob(ctx, pipeline.NewJob{ID: "v1-there", Tenant: "acme", Operation: "render_video",
		IdempotencyKey: "k", RequestFingerprint: "fp", Input: json.RawMessage(`{}`), Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatal(err)
	}
	before := dumpWith(t, sqliteRows(t, path))
	_, err := transfer.Import(ctx, dst, bytes.NewReader(file))
	if !errors.Is(err, transfer.ErrNotEmpty) || !strings.Contains(err.Error(), "jobs has 1 rows") {
		t.Fatalf("import into a non-empty store: %v", err)
	}
	sameRows(t, before, dumpWith(t, sqliteRows(t, path)))

	// Into the source itself, too.
	if _, err := transfer.Import(ctx, h.store, bytes.NewReader(file)); !errors.Is(err, transfer.ErrNotEmpty) {
		t.Fatalf("import into the source: %v", err)
	}
}

// A file cut short, with a row lost or changed, or of another version is
// refused before anything commits; the empty target stays empty and takes
// the whole file afterwards.
func TestImportRefusesBrokenFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := buildHistory(t)
	file := exportOf(t, h.store)
	lines := strings.SplitAfter(strings.TrimSuffix(string(file), "\n"), "\n")
	without := func(i int) string {
		return strings.Join(append(append([]string(nil), lines[:i]...), lines[i+1:]...), "")
	}
	dst, path := openSQLite(t, h.clock)
	for name, c := range map[string]struct {
		file string
		want error
	}{
		"empty":        {"", transfer.ErrFormat},
		"not json":     {"hello\n", transfer.ErrFormat},
		"cut short":    {strings.Join(lines[:len(lines)/2], ""), transfer.ErrFormat},
		"no end line":  {without(len(lines) - 1), transfer.ErrFormat},
		"a row lost":   {without(len(lines) / 2), transfer.ErrFormat},
		"version 2":    {strings.Replace(string(file), `"version":1`, `"version":2`, 1), transfer.ErrFormat},
		"a float":      {strings.Replace(string(file), `"attempts":1,`, `"attempts":1.5,`, 1), transfer.ErrFormat},
		"extra column": {strings.Replace(string(file), `"attempts":1,`, `"attempts":1,"zzz":1,`, 1), transfer.ErrFormat},
		"unknown column": {strings.ReplaceAll(strings.Replace(string(file), `"attempts",`, `"attempts","zzz",`, 1),
			`"attempts":1,`, `"attempts":1,"zzz":1,`), transfer.ErrIncompatible},
	} {
		if _, err := transfer.Import(ctx, dst, strings.NewReader(c.file)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	for table, td := range dumpWith(t, sqliteRows(t, path)) {
		if len(td.rows) != 0 {
			t.Fatalf("a refused import left %d rows in %s", len(td.rows), table)
		}
	}
	if _, err := transfer.Import(ctx, dst, bytes.NewReader(file)); err != nil {
		t.Fatalf("the whole file after the refusals: %v", err)
	}
}

// The file is what the package comment says: a header naming the source
// and every table with its columns, rows in dependency order, every jobs
// row with an instance id, and an end line with the counts.
func TestExportFormat(t *testing.T) {
	t.Parallel()
	h := buildHistory(t)
	file := exportOf(t, h.store)
	sc := bufio.NewScanner(bytes.NewReader(file))
	sc.Buffer(nil, 1<<20)
	var hdr struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
		Source  struct {
			Driver        string `json:"driver"`
			SchemaVersion int    `json:"schema_version"`
		} `json:"source"`
		Tables []struct {
			Name    string   `json:"name"`
			Columns []string `json:"columns"`
		} `json:"tables"`
	}
	sc.Scan()
	if err := json.Unmarshal(sc.Bytes(), &hdr); err != nil {
		t.Fatal(err)
	}
	v, _ := h.store.SchemaVersion(context.Background())
	if hdr.Format != transfer.Format || hdr.Version != transfer.Version || hdr.Source.Driver != "sqlite" || hdr.Source.SchemaVersion != v || len(hdr.Tables) != len(transfer.Tables) {
		t.Fatalf("header %+v", hdr)
	}
	for i, tb := range hdr.Tables {
		if tb.Name != transfer.Tables[i] || len(tb.Columns) == 0 {
			t.Fatalf("table %d of the header: %+v", i, tb)
		}
	}
	if !contains(hdr.Tables[0].Columns, "instance_id") {
		t.Fatalf("jobs columns without instance_id: %v", hdr.Tables[0].Columns)
	}
	pos, last, rows := map[string]int{}, 0, map[string]int64{}
	for i, n := range transfer.Tables {
		pos[n] = i
	}
	var end struct {
		End struct {
			Rows map[string]int64 `json:"rows"`
		} `json:"end"`
	}
	for sc.Scan() {
		var l struct {
			Table string         `json:"table"`
			Row   map[string]any `json:"row"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Table == "" {
			if err := json.Unmarshal(sc.Bytes(), &end); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if pos[l.Table] < last {
			t.Fatalf("a %s row after a later table's", l.Table)
		}
		last = pos[l.Table]
		rows[l.Table]++
		if l.Table == "jobs" && l.Row["instance_id"] == nil {
			t.Fatalf("job without instance_id: %v", l.Row)
		}
	}
	if len(end.End.Rows) != len(transfer.Tables) || end.End.Rows["jobs"] != rows["jobs"] || rows["job_events"] == 0 || end.End.Rows["job_events"] != rows["job_events"] {
		t.Fatalf("end line %v, rows %v", end.End.Rows, rows)
	}
}

// A jobs row whose instance id differs from its id goes only into a store
// that keeps instance ids (schema 5 and later); a store without the column
// refuses it rather than lose the id the tenant knows.
func TestImportInstanceID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := buildHistory(t)
	file := strings.Replace(string(exportOf(t, h.store)), `"instance_id":"v1-ok"`, `"instance_id":"tenant-chosen"`, 1)
	if !strings.Contains(file, `"tenant-chosen"`) {
		t.Fatal("the export has no instance_id v1-ok to change")
	}
	dst, path := openSQLite(t, h.clock)
	cols, _, err := sqliteRows(t, path)(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	_, err = transfer.Import(ctx, dst, strings.NewReader(file))
	if !contains(cols, "instance_id") {
		if !errors.Is(err, transfer.ErrIncompatible) {
			t.Fatalf("a store without instance ids took a job whose instance id is not its id: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range dumpWith(t, sqliteRows(t, path))["jobs"].rows {
		if r["id"] == "'v1-ok" {
			found = true
			if r["instance_id"] != "'tenant-chosen" {
				t.Fatalf("instance id %s", r["instance_id"])
			}
		}
	}
	if !found {
		t.Fatal("job v1-ok was not imported")
	}
}
