package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

// TestReviewAgainstTheAPI: the operator lists the job that needs review,
// retries it, and cannot decide it twice; a tenant token is not an
// operator token.
func TestReviewAgainstTheAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t)
	j := mustSubmit(t, s.client(t, tokAcme), "k", board(1))
	s.toReview(t, s.claim(t))
	mustSubmit(t, s.client(t, tokGlobex), "k", board(1)) // pending: needs nobody
	adm := s.client(t, tokAdmin)

	l, err := adm.AdminJobs(ctx, ListOptions{})
	if err != nil || len(l.Jobs) != 1 {
		t.Fatalf("admin jobs: %+v %v", l, err)
	}
	a := l.Jobs[0]
	if a.ID != j.ID || a.Tenant != "acme" || a.Status != pipeline.StatusNeedsReview || a.Error == nil || a.Error.Code != "provider_timeout" {
		t.Fatalf("admin job %+v", a)
	}
	if _, err := s.client(t, tokAcme).AdminJobs(ctx, ListOptions{}); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("tenant token on the admin API: %v", err)
	}

	got, err := adm.Decide(ctx, j.ID, DecisionRetry, "")
	if err != nil || got.Status != pipeline.StatusPending || got.Tenant != "acme" {
		t.Fatalf("retry: %+v %v", got, err)
	}
	_, err = adm.Decide(ctx, j.ID, DecisionFail, "")
	if !errors.Is(err, ErrInvalidTransition) || !errors.Is(err, ErrConflict) {
		t.Fatalf("second decision: %v", err)
	}
	if _, err := adm.Decide(ctx, "v1-missing", DecisionFail, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing job: %v", err)
	}
	if _, err := adm.Decide(ctx, j.ID, Decision("maybe"), ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad decision: %v", err)
	}
	if l, err := adm.AdminJobs(ctx, ListOptions{}); err != nil || len(l.Jobs) != 0 {
		t.Fatalf("still listed after the decision: %+v %v", l, err)
	}

	// The job's story: one attempt that stopped for review, and the
	// operator's retry.
	st, err := adm.JobStory(ctx, j.ID)
	if err != nil || st.Job.ID != j.ID || st.Job.Tenant != "acme" || len(st.Attempts) != 1 ||
		st.Attempts[0].Outcome != string(pipeline.StatusNeedsReview) || len(st.Decisions) != 1 || st.Decisions[0].Action != "retry" {
		t.Fatalf("story: %+v %v", st, err)
	}
	if _, err := adm.JobStory(ctx, "v1-missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing job's story: %v", err)
	}
	if _, err := s.client(t, tokAcme).JobStory(ctx, j.ID); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("tenant token on the story: %v", err)
	}
}

// TestDecideSendsTheReason: the reason travels in the decision's body, and
// is left out when empty (a server that does not record reasons refuses
// unknown fields).
func TestDecideSendsTheReason(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	var bodies []map[string]string
	s.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		var b map[string]string
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Errorf("body %q: %v", raw, err)
		}
		bodies = append(bodies, b)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"v1-x","status":"failed","tenant":"acme"}`)
	})
	adm := s.client(t, tokAdmin)
	if _, err := adm.Decide(context.Background(), "v1-x", DecisionFail, "billed twice by the provider, refunded"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Decide(context.Background(), "v1-x", DecisionRetry, ""); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || bodies[0]["decision"] != "fail" || bodies[0]["reason"] != "billed twice by the provider, refunded" ||
		bodies[1]["decision"] != "retry" || len(bodies[1]) != 1 {
		t.Fatalf("bodies %v", bodies)
	}
	r := s.requests("/v1/admin/jobs/v1-x/decision")[0]
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Authorization") != "Bearer "+tokAdmin {
		t.Errorf("request %s %v", r.Method, r.Header)
	}
}

// TestDeadLettersAgainstTheAPI: a job of an unbound version is
// dead-lettered at submission; it is listed, and its redrive is refused
// while the version stays unbound.
func TestDeadLettersAgainstTheAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t)
	b := board(1)
	b["instance_id"] = "v3-unbound"
	j := mustSubmit(t, s.client(t, tokAcme), "k", b)
	if j.Status != pipeline.StatusDeadLettered {
		t.Fatalf("v3 job %s", j.Status)
	}
	adm := s.client(t, tokAdmin)
	l, err := adm.DeadLetters(ctx, DeadLetterOptions{})
	if err != nil || len(l.DeadLetters) != 1 || l.DeadLetters[0].JobID != "v3-unbound" || l.DeadLetters[0].Reason != "unbound_version" ||
		l.DeadLetters[0].Bound {
		t.Fatalf("dead letters %+v %v", l, err)
	}
	if l, err := adm.DeadLetters(ctx, DeadLetterOptions{IncludeRedriven: true, Limit: 1}); err != nil || len(l.DeadLetters) != 1 ||
		l.NextAfter == nil {
		t.Fatalf("page of one: %+v %v", l, err)
	}
	if l, err := adm.DeadLetters(ctx, DeadLetterOptions{After: l.DeadLetters[0].ID}); err != nil || len(l.DeadLetters) != 0 {
		t.Fatalf("after the last: %+v %v", l, err)
	}
	_, err = adm.Redrive(ctx, l.DeadLetters[0].ID)
	var ae *APIError
	if !errors.Is(err, ErrVersionUnbound) || !errors.As(err, &ae) || ae.Status != 409 || !strings.Contains(err.Error(), "(version_unbound)") {
		t.Fatalf("redrive: %v", err)
	}
	if _, err := adm.Redrive(ctx, 999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("redrive of a missing dead letter: %v", err)
	}
	if _, err := adm.DeadLetters(ctx, DeadLetterOptions{Limit: 501}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("limit 501: %v", err)
	}
}
