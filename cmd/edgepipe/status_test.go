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

func TestStatusPrintsTheJob(t *testing.T) {
	t.Parallel()
	next := t0.Add(12 * time.Second)
	retrying := jobResource("v1-retry", pipeline.StatusRetryWait)
	retrying.Attempts = 2
	retrying.NextRetryAt = &next
	retrying.Progress = api.Progress{UnitsTotal: 4, UnitsDone: 3, Stage: "prepare"}
	retrying.Error = &api.JobError{Class: pipeline.ClassTransient, Code: "provider_timeout", Message: "the image provider timed out"}
	done := succeededJob("v1-done", []byte("mp4"))

	for _, tc := range []struct {
		job  api.JobResource
		want []string
	}{
		{retrying, []string{"job        v1-retry\n", "status     retry_wait\n", "attempts   2\n", "progress   3/4 scenes, last stage prepare\n",
			"next try   2026-11-29T12:00:12Z (in 2s)\n", "error      provider_timeout [transient]: the image provider timed out\n"}},
		{done, []string{"status     succeeded\n", "result     renders/v1/ab/abcdef.mp4\n",
			"           3 bytes, 5.000s, sha256 " + done.Result.SHA256 + "\n"}},
	} {
		t.Run(tc.job.ID, func(t *testing.T) {
			t.Parallel()
			srv, rec := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				respondJSON(w, 200, tc.job)
			}))
			c := newTestCLI(t, srv.URL)
			c.now = func() time.Time { return t0.Add(10 * time.Second) }
			if err := c.status(context.Background(), []string{tc.job.ID}); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(c.out.String(), w) {
					t.Errorf("status lacks %q:\n%s", w, c.out)
				}
			}
			if reqs := rec.find("GET", "/v1/jobs/"+tc.job.ID); len(reqs) != 1 {
				t.Errorf("requests: %+v", rec.all())
			}
		})
	}
}

func TestStatusJSONAndNotFound(t *testing.T) {
	t.Parallel()
	srv, _ := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/jobs/v1-here" {
			respondJSON(w, 200, jobResource("v1-here", pipeline.StatusRunning))
			return
		}
		respondProblem(w, 404, "not_found", "Not found", "no such resource")
	}))
	c := newTestCLI(t, srv.URL)
	if err := c.status(context.Background(), []string{"v1-here", "--json"}); err != nil {
		t.Fatal(err)
	}
	var j api.JobResource
	if err := json.Unmarshal(c.out.Bytes(), &j); err != nil || j.ID != "v1-here" || j.Status != pipeline.StatusRunning {
		t.Errorf("--json: %v %s", err, c.out)
	}
	c = newTestCLI(t, srv.URL)
	err := c.status(context.Background(), []string{"v1-gone"})
	var ae *client.APIError
	if !errors.As(err, &ae) || err.Error() != "Not found: no such resource (not_found)" {
		t.Errorf("err = %v", err)
	}
}
