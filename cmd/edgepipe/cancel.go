package main

import (
	"context"
	"fmt"

	"edgepipe/pipeline"
)

func init() {
	register("cancel", "request a job's cancellation",
		func(ctx context.Context, args []string) error { return osEnv().cancel(ctx, args) })
}

func (e *cliEnv) cancel(ctx context.Context, args []string) error {
	fs := newFlags("cancel", "ID [--json]", `
Requests cancellation (POST /v1/jobs/{id}/cancellation). A job nobody is
working on is canceled at once; a running job stops at its next boundary
(before a provider call, a render or an upload). Repeating is harmless. A job
that already finished is an error (exit status 1).`)
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
	j, err := c.Cancel(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, j)
	}
	if j.Status == pipeline.StatusCanceled {
		fmt.Fprintf(e.stdout, "job %s canceled\n", clean(j.ID, 64))
		return nil
	}
	fmt.Fprintf(e.stdout, "cancellation of job %s requested; it is %s and stops at its next boundary\n", clean(j.ID, 64), clean(string(j.Status), 32))
	return nil
}
