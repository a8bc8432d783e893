package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

// failingStore answers every call with err once armed: context deadlines
// (a busy database) and plain failures.
type failingStore struct {
	Store
	err error
}

func (f *failingStore) CreateJob(ctx context.Context, nj pipeline.NewJob) (pipeline.Job, bool, error) {
	if f.err != nil {
		return pipeline.Job{}, false, f.err
	}
	return f.Store.CreateJob(ctx, nj)
}

func (f *failingStore) GetTenantJob(ctx context.Context, tenant, id string) (pipeline.Job, error) {
	if f.err != nil {
		return pipeline.Job{}, f.err
	}
	return f.Store.GetTenantJob(ctx, tenant, id)
}

func (f *failingStore) ListJobs(ctx context.Context, lf pipeline.ListFilter) ([]pipeline.Job, pipeline.Cursor, error) {
	if f.err != nil {
		return nil, pipeline.Cursor{}, f.err
	}
	return f.Store.ListJobs(ctx, lf)
}

func (f *failingStore) RequestCancel(ctx context.Context, tenant, id string) (pipeline.Job, error) {
	if f.err != nil {
		return pipeline.Job{}, f.err
	}
	return f.Store.RequestCancel(ctx, tenant, id)
}

func (f *failingStore) Decide(ctx context.Context, p *pipeline.DecideParams) (pipeline.Job, error) {
	if f.err != nil {
		return pipeline.Job{}, f.err
	}
	return f.Store.Decide(ctx, p)
}

func (f *failingStore) ListDeadLetters(ctx context.Context, incl bool, after int64, limit int) ([]pipeline.DeadLetter, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.Store.ListDeadLetters(ctx, incl, after, limit)
}

func (f *failingStore) FindDeadLetters(ctx context.Context, df pipeline.DeadLetterFilter, limit int) ([]pipeline.DeadLetter, bool, error) {
	if f.err != nil {
		return nil, false, f.err
	}
	return f.Store.FindDeadLetters(ctx, df, limit)
}

func (f *failingStore) GetDeadLetter(ctx context.Context, id int64) (pipeline.DeadLetter, error) {
	if f.err != nil {
		return pipeline.DeadLetter{}, f.err
	}
	return f.Store.GetDeadLetter(ctx, id)
}

func (f *failingStore) JobStory(ctx context.Context, p *pipeline.JobStoryParams) (pipeline.JobStory, error) {
	if f.err != nil {
		return pipeline.JobStory{}, f.err
	}
	return f.Store.JobStory(ctx, p)
}

func (f *failingStore) CountByStatus(ctx context.Context) (map[pipeline.Status]int, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.Store.CountByStatus(ctx)
}

// When the store does not answer in time, every operation that reads it
// answers 503 unavailable with Retry-After — documented for each of them —
// and any other store failure is a 500 that names no cause.
func TestStoreFailuresAreProblems(t *testing.T) {
	t.Parallel()
	fs := &failingStore{}
	e := newEnv(t, func(c *Config) { fs.Store = c.Store; c.Store = fs })
	j := e.mustSubmit(t, tokAcme, "k1")
	tenant := map[string]string{"Authorization": "Bearer " + tokAcme}
	adminHdr := map[string]string{"Authorization": "Bearer " + tokAdmin}
	adminJSONHdr := map[string]string{"Authorization": "Bearer " + tokAdmin, "Content-Type": "application/json"}
	reqs := []req{
		{method: http.MethodPost, path: "/v1/jobs", body: validBody, hdr: submitHeaders(tokAcme, "k2")},
		{method: http.MethodGet, path: "/v1/jobs", hdr: tenant},
		{method: http.MethodGet, path: "/v1/jobs/" + j.ID, hdr: tenant},
		{method: http.MethodGet, path: "/v1/jobs/" + j.ID + "/events", hdr: tenant},
		{method: http.MethodPost, path: "/v1/jobs/" + j.ID + "/cancellation", hdr: tenant},
		{method: http.MethodGet, path: "/v1/jobs/" + j.ID + "/result", hdr: tenant},
		{method: http.MethodGet, path: "/v1/admin/jobs", hdr: adminHdr},
		{method: http.MethodPost, path: "/v1/admin/jobs/" + j.ID + "/decision", body: `{"decision":"retry"}`, hdr: adminJSONHdr},
		{method: http.MethodGet, path: "/v1/admin/dead-letters", hdr: adminHdr},
		{method: http.MethodPost, path: "/v1/admin/dead-letters/1/redrive", hdr: adminHdr},
		{method: http.MethodPost, path: "/v1/admin/dead-letters/1/discard", body: `{"reason":"x"}`, hdr: adminJSONHdr},
		{method: http.MethodPost, path: "/v1/admin/dead-letters/redrive", body: `{"filter":{"tenant":"acme"}}`, hdr: adminJSONHdr},
		{method: http.MethodPost, path: "/v1/admin/dead-letters/discard", body: `{"filter":{"tenant":"acme"},"reason":"x"}`, hdr: adminJSONHdr},
		{method: http.MethodGet, path: "/admin", hdr: adminHdr},
		{method: http.MethodGet, path: "/v1/admin/jobs/" + j.ID, hdr: adminHdr},
		{method: http.MethodGet, path: "/admin/jobs/" + j.ID, hdr: adminHdr},
		{method: http.MethodGet, path: "/metrics"},
	}
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("sqlite: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, "unavailable"},
		{errors.New("disk I/O error at page 7"), http.StatusInternalServerError, "internal_error"},
	} {
		fs.err = tc.err
		for _, r := range reqs {
			w := e.do(t, r)
			if w.Code != tc.status {
				t.Fatalf("%s %s with %v: %d %s", r.method, r.path, tc.err, w.Code, w.Body)
			}
			p := problemOf(t, w)
			if p.Code != tc.code || p.RequestID == "" || strings.Contains(w.Body.String(), "sqlite") || strings.Contains(w.Body.String(), "disk") {
				t.Fatalf("%s %s: %+v", r.method, r.path, p)
			}
			if (tc.status == http.StatusServiceUnavailable) != (w.Header().Get("Retry-After") != "") {
				t.Fatalf("%s %s: %d with Retry-After %q", r.method, r.path, w.Code, w.Header().Get("Retry-After"))
			}
		}
	}
}
