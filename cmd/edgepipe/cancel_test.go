package main

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"edgepipe/client"
	"edgepipe/pipeline"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	srv, rec := serveCanned(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/jobs/v1-pending/cancellation":
			respondJSON(w, http.StatusAccepted, jobResource("v1-pending", pipeline.StatusCanceled))
		case "/v1/jobs/v1-running/cancellation":
			respondJSON(w, http.StatusAccepted, jobResource("v1-running", pipeline.StatusRunning))
		case "/v1/jobs/v1-done/cancellation":
			respondProblem(w, http.StatusConflict, "job_terminal", "The job has already finished", "the job has already finished and cannot change")
		default:
			respondProblem(w, 404, "not_found", "Not found", "no such resource")
		}
	}))
	for _, tc := range []struct {
		id, out, err string
	}{
		{"v1-pending", "job v1-pending canceled\n", ""},
		{"v1-running", "cancellation of job v1-running requested; it is running and stops at its next boundary\n", ""},
		{"v1-done", "", "The job has already finished: the job has already finished and cannot change (job_terminal)"},
		{"v1-nope", "", "Not found: no such resource (not_found)"},
	} {
		c := newTestCLI(t, srv.URL)
		err := c.cancel(context.Background(), []string{tc.id})
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || err.Error() != tc.err) {
			t.Errorf("%s: err = %v, want %q", tc.id, err, tc.err)
		}
		var ae *client.APIError
		if tc.id == "v1-done" && (!errors.As(err, &ae) || ae.Status != 409) {
			t.Errorf("409 is not an *client.APIError: %#v", err)
		}
		if c.out.String() != tc.out {
			t.Errorf("%s: stdout %q, want %q", tc.id, c.out, tc.out)
		}
	}
	for _, r := range rec.all() {
		if r.Method != "POST" || r.Header.Get("Authorization") != "Bearer "+testToken {
			t.Errorf("request %s %s auth %q", r.Method, r.Path, r.Header.Get("Authorization"))
		}
	}
}
