package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"edgepipe/api"
	"edgepipe/client"
	"edgepipe/pipeline"
)

// TestReviewAgainstTheAPI (issue 12 item 11): review list shows the job
// that waits for an operator, review retry puts it back in the queue, and
// deciding again is refused; a job that fails after its retry is failed
// for good by review fail.
func TestReviewAgainstTheAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := realAPIEnv(t)
	newCLI := func() *testCLI { return newTestCLI(t, e.srv.URL, "EDGEPIPE_ADMIN_TOKEN", testAdminToken) }

	c := newCLI()
	if err := c.review(ctx, []string{"list"}); err != nil {
		t.Fatal(err)
	}
	if c.out.String() != "no jobs need an operator\n" {
		t.Errorf("empty list: %q", c.out)
	}

	c = newCLI()
	if err := c.submit(ctx, []string{demoFile}); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(c.out.String())
	// The operator commands address the job by its internal key.
	key := pipeline.JobKey("acme", id)
	e.toReview(t, e.claim(t))

	c = newCLI()
	if err := c.review(ctx, []string{"list"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "JOB") || !strings.HasPrefix(lines[1], key+"  acme    needs_review  v1       1") ||
		!strings.HasSuffix(lines[1], "provider_timeout: the speech provider did not answer; it may have billed") {
		t.Errorf("review list:\n%s", c.out)
	}
	c = newCLI()
	if err := c.review(ctx, []string{"list", "--json"}); err != nil {
		t.Fatal(err)
	}
	var page api.AdminJobList
	if err := json.Unmarshal(c.out.Bytes(), &page); err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != key || page.Jobs[0].InstanceID != id {
		t.Fatalf("review list --json: %v %s", err, c.out)
	}

	c = newCLI()
	if err := c.review(ctx, []string{"retry", key}); err != nil {
		t.Fatal(err)
	}
	if got := c.out.String(); got != "job "+key+" (tenant acme): retry recorded; it is pending\n" {
		t.Errorf("retry printed %q", got)
	}
	c = newCLI()
	err := c.review(ctx, []string{"fail", key})
	if !errors.Is(err, client.ErrInvalidTransition) || exitCode(err) != 1 ||
		err.Error() != "The job is not in a status that allows this: the job's current status does not allow this (invalid_transition)" {
		t.Fatalf("deciding a pending job: %v", err)
	}

	// The retried job needs review again; this time the operator fails it.
	e.toReview(t, e.claim(t))
	c = newCLI()
	if err := c.review(ctx, []string{"fail", key, "--json"}); err != nil {
		t.Fatal(err)
	}
	var j api.AdminJob
	if err := json.Unmarshal(c.out.Bytes(), &j); err != nil || j.ID != key || j.Status != pipeline.StatusFailed {
		t.Fatalf("fail --json: %v %s", err, c.out)
	}

	// The tenant token is not an operator token.
	c = newTestCLI(t, e.srv.URL, "EDGEPIPE_ADMIN_TOKEN", testToken)
	if err := c.review(ctx, []string{"list"}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("review with a tenant token: %v", err)
	}
}

// TestReviewSendsTheReason: --reason travels with the decision.
func TestReviewSendsTheReason(t *testing.T) {
	t.Parallel()
	srv, rec := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j := api.AdminJob{JobResource: jobResource("v1-r", pipeline.StatusFailed), Tenant: "acme"}
		respondJSON(w, 200, j)
	}))
	c := newTestCLI(t, srv.URL, "EDGEPIPE_ADMIN_TOKEN", testAdminToken)
	if err := c.review(context.Background(), []string{"fail", "v1-r", "--reason", "provider billed; refunded by hand"}); err != nil {
		t.Fatal(err)
	}
	reqs := rec.find("POST", "/v1/admin/jobs/v1-r/decision")
	if len(reqs) != 1 || reqs[0].Body != `{"decision":"fail","reason":"provider billed; refunded by hand"}` ||
		reqs[0].Header.Get("Authorization") != "Bearer "+testAdminToken {
		t.Fatalf("requests %+v", rec.all())
	}
	if got := c.out.String(); got != "job v1-r (tenant acme): fail recorded; it is failed\n" {
		t.Errorf("printed %q", got)
	}
}

func TestReviewUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing list, retry or fail"},
		{[]string{"approve", "x"}, `unknown review command "approve"`},
		{[]string{"retry"}, "missing ID"},
		{[]string{"fail", "a", "b"}, `unexpected argument "b"`},
		{[]string{"list", "extra"}, `unexpected argument "extra"`},
		{[]string{"retry", "x", "--reason", " padded"}, "--reason must not start or end with spaces"},
		{[]string{"retry", "x", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		c := newTestCLI(t, "http://127.0.0.1:1", "EDGEPIPE_ADMIN_TOKEN", testAdminToken)
		err := c.review(context.Background(), tc.args)
		if !errors.Is(err, errUsage) || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v (exit %d), want a usage error with %q", tc.args, err, exitCode(err), tc.want)
		}
	}
}
