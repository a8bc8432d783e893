package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"edgepipe/internal/app"
	"edgepipe/pipeline"
)

func init() {
	register("sweep", "remove objects no asset row or live claim refers to, and stale multipart uploads", sweep)
}

func sweep(ctx context.Context, args []string) error {
	fs := newFlags("sweep", "[--dry-run] [--grace 1h] [--json]", `
Deletes objects under edgepipe's prefixes (units/, renders/) that have no
asset row and no live claim and are older than the grace period, drops claims
of dead attempts, and aborts stale multipart uploads. serve runs this every
EDGEPIPE_SWEEP_INTERVAL.`)
	dry := fs.Bool("dry-run", false, "report what would be removed; remove nothing")
	grace := fs.Duration("grace", -1, "minimum age of what is removed (default EDGEPIPE_SWEEP_GRACE, 1h)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	g := cfg.SweepGrace
	if *grace >= 0 {
		g = *grace
	}
	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	sw, err := pipeline.NewSweeper(pipeline.SweeperConfig{Ledger: a.Store, Objects: a.Objects, Grace: max(g, time.Nanosecond), DryRun: *dry, Logger: log})
	if err != nil {
		return err
	}
	rep, err := sw.Sweep(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(rep)
	}
	verb := "deleted"
	if *dry {
		verb = "would delete"
	}
	fmt.Printf("scanned %d objects; %s %d orphans; dropped %d stale claims; aborted %d stale uploads\n",
		rep.Scanned, verb, len(rep.Orphans), rep.StaleClaims, rep.AbortedUploads)
	for _, k := range rep.Orphans {
		fmt.Println("  " + k)
	}
	return nil
}
