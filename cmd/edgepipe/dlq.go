package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"edgepipe/client"
)

func init() {
	register("dlq", "list dead letters or redrive one (operator token)",
		func(ctx context.Context, args []string) error { return osEnv().dlq(ctx, args) })
}

const dlqHelp = `
Operator commands for the dead-letter queue; they use the operator token
(--token, EDGEPIPE_ADMIN_TOKEN, or $EDGEPIPE_DATA_DIR/dev-admin-token).

  dlq list [--all] [--limit N] [--after ID] [--json]
      Dead letters, newest first (GET /v1/admin/dead-letters). BOUND says
      whether the job's version is served now, i.e. whether a redrive can
      succeed.
  dlq redrive DEAD_LETTER_ID [--json]
      Puts the job back on its own version's queue (POST
      /v1/admin/dead-letters/{id}/redrive). A version that is still not
      bound is refused (version_unbound) and nothing changes.`

func (e *cliEnv) dlq(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fs := newFlags("dlq", "list|redrive ...", dlqHelp)
		fs.SetOutput(e.stderr)
		fs.Usage()
		if len(args) == 0 {
			return fmt.Errorf("%w: missing list or redrive", errUsage)
		}
		return nil
	}
	switch args[0] {
	case "list":
		return e.dlqList(ctx, args[1:])
	case "redrive":
		return e.dlqRedrive(ctx, args[1:])
	}
	return fmt.Errorf("%w: unknown dlq command %q (want list or redrive)", errUsage, args[0])
}

func (e *cliEnv) dlqList(ctx context.Context, args []string) error {
	fs := newFlags("dlq list", "[--all] [--limit N] [--after ID] [--json]", `
Lists dead letters, newest first. Without --all only those not yet redriven.`)
	fs.SetOutput(e.stderr)
	cf := addClientFlags(fs, true)
	all := fs.Bool("all", false, "include dead letters already redriven")
	limit := fs.Int("limit", 100, "at most this many (1-500)")
	after := fs.Int64("after", 0, "continue below this dead letter id (the \"more\" hint of the previous page)")
	asJSON := fs.Bool("json", false, "print the page as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos); err != nil {
		return err
	}
	c, err := e.newClient(cf, true)
	if err != nil {
		return err
	}
	page, err := c.DeadLetters(ctx, client.DeadLetterOptions{IncludeRedriven: *all, After: *after, Limit: *limit})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, page)
	}
	if len(page.DeadLetters) == 0 {
		if *all {
			fmt.Fprintln(e.stdout, "no dead letters")
		} else {
			fmt.Fprintln(e.stdout, "no open dead letters")
		}
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tJOB\tREASON\tQUEUE\tDEAD-LETTERED\tBOUND\tREDRIVEN\tDETAIL")
	for _, d := range page.DeadLetters {
		bound, redriven := "no", "-"
		if d.Bound {
			bound = "yes"
		}
		if d.RedrivenAt != nil {
			redriven = d.RedrivenAt.UTC().Format(time.RFC3339)
			if d.RedrivenToQueue != "" {
				redriven += " → " + clean(d.RedrivenToQueue, 40)
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, clean(d.JobID, 64), clean(d.Reason, 32),
			firstNonEmpty(clean(d.Queue, 40), "-"), d.DeadLetteredAt.UTC().Format(time.RFC3339), bound, redriven, clean(d.Detail, 120))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextAfter != nil {
		more := "edgepipe dlq list"
		if *all {
			more += " --all"
		}
		if *limit != 100 {
			more += " --limit " + strconv.Itoa(*limit)
		}
		fmt.Fprintf(e.stdout, "more: %s --after %d\n", more, *page.NextAfter)
	}
	return nil
}

func (e *cliEnv) dlqRedrive(ctx context.Context, args []string) error {
	fs := newFlags("dlq redrive", "DEAD_LETTER_ID [--json]", `
Redrives a dead letter: its job goes back to its own version's queue, as
pending. A dead letter is redriven at most once.`)
	fs.SetOutput(e.stderr)
	cf := addClientFlags(fs, true)
	asJSON := fs.Bool("json", false, "print the job as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, "DEAD_LETTER_ID"); err != nil {
		return err
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || id < 1 {
		return fmt.Errorf("%w: DEAD_LETTER_ID must be a positive whole number (edgepipe dlq list shows them), got %q", errUsage, pos[0])
	}
	c, err := e.newClient(cf, true)
	if err != nil {
		return err
	}
	j, err := c.Redrive(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, j)
	}
	fmt.Fprintf(e.stdout, "dead letter %d redriven: job %s (tenant %s, %s) is %s again\n", id, clean(j.ID, 64), clean(j.Tenant, 64),
		firstNonEmpty(clean(j.Version, 16), "no version"), clean(string(j.Status), 32))
	return nil
}
