package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"edgepipe/routing"
)

// Every operation behind a token refuses a request without one (401 with
// WWW-Authenticate), every operator operation answers 403 while the
// operator API is disabled, and operator POSTs refuse bodies over the
// limit before reading them.
func TestEveryOperationAuthenticates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenantOps := []req{
		{method: http.MethodPost, path: "/v1/jobs", body: validBody, hdr: map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k"}},
		{method: http.MethodGet, path: "/v1/jobs"},
		{method: http.MethodGet, path: "/v1/jobs/v1-x"},
		{method: http.MethodGet, path: "/v1/jobs/v1-x/events"},
		{method: http.MethodPost, path: "/v1/jobs/v1-x/cancellation"},
		{method: http.MethodGet, path: "/v1/jobs/v1-x/result"},
	}
	adminOps := []req{
		{method: http.MethodGet, path: "/v1/admin/jobs"},
		{method: http.MethodPost, path: "/v1/admin/jobs/v1-x/decision", body: `{"decision":"fail"}`, hdr: map[string]string{"Content-Type": "application/json"}},
		{method: http.MethodGet, path: "/v1/admin/dead-letters"},
		{method: http.MethodPost, path: "/v1/admin/dead-letters/1/redrive"},
		{method: http.MethodPost, path: "/v1/admin/dead-letters/1/discard", body: `{"reason":"x"}`, hdr: map[string]string{"Content-Type": "application/json"}},
		{method: http.MethodPost, path: "/v1/admin/dead-letters/redrive", body: `{"filter":{"tenant":"acme"}}`, hdr: map[string]string{"Content-Type": "application/json"}},
		{method: http.MethodPost, path: "/v1/admin/dead-letters/discard", body: `{"filter":{"tenant":"acme"},"reason":"x"}`, hdr: map[string]string{"Content-Type": "application/json"}},
		{method: http.MethodGet, path: "/admin"},
		{method: http.MethodGet, path: "/v1/admin/jobs/v1-x"},
		{method: http.MethodGet, path: "/admin/jobs/v1-x"},
	}
	for _, r := range append(append([]req{}, tenantOps...), adminOps...) {
		for _, auth := range []string{"", "Bearer wrong-token-0123456789abcdef"} {
			h := map[string]string{}
			for k, v := range r.hdr {
				h[k] = v
			}
			if auth != "" {
				h["Authorization"] = auth
			}
			r := r
			r.hdr = h
			w := e.do(t, r)
			if w.Code != http.StatusUnauthorized || problemOf(t, w).Code != "unauthorized" || w.Header().Get("WWW-Authenticate") == "" {
				t.Fatalf("%s %s with %q: %d %v %s", r.method, r.path, auth, w.Code, w.Header(), w.Body)
			}
		}
	}
	off := newEnv(t, func(c *Config) { c.AdminToken = "" })
	for _, r := range adminOps {
		r.hdr = map[string]string{"Authorization": "Bearer " + tokAdmin, "Content-Type": r.hdr["Content-Type"]}
		if w := off.do(t, r); w.Code != http.StatusForbidden || problemOf(t, w).Code != "admin_disabled" {
			t.Fatalf("%s %s with the operator API off: %d %s", r.method, r.path, w.Code, w.Body)
		}
	}
	big := `{"decision":"retry","pad":"` + strings.Repeat("x", int(DefaultMaxBodyBytes)) + `"}`
	for _, path := range []string{"/v1/admin/jobs/v1-x/decision", "/v1/admin/dead-letters/1/redrive", "/v1/admin/dead-letters/1/discard",
		"/v1/admin/dead-letters/redrive", "/v1/admin/dead-letters/discard"} {
		w := e.do(t, adminJSON(http.MethodPost, path, big))
		if w.Code != http.StatusRequestEntityTooLarge || problemOf(t, w).Code != "payload_too_large" {
			t.Fatalf("%s: %d %s", path, w.Code, w.Body)
		}
	}
	if w := e.do(t, adminJSON(http.MethodGet, "/v1/admin/jobs?limit=0", "")); w.Code != 400 || !hasField(problemOf(t, w), "limit") {
		t.Fatalf("bad limit: %d %s", w.Code, w.Body)
	}
}

// The operations page's redrive button: a form post with the page's CSRF
// token redrives and sends the browser back to the page (303).
func TestRedriveFormPost(t *testing.T) {
	t.Parallel()
	b, _ := routing.NewBindings("v1")
	r, _ := routing.NewRouter(routing.Config{Bindings: b})
	e := newEnv(t, func(c *Config) { c.Router = r })
	e.submit(t, tokAcme, "k1", withField("instance_id", "v2-later"))
	dls, err := e.store.ListDeadLetters(context.Background(), false, 0, 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("%v %v", dls, err)
	}
	// v2 bound now: a deployment that serves it.
	srv, err := New(Config{Store: e.store, Objects: e.objects, Router: mustRouter(t), AdminToken: tokAdmin})
	if err != nil {
		t.Fatal(err)
	}
	e.h = srv.Handler()
	v := url.Values{"csrf": {srv.csrf}}
	w := e.do(t, req{method: http.MethodPost, path: "/v1/admin/dead-letters/" + strconv.FormatInt(dls[0].ID, 10) + "/redrive", body: v.Encode(),
		hdr: map[string]string{"Authorization": basic("op", tokAdmin), "Content-Type": "application/x-www-form-urlencoded"}})
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/admin?done=") {
		t.Fatalf("%d %v %s", w.Code, w.Header(), w.Body)
	}
	if j, _ := e.store.GetJob(context.Background(), "v2-later"); j.Status != "pending" {
		t.Fatalf("job %s", j.Status)
	}
}

func mustRouter(t *testing.T) *routing.Router {
	t.Helper()
	r, err := routing.NewRouter(routing.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
