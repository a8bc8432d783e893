package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"edgepipe/check"
	"edgepipe/internal/app"
)

func init() {
	register("check", "verify the six invariants of docs/design.md §9 against the database and object store (read-only)", checkCmd)
}

func checkCmd(ctx context.Context, args []string) error {
	fs := newFlags("check", "[--json] [--ledger URL] [--grace 0s] [--require-settled] [--skip-hash]", `
fsck for a deployment. Checks: (1) every asset row has its object with the
same size and SHA-256; (2) every object under units/ and renders/ has an
asset row or a live claim; (3) no (job, scene) has two possibly billed calls
to a non-idempotent provider (and, with --ledger, the provider's own ledger
agrees); (4) no job is stuck unsettled past its lease or retry time; (5) every
job's version and queue match its id prefix, and every stage an attempt ran
names that version's workflow; (6) every job's event log walks
the transition table and nothing moves a terminal job (except a redrive).
Prints a summary and each violation with its ids. Exit code 0 only when clean.`)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	ledger := fs.String("ledger", "", "provider ledger URL to cross-check billing (e.g. http://127.0.0.1:9090/ledger)")
	grace := fs.Duration("grace", 0, "ignore objects younger than this (uploads in flight)")
	stuck := fs.Duration("stuck-after", 10*time.Minute, "report unsettled jobs overdue by more than this")
	settled := fs.Bool("require-settled", false, "report every job not terminal or needs_review")
	skipHash := fs.Bool("skip-hash", false, "trust stored SHA-256 digests instead of reading every object")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	rep, err := check.Run(ctx, check.Config{Store: a.Store, Objects: a.Objects, LedgerURL: *ledger, Grace: *grace,
		StuckAfter: *stuck, RequireSettled: *settled, SkipHash: *skipHash})
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Printf("checked %d jobs, %d events, %d assets, %d objects (ledger: %v): %d violations\n",
			rep.Jobs, rep.Events, rep.Assets, rep.Objects, rep.Ledger, len(rep.Violations))
		for _, v := range rep.Violations {
			fmt.Printf("  invariant %d (%s) %s job=%s key=%s: %s\n", v.Invariant, check.Names[v.Invariant], v.Kind, v.JobID, v.Key, v.Detail)
		}
	}
	if !rep.Clean() {
		return errExit
	}
	return nil
}
