package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"edgepipe/api"
)

func init() {
	register("status", "show a job: status, attempts, progress, error and result",
		func(ctx context.Context, args []string) error { return osEnv().status(ctx, args) })
}

func (e *cliEnv) status(ctx context.Context, args []string) error {
	fs := newFlags("status", "ID [--json]", `
Prints the job's status, version, attempts, progress, last error and result
(GET /v1/jobs/{id}). The exit status is 0 whenever the job could be read,
whatever its status; use submit --wait to wait for an outcome.`)
	fs.SetOutput(e.stderr)
	cf := addClientFlags(fs, false)
	asJSON := fs.Bool("json", false, "print the job resource as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, "ID"); err != nil {
		return err
	}
	c, err := e.newClient(cf, false)
	if err != nil {
		return err
	}
	j, err := c.Get(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, j)
	}
	printJob(e.stdout, j, e.now())
	return nil
}

// printJob prints a job resource compactly, one "name value" line per
// field that has something to say.
func printJob(w io.Writer, j api.JobResource, now time.Time) {
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-10s %s\n", name, fmt.Sprintf(format, args...))
	}
	line("job", "%s", clean(j.ID, 64))
	line("status", "%s", clean(string(j.Status), 32))
	line("version", "%s", firstNonEmpty(clean(j.Version, 16), "none (malformed id prefix)"))
	line("attempts", "%d", j.Attempts)
	p := j.Progress
	prog := fmt.Sprintf("%d/%d scenes", p.UnitsDone, p.UnitsTotal)
	if p.Stage != "" {
		prog += ", last stage " + clean(p.Stage, 32)
	}
	line("progress", "%s", prog)
	if j.NextRetryAt != nil {
		line("next try", "%s (in %s)", j.NextRetryAt.UTC().Format(time.RFC3339), j.NextRetryAt.Sub(now).Round(time.Second))
	}
	if j.CancelRequestedAt != nil {
		line("cancel", "requested %s", j.CancelRequestedAt.UTC().Format(time.RFC3339))
	}
	if j.RequiresAction {
		line("action", "an operator must act (/admin)")
	}
	if e := j.Error; e != nil {
		msg := clean(e.Code, 64)
		if e.Class != "" {
			msg += " [" + clean(string(e.Class), 16) + "]"
		}
		if e.Message != "" {
			msg += ": " + clean(e.Message, maxPartLen)
		}
		line("error", "%s", msg)
	}
	if r := j.Result; r != nil {
		line("result", "%s", clean(r.Key, 300))
		if r.Bytes > 0 {
			line("", "%d bytes, %s, sha256 %s", r.Bytes, msString(int64(r.DurationMS)), clean(r.SHA256, 64))
		}
	}
	line("created", "%s", j.CreatedAt.UTC().Format(time.RFC3339))
	line("changed", "%s (%s ago)", j.StatusChangedAt.UTC().Format(time.RFC3339), now.Sub(j.StatusChangedAt).Round(time.Second))
}
