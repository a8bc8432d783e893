package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"edgepipe/client"
)

func init() {
	register("review", "list jobs that need an operator, retry or fail one (operator token)",
		func(ctx context.Context, args []string) error { return osEnv().review(ctx, args) })
}

const reviewHelp = `
Operator commands for jobs that wait for a human (needs_review: a provider
call may have been billed without an answer, so nobody retries it blindly).
They use the operator token (--token, EDGEPIPE_ADMIN_TOKEN, or
$EDGEPIPE_DATA_DIR/dev-admin-token).

  review list [--limit N] [--cursor C] [--json]
      Jobs of every tenant that need an operator, newest first
      (GET /v1/admin/jobs).
  review retry ID [--reason TEXT] [--json]
      Runs the job again; what was already paid for is reused
      (POST /v1/admin/jobs/{id}/decision {"decision":"retry"}).
  review fail ID [--reason TEXT] [--json]
      Fails the job for good ({"decision":"fail"}).

A job that is not in needs_review (any more) is refused with
invalid_transition and nothing changes. The decision is recorded on the job
(its "decision": what, who, why, when) and in its events; --reason is
recorded with it, and a failed job's message becomes "failed by operator
NAME: REASON". An older server that does not record reasons refuses
--reason (an unknown field) rather than drop it silently.`

func (e *cliEnv) review(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fs := newFlags("review", "list|retry|fail ...", reviewHelp)
		fs.SetOutput(e.stderr)
		fs.Usage()
		if len(args) == 0 {
			return fmt.Errorf("%w: missing list, retry or fail", errUsage)
		}
		return nil
	}
	switch args[0] {
	case "list":
		return e.reviewList(ctx, args[1:])
	case "retry":
		return e.reviewDecide(ctx, client.DecisionRetry, args[1:])
	case "fail":
		return e.reviewDecide(ctx, client.DecisionFail, args[1:])
	}
	return fmt.Errorf("%w: unknown review command %q (want list, retry or fail)", errUsage, args[0])
}

func (e *cliEnv) reviewList(ctx context.Context, args []string) error {
	fs := newFlags("review list", "[--limit N] [--cursor C] [--json]", `
Lists the jobs of every tenant that need an operator, newest first.`)
	fs.SetOutput(e.stderr)
	cf := addClientFlags(fs, true)
	limit := fs.Int("limit", 50, "at most this many (1-500)")
	cursor := fs.String("cursor", "", "continue after the previous page (its \"more\" hint)")
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
	page, err := c.AdminJobs(ctx, client.ListOptions{Limit: *limit, Cursor: *cursor})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, page)
	}
	if len(page.Jobs) == 0 {
		fmt.Fprintln(e.stdout, "no jobs need an operator")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tTENANT\tSTATUS\tVERSION\tATTEMPTS\tSINCE\tERROR")
	for _, j := range page.Jobs {
		msg := "-"
		if j.Error != nil {
			msg = clean(j.Error.Code, 64)
			if j.Error.Message != "" {
				msg += ": " + clean(j.Error.Message, 120)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", clean(j.ID, keyLimit), clean(j.Tenant, 64), clean(string(j.Status), 32),
			firstNonEmpty(clean(j.Version, 16), "-"), j.Attempts, j.StatusChangedAt.UTC().Format(time.RFC3339), msg)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != nil {
		more := "edgepipe review list"
		if *limit != 50 {
			more += fmt.Sprintf(" --limit %d", *limit)
		}
		fmt.Fprintf(e.stdout, "more: %s --cursor %s\n", more, clean(*page.NextCursor, 200))
	}
	return nil
}

func (e *cliEnv) reviewDecide(ctx context.Context, d client.Decision, args []string) error {
	name := "review " + string(d)
	what := map[client.Decision]string{
		client.DecisionRetry: "Runs a job in needs_review again; scenes already generated (and paid for) are reused.",
		client.DecisionFail:  "Fails a job in needs_review for good.",
	}[d]
	fs := newFlags(name, "ID [--reason TEXT] [--json]", what)
	fs.SetOutput(e.stderr)
	cf := addClientFlags(fs, true)
	reason := fs.String("reason", "", "why, recorded with the decision")
	asJSON := fs.Bool("json", false, "print the job as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, "ID"); err != nil {
		return err
	}
	if r := strings.TrimSpace(*reason); r != *reason || len(r) > 1000 {
		return fmt.Errorf("%w: --reason must not start or end with spaces and is at most 1000 bytes", errUsage)
	}
	c, err := e.newClient(cf, true)
	if err != nil {
		return err
	}
	j, err := c.Decide(ctx, pos[0], d, *reason)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, j)
	}
	fmt.Fprintf(e.stdout, "job %s (tenant %s): %s recorded; it is %s\n", clean(j.ID, keyLimit), clean(j.Tenant, 64), d, clean(string(j.Status), 32))
	return nil
}
