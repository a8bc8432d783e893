package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"edgepipe/client"
)

func init() {
	register("dlq", "list dead letters; redrive or discard one, or many by filter (operator token)",
		func(ctx context.Context, args []string) error { return osEnv().dlq(ctx, args) })
}

const dlqHelp = `
Operator commands for the dead-letter queue; they use the operator token
(--token, EDGEPIPE_ADMIN_TOKEN, or $EDGEPIPE_DATA_DIR/dev-admin-token).

  dlq list [--all] [--limit N] [--after ID] [--json]
      Dead letters, newest first (GET /v1/admin/dead-letters). BOUND says
      whether the job's version is served now, i.e. whether a redrive can
      succeed. --all includes settled ones (redriven or discarded).
  dlq redrive DEAD_LETTER_ID [--json]
      Puts the job back on its own version's queue (POST
      /v1/admin/dead-letters/{id}/redrive). A version that is still not
      bound is refused (version_unbound) and nothing changes.
  dlq discard DEAD_LETTER_ID --reason TEXT [--json]
      Settles the dead letter without a redrive (POST
      /v1/admin/dead-letters/{id}/discard): the job stays dead_lettered,
      stops asking for an operator, and the discard is recorded with the
      reason in its events.
  dlq redrive --filter F [--limit N] [--dry-run] [--json]
  dlq discard --filter F --reason TEXT [--limit N] [--dry-run] [--json]
      The same for every open dead letter the filter selects, oldest first,
      at most --limit per run (POST /v1/admin/dead-letters/redrive and
      /discard). F is comma-separated key=value pairs, all of which must
      match: reason=unbound_version|poison|retries_exhausted|
      infrastructure_unavailable, version=v2, tenant=NAME, older-than=72h
      (a duration or whole days: 7d; older-than=0s selects every open dead
      letter). Prints how many matched and each one's outcome; dead
      letters of a version still not bound are skipped by a redrive.

Settled dead letters (redriven or discarded) are deleted after
EDGEPIPE_DLQ_RETENTION by the server's sweeper (and by edgepipe sweep);
jobs and their events are kept.`

func (e *cliEnv) dlq(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fs := newFlags("dlq", "list|redrive|discard ...", dlqHelp)
		fs.SetOutput(e.stderr)
		fs.Usage()
		if len(args) == 0 {
			return fmt.Errorf("%w: missing list, redrive or discard", errUsage)
		}
		return nil
	}
	switch args[0] {
	case "list":
		return e.dlqList(ctx, args[1:])
	case "redrive":
		return e.dlqAct(ctx, false, args[1:])
	case "discard":
		return e.dlqAct(ctx, true, args[1:])
	}
	return fmt.Errorf("%w: unknown dlq command %q (want list, redrive or discard)", errUsage, args[0])
}

func (e *cliEnv) dlqList(ctx context.Context, args []string) error {
	fs := newFlags("dlq list", "[--all] [--limit N] [--after ID] [--json]", `
Lists dead letters, newest first. Without --all only open ones (neither
redriven nor discarded).`)
	fs.SetOutput(e.stderr)
	cf := addClientFlags(fs, true)
	all := fs.Bool("all", false, "include dead letters already redriven or discarded")
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
	fmt.Fprintln(tw, "ID\tJOB\tREASON\tQUEUE\tDEAD-LETTERED\tBOUND\tSETTLED\tDETAIL")
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
		if d.DiscardedAt != nil {
			redriven = "discarded " + d.DiscardedAt.UTC().Format(time.RFC3339) + " by " + clean(d.DiscardedBy, 64) + ": " + clean(d.DiscardReason, 80)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, clean(d.JobID, keyLimit), clean(d.Reason, 32),
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

// parseDLQFilter reads --filter's key=value pairs.
func parseDLQFilter(v string) (client.DeadLetterFilter, error) {
	var f client.DeadLetterFilter
	seen := map[string]bool{}
	for part := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		if !ok || val == "" {
			return f, fmt.Errorf("%w: --filter: %q is not key=value (keys: reason, version, tenant, older-than)", errUsage, part)
		}
		if seen[k] {
			return f, fmt.Errorf("%w: --filter: %s given twice", errUsage, k)
		}
		seen[k] = true
		switch k {
		case "reason":
			f.Reason = val
		case "version":
			f.Version = val
		case "tenant":
			f.Tenant = val
		case "older-than", "older_than":
			f.OlderThan = val
		default:
			return f, fmt.Errorf("%w: --filter: unknown key %q (keys: reason, version, tenant, older-than)", errUsage, k)
		}
	}
	return f, nil
}

func (e *cliEnv) dlqAct(ctx context.Context, discard bool, args []string) error {
	a, err := e.parseDLQAct(discard, args)
	if err != nil {
		return err
	}
	c, err := e.newClient(a.client, true)
	if err != nil {
		return err
	}
	if a.bulk {
		return e.dlqActBulk(ctx, c, a)
	}
	return e.dlqActOne(ctx, c, a)
}

// dlqAction is a parsed `dlq redrive` or `dlq discard`: one dead letter
// (id) or every open one the filter selects (bulk).
type dlqAction struct {
	discard, bulk bool
	id            int64
	filter        client.DeadLetterFilter
	opts          client.BulkOptions
	reason        string
	asJSON        bool
	client        clientFlags
}

func (e *cliEnv) parseDLQAct(discard bool, args []string) (dlqAction, error) {
	a := dlqAction{discard: discard}
	name, usage, what := "dlq redrive", "DEAD_LETTER_ID | --filter F [--limit N] [--dry-run] [--json]", `
Redrives a dead letter, or every open one --filter selects: its job goes
back to its own version's queue, as pending. A dead letter is settled
(redriven or discarded) at most once.`
	if discard {
		name, usage, what = "dlq discard", "DEAD_LETTER_ID --reason TEXT | --filter F --reason TEXT [--limit N] [--dry-run] [--json]", `
Discards a dead letter, or every open one --filter selects: the dead
letter is settled without a redrive, its job stays dead_lettered and no
longer asks for an operator; the reason is recorded in the job's events.`
	}
	fs := newFlags(name, usage, what+`

--filter is comma-separated key=value pairs that must all match:
reason=..., version=v2, tenant=NAME, older-than=72h (or 7d; 0s selects
every open dead letter).`)
	fs.SetOutput(e.stderr)
	a.client = addClientFlags(fs, true)
	filter := fs.String("filter", "", "act on every open dead letter matching reason=,version=,tenant=,older-than= (comma-separated)")
	limit := fs.Int("limit", 100, "with --filter: at most this many per run, oldest first (1-500)")
	dry := fs.Bool("dry-run", false, "with --filter: say what would be done; change nothing")
	reason := new(string)
	if discard {
		reason = fs.String("reason", "", "why (required); recorded with the discard")
	}
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return a, err
	}
	a.bulk, a.asJSON, a.reason = *filter != "", *asJSON, *reason
	if err := checkDLQActArgs(fs, pos, a); err != nil {
		return a, err
	}
	if a.bulk {
		if a.filter, err = parseDLQFilter(*filter); err != nil {
			return a, err
		}
		if *limit < 1 || *limit > 500 {
			return a, fmt.Errorf("%w: --limit must be from 1 to 500", errUsage)
		}
		a.opts = client.BulkOptions{Limit: *limit, DryRun: *dry}
		return a, nil
	}
	a.id, err = strconv.ParseInt(pos[0], 10, 64)
	if err != nil || a.id < 1 {
		return a, fmt.Errorf("%w: DEAD_LETTER_ID must be a positive whole number (edgepipe dlq list shows them), got %q", errUsage, pos[0])
	}
	return a, nil
}

// checkDLQActArgs refuses a DEAD_LETTER_ID together with --filter (or
// neither), the bulk flags without --filter, and a bad discard reason.
func checkDLQActArgs(fs *flag.FlagSet, pos []string, a dlqAction) error {
	if a.bulk {
		if err := wantArgs(fs, pos); err != nil {
			return fmt.Errorf("%w (give a DEAD_LETTER_ID or --filter, not both)", err)
		}
	} else {
		if err := wantArgs(fs, pos, "DEAD_LETTER_ID"); err != nil {
			return fmt.Errorf("%w (or --filter)", err)
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["limit"] || set["dry-run"] {
			return fmt.Errorf("%w: --limit and --dry-run go with --filter", errUsage)
		}
	}
	if a.discard {
		if r := strings.TrimSpace(a.reason); r == "" || r != a.reason || len(r) > 1000 {
			return fmt.Errorf("%w: --reason is required, must not start or end with spaces and is at most 1000 bytes", errUsage)
		}
	}
	return nil
}

func (e *cliEnv) dlqActBulk(ctx context.Context, c *apiClient, a dlqAction) error {
	var r client.DeadLetterBulkResult
	var err error
	if a.discard {
		r, err = c.DiscardDeadLetters(ctx, a.filter, a.reason, a.opts)
	} else {
		r, err = c.RedriveDeadLetters(ctx, a.filter, a.opts)
	}
	if err != nil {
		return err
	}
	if a.asJSON {
		return writeJSON(e.stdout, r)
	}
	return e.printBulk(r)
}

func (e *cliEnv) dlqActOne(ctx context.Context, c *apiClient, a dlqAction) error {
	if a.discard {
		d, err := c.DiscardDeadLetter(ctx, a.id, a.reason)
		if err != nil {
			return err
		}
		if a.asJSON {
			return writeJSON(e.stdout, d)
		}
		fmt.Fprintf(e.stdout, "dead letter %d discarded: job %s (tenant %s, %s) stays dead_lettered\n", a.id, clean(d.JobID, keyLimit),
			clean(d.Tenant, 64), firstNonEmpty(clean(d.Version, 16), "no version"))
		return nil
	}
	j, err := c.Redrive(ctx, a.id)
	if err != nil {
		return err
	}
	if a.asJSON {
		return writeJSON(e.stdout, j)
	}
	fmt.Fprintf(e.stdout, "dead letter %d redriven: job %s (tenant %s, %s) is %s again\n", a.id, clean(j.ID, keyLimit), clean(j.Tenant, 64),
		firstNonEmpty(clean(j.Version, 16), "no version"), clean(string(j.Status), 32))
	return nil
}

func (e *cliEnv) printBulk(r client.DeadLetterBulkResult) error {
	done := map[string]string{"redrive": "redriven", "discard": "discarded"}[r.Action]
	prefix := ""
	if r.DryRun {
		prefix, done = "dry run: ", "would be "+done
	}
	fmt.Fprintf(e.stdout, "%s%s: %d matched, %d %s, %d skipped\n", prefix, clean(r.Action, 16), r.Matched, r.Done, done, r.Skipped)
	if len(r.Items) > 0 {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tJOB\tTENANT\tVERSION\tREASON\tOUTCOME")
		for _, it := range r.Items {
			out := clean(it.Outcome, 32)
			if it.Code != "" {
				out += " (" + clean(it.Code, 32) + ")"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", it.DeadLetterID, clean(it.JobID, keyLimit), clean(it.Tenant, 64),
				firstNonEmpty(clean(it.Version, 16), "-"), clean(it.Reason, 32), out)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if r.More {
		fmt.Fprintln(e.stdout, "more dead letters match: run the command again")
	}
	return nil
}
