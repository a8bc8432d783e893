package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"

	"edgepipe/pipeline"
	"edgepipe/webhook"
)

var (
	_ pipeline.Metrics = (*Metrics)(nil)
	_ webhook.Metrics  = (*Metrics)(nil)
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if w := e.do(t, req{method: http.MethodGet, path: "/healthz"}); w.Code != 200 || !strings.Contains(w.Body.String(), `"ok"`) {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}

type downObjects struct{ pipeline.ObjectStore }

func (downObjects) Ping(context.Context) error {
	return errors.New("dial tcp 10.9.9.9:9000: connection refused")
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.do(t, req{method: http.MethodGet, path: "/readyz"})
	if r := decode[Readiness](t, w); w.Code != 200 || r.Status != "ok" || r.Checks["database"] != "ok" || r.Checks["objects"] != "ok" {
		t.Fatalf("%d %+v", w.Code, r)
	}
	srv, err := New(Config{Store: e.store, Objects: downObjects{e.objects}, Router: e.srv.cfg.Router})
	if err != nil {
		t.Fatal(err)
	}
	e.h = srv.Handler()
	w = e.do(t, req{method: http.MethodGet, path: "/readyz"})
	if r := decode[Readiness](t, w); w.Code != 503 || r.Status != "unavailable" || r.Checks["objects"] != "unavailable" || r.Checks["database"] != "ok" {
		t.Fatalf("%d %+v", w.Code, r)
	}
	if strings.Contains(w.Body.String(), "10.9.9.9") {
		t.Fatalf("cause leaked: %s", w.Body)
	}
	e.store.Close()
	w = e.do(t, req{method: http.MethodGet, path: "/readyz"})
	if r := decode[Readiness](t, w); w.Code != 503 || r.Checks["database"] != "unavailable" {
		t.Fatalf("closed database: %d %+v", w.Code, r)
	}
}

// Unknown paths and methods are problems too, and a panic is a generic 500
// that says nothing about its cause.
func TestUnknownRoutesAndPanics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if w := e.do(t, req{method: http.MethodGet, path: "/nope"}); w.Code != 404 || problemOf(t, w).Code != "not_found" {
		t.Fatalf("unknown path: %d %s", w.Code, w.Body)
	}
	// A path some route serves, with a method none does: 405 with Allow,
	// inside the authenticated groups as well as outside them.
	tenant := map[string]string{"Authorization": "Bearer " + tokAcme}
	admin := map[string]string{"Authorization": "Bearer " + tokAdmin}
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		allow        string
	}{
		{http.MethodDelete, "/healthz", nil, "GET, OPTIONS"},
		{http.MethodPost, "/openapi.yaml", nil, "GET, OPTIONS"},
		{http.MethodDelete, "/v1/jobs/v1-abc", tenant, "GET, OPTIONS"},
		{http.MethodPut, "/v1/jobs", tenant, "GET, OPTIONS, POST"},
		{http.MethodGet, "/v1/jobs/v1-abc/cancellation", tenant, "OPTIONS, POST"},
		{http.MethodPatch, "/v1/jobs/v1-abc/result", tenant, "GET, OPTIONS"},
		{http.MethodGet, "/v1/admin/dead-letters/7/redrive", admin, "OPTIONS, POST"},
		{http.MethodDelete, "/v1/admin/jobs", admin, "GET, OPTIONS"},
		{http.MethodPost, "/admin", admin, "GET, OPTIONS"},
	} {
		w := e.do(t, req{method: tc.method, path: tc.path, hdr: tc.hdr})
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != tc.allow {
			t.Fatalf("%s %s: %d Allow %q, want 405 Allow %q: %s", tc.method, tc.path, w.Code, w.Header().Get("Allow"), tc.allow, w.Body)
		}
		if p := problemOf(t, w); p.Code != "method_not_allowed" || !strings.Contains(p.Detail, tc.allow) {
			t.Fatalf("%s %s: %+v", tc.method, tc.path, p)
		}
	}
	// The request metrics count them as what they were answered.
	if n := series(t, scrape(t, e), "edgepipe_http_requests_total", dto.MetricType_COUNTER,
		"method", "DELETE", "route", "/v1/jobs/*", "code", "405").GetCounter().GetValue(); n != 1 {
		t.Fatalf("405s counted %v times, want 1", n)
	}
	// OPTIONS is answered the same way on every known path (echo did so
	// only outside the authenticated groups).
	for _, p := range []string{"/healthz", "/v1/jobs/v1-abc", "/v1/admin/dead-letters/7/redrive", "/admin"} {
		w := e.do(t, req{method: http.MethodOptions, path: p})
		if w.Code != http.StatusNoContent || !strings.Contains(w.Header().Get("Allow"), "OPTIONS") {
			t.Fatalf("OPTIONS %s: %d %v", p, w.Code, w.Header())
		}
	}
	if w := e.do(t, req{method: http.MethodOptions, path: "/nope"}); w.Code != 404 {
		t.Fatalf("OPTIONS /nope: %d", w.Code)
	}
	// Authentication still comes first, and a path no route has is 404.
	if w := e.do(t, req{method: http.MethodDelete, path: "/v1/jobs/v1-abc"}); w.Code != 401 {
		t.Fatalf("unauthenticated wrong method: %d", w.Code)
	}
	for _, p := range []string{"/v1/jobs/v1-abc/nope", "/v1/jobs/v1-abc/cancellation/x", "/v1/jobs//cancellation"} {
		if w := e.do(t, req{method: http.MethodGet, path: p, hdr: tenant}); w.Code != 404 || problemOf(t, w).Code != "not_found" || w.Header().Get("Allow") != "" {
			t.Fatalf("%s: %d %v", p, w.Code, w.Header())
		}
	}
	e.noContract = true // /boom is this test's own route, not the API's
	e.srv.Echo().GET("/boom", func(echo.Context) error { panic("secret internal state") })
	w := e.do(t, req{method: http.MethodGet, path: "/boom"})
	p := problemOf(t, w)
	if w.Code != 500 || p.Code != "internal_error" || strings.Contains(w.Body.String(), "secret") || p.RequestID == "" ||
		p.RequestID != w.Header().Get("X-Request-Id") {
		t.Fatalf("panic: %d %s %v", w.Code, w.Body, w.Header())
	}
}
