package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"edgepipe/api"
	"edgepipe/client"
	"edgepipe/pipeline"
)

func dlqServer(t *testing.T) (*testCLI, *recorder) {
	t.Helper()
	next := int64(7)
	redriven := t0.Add(time.Minute)
	srv, rec := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testAdminToken {
			respondProblem(w, 401, "unauthorized", "Missing or invalid credentials", "")
			return
		}
		switch {
		case r.Method == "GET" && r.URL.Path == "/v1/admin/dead-letters":
			page := api.DeadLetterList{DeadLetters: []api.DeadLetter{
				{ID: 9, JobID: "v3-x", Queue: "render-v3", Reason: "unbound_version", Detail: "v3 is not served", DeadLetteredAt: t0},
				{ID: 8, JobID: "v2-y", Queue: "render-v2", Reason: "retries_exhausted", Detail: "5 attempts", DeadLetteredAt: t0,
					Bound: true, RedrivenAt: &redriven, RedrivenToQueue: "render-v2"},
			}, NextAfter: &next}
			if r.URL.Query().Get("include_redriven") != "true" {
				page.DeadLetters, page.NextAfter = page.DeadLetters[:1], nil
			}
			respondJSON(w, 200, page)
		case r.Method == "POST" && r.URL.Path == "/v1/admin/dead-letters/8/redrive":
			if r.Header.Get("Content-Type") != "application/json" {
				respondProblem(w, 415, "unsupported_media_type", "Unsupported content type", "send JSON")
				return
			}
			j := api.AdminJob{JobResource: jobResource("v2-y", pipeline.StatusPending), Tenant: "acme"}
			j.Version = "v2"
			respondJSON(w, 200, j)
		case r.Method == "POST" && r.URL.Path == "/v1/admin/dead-letters/9/redrive":
			respondProblem(w, 409, "version_unbound", "Workflow version not bound", "bind it, then redrive")
		default:
			respondProblem(w, 404, "not_found", "Not found", "no such resource")
		}
	}))
	return newTestCLI(t, srv.URL, "EDGEPIPE_ADMIN_TOKEN", testAdminToken), rec
}

func TestDLQList(t *testing.T) {
	t.Parallel()
	c, rec := dlqServer(t)
	if err := c.dlq(context.Background(), []string{"list"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID  JOB   REASON") ||
		!strings.HasPrefix(lines[1], "9   v3-x  unbound_version  render-v3  2026-11-29T12:00:00Z  no     -        v3 is not served") {
		t.Errorf("dlq list:\n%s", c.out)
	}
	if q := rec.find("GET", "/v1/admin/dead-letters")[0].Query; q != "limit=100" {
		t.Errorf("query %q", q)
	}

	c, rec = dlqServer(t)
	if err := c.dlq(context.Background(), []string{"list", "--all", "--limit", "2", "--after", "10"}); err != nil {
		t.Fatal(err)
	}
	out := c.out.String()
	if !strings.Contains(out, "yes    2026-11-29T12:01:00Z → render-v2") || !strings.HasSuffix(out, "more: edgepipe dlq list --all --limit 2 --after 7\n") {
		t.Errorf("dlq list --all:\n%s", out)
	}
	if q := rec.find("GET", "/v1/admin/dead-letters")[0].Query; q != "after=10&include_redriven=true&limit=2" {
		t.Errorf("query %q", q)
	}

	c, _ = dlqServer(t)
	if err := c.dlq(context.Background(), []string{"list", "--json", "--all"}); err != nil {
		t.Fatal(err)
	}
	var page api.DeadLetterList
	if err := json.Unmarshal(c.out.Bytes(), &page); err != nil || len(page.DeadLetters) != 2 || *page.NextAfter != 7 {
		t.Errorf("--json: %v %s", err, c.out)
	}
}

func TestDLQRedrive(t *testing.T) {
	t.Parallel()
	c, rec := dlqServer(t)
	if err := c.dlq(context.Background(), []string{"redrive", "8"}); err != nil {
		t.Fatal(err)
	}
	if got := c.out.String(); got != "dead letter 8 redriven: job v2-y (tenant acme, v2) is pending again\n" {
		t.Errorf("stdout %q", got)
	}
	if reqs := rec.find("POST", "/v1/admin/dead-letters/8/redrive"); len(reqs) != 1 || reqs[0].Body != "{}" {
		t.Errorf("requests %+v", rec.all())
	}

	c, _ = dlqServer(t)
	err := c.dlq(context.Background(), []string{"redrive", "9"})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 409 || err.Error() != "Workflow version not bound: bind it, then redrive (version_unbound)" {
		t.Errorf("err = %v", err)
	}
	if c.out.Len() != 0 {
		t.Errorf("stdout on failure: %q", c.out)
	}

	// The tenant token is never sent to the operator endpoints.
	c, _ = dlqServer(t)
	c.env["EDGEPIPE_ADMIN_TOKEN"] = ""
	c.environ = []string{"EDGEPIPE_TOKEN=" + testToken}
	err = c.dlq(context.Background(), []string{"list"})
	if err == nil || !errors.Is(err, errNoToken) {
		t.Errorf("without an admin token: %v", err)
	}
}
