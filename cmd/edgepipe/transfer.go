package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"edgepipe/internal/app"
	"edgepipe/storage/transfer"
)

func init() {
	register("export", "write the whole job store to a file (to move it to another store with import)",
		func(ctx context.Context, args []string) error { return osEnv().export(ctx, args) })
	register("import", "write an export into an empty job store (e.g. the embedded SQLite into Postgres)",
		func(ctx context.Context, args []string) error { return osEnv().importCmd(ctx, args) })
}

func (e *cliEnv) export(ctx context.Context, args []string) error {
	fs := newFlags("export", "--out FILE", `
Writes the configured job store (the embedded SQLite file under
EDGEPIPE_DATA_DIR, or the Postgres database of EDGEPIPE_DATABASE_URL) to
FILE: every job, event, unit, provider call, object claim, asset, queue
message, dead letter, webhook outbox row and process binding, read from one
snapshot. The file is JSON Lines: a header (format version, source driver
and schema version, the tables and their columns), one line per row in
dependency order, and an end line with the row counts. Objects stay where
they are (the object store is not copied). Stop the API and workers first:
what they write after the snapshot is not in the file.

FILE is written under a temporary name and renamed when complete; "-"
writes to standard output. Exit status 0 when written, 1 otherwise, 2 for
wrong flags.`)
	fs.SetOutput(e.stderr)
	out := fs.String("out", "", "file to write (required; - for standard output)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("%w: --out FILE is required (edgepipe export --help)", errUsage)
	}
	cfg, log, err := e.loadConfig()
	if err != nil {
		return err
	}
	if *out == "-" {
		sum, err := app.Export(ctx, cfg, log, e.stdout)
		if err == nil {
			fmt.Fprintf(e.stderr, "exported %d rows from the %s job store (schema %d)\n", sum.Total(), sum.Driver, sum.SchemaVersion)
		}
		return err
	}
	sum, err := writeAtomically(*out, func(w io.Writer) (transfer.Summary, error) { return app.Export(ctx, cfg, log, w) })
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "exported %d rows from the %s job store (schema %d) to %s\n", sum.Total(), sum.Driver, sum.SchemaVersion, *out)
	return nil
}

// writeAtomically writes path through a temporary file in its directory,
// synced and renamed only when write succeeded: a failed export leaves no
// file that looks like one.
func writeAtomically(path string, write func(io.Writer) (transfer.Summary, error)) (transfer.Summary, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return transfer.Summary{}, err
	}
	defer os.Remove(f.Name()) // after the rename, nothing to remove
	sum, err := write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return sum, err
}

func (e *cliEnv) importCmd(ctx context.Context, args []string) error {
	fs := newFlags("import", "--in FILE", `
Writes an edgepipe export (edgepipe export --out FILE) into the configured
job store, which must be empty: migrated, with no rows in any table (run
edgepipe migrate on a new database first, or let import migrate it). Every
row keeps its ids, timestamps and statuses; id sequences are set past the
largest imported id, so SSE cursors (event ids) and dead-letter ids stay
valid. Everything is written in one transaction: on any error nothing is
kept, and the import can simply be run again. Run edgepipe check before the
export and after the import. "-" reads standard input.

Exit status: 0 imported; 1 any other error (nothing written); 2 wrong flags;
9 the target job store is not empty (nothing written); 10 the file is not a
complete edgepipe export, or holds columns the target's schema lacks
(nothing written).`)
	fs.SetOutput(e.stderr)
	in := fs.String("in", "", "export file to read (required; - for standard input)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos); err != nil {
		return err
	}
	if *in == "" {
		return fmt.Errorf("%w: --in FILE is required (edgepipe import --help)", errUsage)
	}
	cfg, log, err := e.loadConfig()
	if err != nil {
		return err
	}
	r := e.stdin
	if *in != "-" {
		f, err := os.Open(*in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	sum, err := app.Import(ctx, cfg, log, r)
	switch {
	case errors.Is(err, transfer.ErrNotEmpty):
		return &codedError{code: exitNotEmpty, err: err}
	case errors.Is(err, transfer.ErrFormat), errors.Is(err, transfer.ErrIncompatible):
		return &codedError{code: exitBadExport, err: err}
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "imported %d rows (from a %s store, schema %d) into the %s job store\n",
		sum.Total(), sum.Driver, sum.SchemaVersion, cfg.DatabaseKind())
	return nil
}
