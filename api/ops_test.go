package api

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

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

var (
	promSample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)*\})? [-+]?[0-9.eE+Inf-]+$`)
	promMeta   = regexp.MustCompile(`^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$`)
)

// checkExposition validates the text format the way a scraper would: every
// sample line parses and belongs to a family declared before it, each
// family once.
func checkExposition(t *testing.T, body string) map[string]string {
	t.Helper()
	types := map[string]string{}
	current := ""
	samples := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if m := promMeta.FindStringSubmatch(line); m != nil {
			if m[1] == "TYPE" {
				if _, dup := types[m[2]]; dup {
					t.Errorf("family %s declared twice", m[2])
				}
				types[m[2]] = strings.Fields(line)[3]
				current = m[2]
			}
			continue
		}
		m := promSample.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("unparsable line %q", line)
			continue
		}
		name := m[1]
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if name != current && base != current {
			t.Errorf("sample %q outside its family (current %s)", line, current)
		}
		i := strings.LastIndexByte(line, ' ')
		samples[line[:i]] = line[i+1:]
	}
	return samples
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mustSubmit(t, tokAcme, "k1")
	e.mustSubmit(t, tokAcme, "k1") // a replay
	e.submit(t, tokAcme, "k2", withField("instance_id", "v9-x"))
	e.metrics.ProviderCall(pipeline.OpSpeech, pipeline.CallAmbiguous)
	e.metrics.BytesUploaded("render", 1234)
	e.metrics.BytesUploaded("render", 1)
	e.metrics.StageDuration("execute", 700*time.Millisecond)
	e.metrics.StageDuration("execute", 45*time.Second)
	e.metrics.UnitReused("image")
	e.metrics.RetryScheduled("provider_rate_limited")
	e.metrics.WebhookDelivery(webhook.OutcomeRetry)
	e.metrics.ProviderCall(`we"ird\op`, "x\ny") // label escaping

	w := e.do(t, req{method: http.MethodGet, path: "/metrics"})
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	s := checkExposition(t, w.Body.String())
	want := map[string]string{
		`edgepipe_jobs{status="pending"}`:                                         "1",
		`edgepipe_jobs{status="dead_lettered"}`:                                   "1",
		`edgepipe_jobs{status="succeeded"}`:                                       "0",
		`edgepipe_dead_letters_open{reason="unbound_version"}`:                    "1",
		`edgepipe_dead_letters_open{reason="poison"}`:                             "0",
		`edgepipe_provider_calls_billed{operation="speech"}`:                      "0",
		`edgepipe_provider_calls_total{operation="speech",status="ambiguous"}`:    "1",
		`edgepipe_provider_calls_total{operation="we\"ird\\op",status="x\ny"}`:    "1",
		`edgepipe_bytes_uploaded_total{kind="render"}`:                            "1235",
		`edgepipe_units_reused_total{kind="image"}`:                               "1",
		`edgepipe_retries_total{code="provider_rate_limited"}`:                    "1",
		`edgepipe_webhook_deliveries_total{outcome="retry"}`:                      "1",
		`edgepipe_submissions_total{result="created"}`:                            "2",
		`edgepipe_submissions_total{result="replayed"}`:                           "1",
		`edgepipe_http_requests_total{method="POST",route="/v1/jobs",code="202"}`: "3",
		`edgepipe_stage_duration_seconds_bucket{stage="execute",le="0.5"}`:        "0",
		`edgepipe_stage_duration_seconds_bucket{stage="execute",le="1"}`:          "1",
		`edgepipe_stage_duration_seconds_bucket{stage="execute",le="60"}`:         "2",
		`edgepipe_stage_duration_seconds_bucket{stage="execute",le="+Inf"}`:       "2",
		`edgepipe_stage_duration_seconds_sum{stage="execute"}`:                    "45.7",
		`edgepipe_stage_duration_seconds_count{stage="execute"}`:                  "2",
	}
	for k, v := range want {
		if got, ok := s[k]; !ok || got != v {
			t.Errorf("%s = %q (present %v), want %s", k, got, ok, v)
		}
	}
	if t.Failed() {
		t.Log(w.Body.String())
	}
}

func TestNilMetricsIsSafe(t *testing.T) {
	t.Parallel()
	var m *Metrics
	m.ProviderCall("a", "b")
	m.BytesUploaded("k", 1)
	m.StageDuration("s", time.Second)
	m.UnitReused("k")
	m.RetryScheduled("c")
	m.WebhookDelivery("o")
	if err := m.WritePrometheus(nil); err != nil {
		t.Fatal(err)
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
	if m := e.do(t, req{method: http.MethodGet, path: "/metrics"}).Body.String(); !strings.Contains(m, `method="DELETE",route="/v1/jobs/*",code="405"`) {
		t.Fatalf("405s not in the request metrics:\n%s", m)
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
