package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"edgepipe/internal/app"
	"edgepipe/pipeline"
)

func init() {
	register("sweep", "remove objects no asset row or live claim refers to, and stale multipart uploads",
		func(ctx context.Context, args []string) error { return osEnv().sweep(ctx, args) })
}

func (e *cliEnv) sweep(ctx context.Context, args []string) error {
	fs := newFlags("sweep", "[--dry-run] [--grace 1h] [--json]", `
Deletes objects under edgepipe's prefixes (units/, renders/) that have no
asset row and no live claim and are older than the grace period, drops claims
of dead attempts, aborts stale multipart uploads, and deletes dead letters
redriven or discarded longer than EDGEPIPE_DLQ_RETENTION ago (default 720h;
0 keeps them; jobs and their events are never deleted). serve runs this
every EDGEPIPE_SWEEP_INTERVAL.

--dry-run lists the orphans that would be deleted and changes nothing; it
does not inspect stale claims or multipart uploads (only a real sweep
counts those, as it removes them).`)
	fs.SetOutput(e.stderr)
	dry := fs.Bool("dry-run", false, "report the orphans that would be deleted; remove nothing")
	// Zero is a valid grace (remove everything unreferenced now), so
	// whether the flag was given is read from the flag set, not from a
	// sentinel default that --help would print as "(default -1ns)".
	var grace time.Duration
	fs.DurationVar(&grace, "grace", 0, "minimum age of what is removed (default $EDGEPIPE_SWEEP_GRACE, else 1h)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
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
	g := cfg.SweepGrace
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "grace" {
			g = grace
		}
	})
	if g < 0 {
		return fmt.Errorf("%w: --grace must not be negative", errUsage)
	}
	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: a.Store, Objects: a.Objects, Grace: max(g, time.Nanosecond), DryRun: *dry, Logger: log,
		DeadLetters: a.Store, DeadLetterRetention: cfg.SweeperRetention()})
	if err != nil {
		return err
	}
	rep, err := sw.Sweep(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(e.stdout).Encode(rep)
	}
	if *dry {
		fmt.Fprintf(e.stdout, "dry run: scanned %d objects; would delete %d orphans; stale claims, uploads and settled dead letters not inspected (a real sweep removes them)\n",
			rep.Scanned, len(rep.Orphans))
	} else {
		fmt.Fprintf(e.stdout, "scanned %d objects; deleted %d orphans; dropped %d stale claims; aborted %d stale uploads; deleted %d settled dead letters\n",
			rep.Scanned, len(rep.Orphans), rep.StaleClaims, rep.AbortedUploads, rep.DeadLettersPurged)
	}
	for _, k := range rep.Orphans {
		fmt.Fprintln(e.stdout, "  "+clean(k, 1024))
	}
	return nil
}
