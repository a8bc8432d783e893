package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/storage/sqlite"
)

// export → import between two data directories: the file is written, the
// empty store takes it, a second import is refused with exit status 9 and
// one line, a file that is not an export with 10, and both commands
// explain themselves with --help.
func TestExportImportCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := newTestCLI(t, "")
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(src.dataDir, "edgepipe.db")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateJob(ctx, pipeline.NewJob{ID: "v1-cli", Tenant: "acme", Operation: "render_video",
		IdempotencyKey: "k", RequestFingerprint: "fp", Input: json.RawMessage(`{}`), Version: "v1", Queue: "render-v1"}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	file := filepath.Join(t.TempDir(), "store.jsonl")
	if err := src.export(ctx, []string{"--out", file}); err != nil {
		t.Fatalf("export: %v", err)
	}
	if !strings.Contains(src.out.String(), "exported") {
		t.Fatalf("export said %q", src.out)
	}
	if b, err := os.ReadFile(file); err != nil || !strings.HasPrefix(string(b), `{"format":"edgepipe-export"`) {
		t.Fatalf("export file: %.80q %v", b, err)
	}

	dst := newTestCLI(t, "")
	if err := dst.importCmd(ctx, []string{"--in", file}); err != nil {
		t.Fatalf("import: %v", err)
	}
	if !strings.Contains(dst.out.String(), "imported") {
		t.Fatalf("import said %q", dst.out)
	}
	err = dst.importCmd(ctx, []string{"--in", file})
	if exitCode(err) != exitNotEmpty || strings.Contains(oneLine(err), "\n") || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("second import: exit %d, %v", exitCode(err), err)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := newTestCLI(t, "").importCmd(ctx, []string{"--in", bad}); exitCode(err) != exitBadExport {
		t.Fatalf("import of a non-export: exit %d, %v", exitCode(err), err)
	}
	if err := dst.importCmd(ctx, nil); exitCode(err) != exitUsage {
		t.Fatalf("import without --in: exit %d, %v", exitCode(err), err)
	}
	for name, run := range map[string]func(context.Context, []string) error{"export": dst.export, "import": dst.importCmd} {
		dst.errOut.Reset()
		if err := run(ctx, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s --help: %v", name, err)
		}
		if !strings.Contains(dst.errOut.String(), "Exit status") {
			t.Fatalf("%s --help says no exit statuses: %s", name, dst.errOut)
		}
	}
}
