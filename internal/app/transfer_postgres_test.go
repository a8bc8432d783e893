//go:build postgres

package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/storage/transfer"
)

// edgepipe export with the embedded SQLite configured, edgepipe import with
// EDGEPIPE_DATABASE_URL set: the job arrives in Postgres as it was, and a
// second import is refused.
func TestExportSQLiteImportPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	src := testConfig(t, t.TempDir(), nil)
	a, err := Open(ctx, src, log)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := a.Store.CreateJob(ctx, pipeline.NewJob{ID: "v2-moved", Tenant: "acme", Operation: "render_video",
		IdempotencyKey: "k", RequestFingerprint: "fp", Input: json.RawMessage(`{"title":"moved"}`), Version: "v2", Queue: "render-v2"})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	var file bytes.Buffer
	if _, err := Export(ctx, src, log, &file); err != nil {
		t.Fatal(err)
	}

	dst := testConfig(t, t.TempDir(), map[string]string{"EDGEPIPE_DATABASE_URL": freshDatabase(t)})
	if _, err := Migrate(ctx, dst, log); err != nil {
		t.Fatal(err)
	}
	sum, err := Import(ctx, dst, log, bytes.NewReader(file.Bytes()))
	if err != nil || sum.Driver != "sqlite" || sum.Rows["jobs"] != 1 {
		t.Fatalf("import: %+v %v", sum, err)
	}
	if _, err := Import(ctx, dst, log, bytes.NewReader(file.Bytes())); !errors.Is(err, transfer.ErrNotEmpty) {
		t.Fatalf("second import: %v", err)
	}
	b, err := Open(ctx, dst, log)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := b.Store.GetJob(ctx, "v2-moved")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != want.Status || !got.CreatedAt.Equal(want.CreatedAt) || string(got.Input) != string(want.Input) || got.Queue != "render-v2" {
		t.Fatalf("job in Postgres %+v, want %+v", got, want)
	}
}
