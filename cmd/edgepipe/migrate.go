package main

import (
	"context"
	"fmt"

	"edgepipe/internal/app"
)

func init() {
	register("migrate", "create or upgrade the job store's schema (idempotent)",
		func(ctx context.Context, args []string) error { return osEnv().migrate(ctx, args) })
}

func (e *cliEnv) migrate(ctx context.Context, args []string) error {
	fs := newFlags("migrate", "", `
Applies every pending migration of the configured job store and prints its
schema version: the embedded SQLite file under EDGEPIPE_DATA_DIR, or the
Postgres database of EDGEPIPE_DATABASE_URL. Running it again changes
nothing. Processes starting at once against one Postgres migrate it once
(an advisory lock serialises them), so running migrate before rolling out a
new version is optional but keeps the schema change out of start-up.`)
	fs.SetOutput(e.stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos); err != nil {
		return err
	}
	cfg, log, err := e.loadConfig()
	if err != nil {
		return err
	}
	v, err := app.Migrate(ctx, cfg, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s job store at schema version %d\n", cfg.DatabaseKind(), v)
	return nil
}
