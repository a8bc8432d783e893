package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"edgepipe/client"
	"edgepipe/pipeline"
)

// deadLetters stores dead-lettered jobs (unbound versions) straight into
// the real API's store, as a submission of an unserved version does.
func (e *apiEnv) deadLetters(t *testing.T, tenant string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		version, _, _ := strings.Cut(id, "-")
		if _, _, err := e.store.CreateJob(context.Background(), pipeline.NewJob{ID: id, Tenant: tenant, Operation: "render_video",
			IdempotencyKey: id, RequestFingerprint: "fp", Input: json.RawMessage(`{}`), Version: version,
			DeadLetterReason: pipeline.ReasonUnboundVersion, DeadLetterQueue: "render-" + version}); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *apiEnv) openDeadLetters(t *testing.T) []string {
	t.Helper()
	dls, err := e.store.ListDeadLetters(context.Background(), false, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dls {
		out = append(out, d.JobID)
	}
	return out
}

// Issue 12 item 11: edgepipe dlq discard N --reason, and dlq
// redrive|discard --filter, against the real API.
func TestDLQDiscardAndFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := realAPIEnv(t)
	e.deadLetters(t, "acme", "v3-a")
	e.deadLetters(t, "globex", "v3-b")
	e.deadLetters(t, "acme", "v2-c", "v3-d")
	cli := func() *testCLI { return newTestCLI(t, e.srv.URL, "EDGEPIPE_ADMIN_TOKEN", testAdminToken) }

	for _, args := range [][]string{
		{"discard", "1"},                                            // no reason
		{"discard", "1", "--reason", " padded"},                     // bad reason
		{"discard", "--reason", "x"},                                // neither id nor filter
		{"discard", "1", "--filter", "version=v3", "--reason", "x"}, // both
		{"redrive", "--filter", "colour=red"},                       // unknown key
		{"redrive", "--filter", "version"},                          // not key=value
		{"redrive", "--filter", "version=v2,version=v3"},
		{"redrive", "--filter", "version=v2", "--limit", "0"},
		{"redrive", "1", "--dry-run"}, // --dry-run without --filter
		{"purge"},
	} {
		if err := cli().dlq(ctx, args); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if got := e.openDeadLetters(t); len(got) != 4 {
		t.Fatalf("usage errors changed something: %v", got)
	}

	c := cli()
	if err := c.dlq(ctx, []string{"discard", "1", "--reason", "customer withdrew the order"}); err != nil {
		t.Fatal(err)
	}
	if got := c.out.String(); got != "dead letter 1 discarded: job v3-a (tenant acme, v3) stays dead_lettered\n" {
		t.Errorf("stdout %q", got)
	}
	if j, _ := e.store.GetJob(ctx, "v3-a"); j.Status != pipeline.StatusDeadLettered || j.RequiresAction {
		t.Errorf("v3-a after discard: %s %v", j.Status, j.RequiresAction)
	}
	c = cli()
	err := c.dlq(ctx, []string{"discard", "1", "--reason", "again"})
	if !errors.Is(err, client.ErrDeadLetterSettled) {
		t.Errorf("second discard: %v", err)
	}
	c = cli()
	if err := c.dlq(ctx, []string{"list", "--all"}); err != nil || !strings.Contains(c.out.String(), "discarded 2026-11-29T12:00:00Z by admin: customer withdrew the order") {
		t.Errorf("list --all: %v\n%s", err, c.out)
	}

	// A dry run by filter changes nothing; v3 is not bound, v2 is.
	c = cli()
	if err := c.dlq(ctx, []string{"redrive", "--filter", "reason=unbound_version,tenant=acme", "--dry-run"}); err != nil {
		t.Fatal(err)
	}
	out := c.out.String()
	if !strings.HasPrefix(out, "dry run: redrive: 2 matched, 1 would be redriven, 1 skipped\n") || strings.Contains(out, "v3-b") ||
		!strings.Contains(out, "v3-d  acme    v3       unbound_version  skipped (version_unbound)") ||
		!strings.Contains(out, "v2-c  acme    v2       unbound_version  would_redrive") {
		t.Errorf("dry run:\n%s", out)
	}
	if got := e.openDeadLetters(t); len(got) != 3 {
		t.Fatalf("the dry run changed something: %v", got)
	}
	c = cli()
	if err := c.dlq(ctx, []string{"redrive", "--filter", "older-than=0s"}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.out.String(), "redrive: 3 matched, 1 redriven, 2 skipped\n") {
		t.Errorf("redrive:\n%s", c.out)
	}
	if j, _ := e.store.GetJob(ctx, "v2-c"); j.Status != pipeline.StatusPending {
		t.Errorf("v2-c after redrive: %s", j.Status)
	}
	c = cli()
	if err := c.dlq(ctx, []string{"discard", "--filter", "version=v3", "--reason", "v3 was never released", "--limit", "1"}); err != nil {
		t.Fatal(err)
	}
	if out := c.out.String(); !strings.HasPrefix(out, "discard: 1 matched, 1 discarded, 0 skipped\n") ||
		!strings.HasSuffix(out, "more dead letters match: run the command again\n") {
		t.Errorf("discard --limit 1:\n%s", out)
	}
	c = cli()
	if err := c.dlq(ctx, []string{"discard", "--filter", "version=v3", "--reason", "v3 was never released", "--json"}); err != nil {
		t.Fatal(err)
	}
	var r client.DeadLetterBulkResult
	if err := json.Unmarshal(c.out.Bytes(), &r); err != nil || r.Done != 1 || r.Items[0].JobID != "v3-d" || r.More {
		t.Errorf("--json: %+v %v", r, err)
	}
	if got := e.openDeadLetters(t); len(got) != 0 {
		t.Errorf("open after all: %v", got)
	}
}
