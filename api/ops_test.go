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
	if w := e.do(t, req{method: http.MethodDelete, path: "/healthz"}); w.Code != 405 || problemOf(t, w).Code != "method_not_allowed" {
		t.Fatalf("wrong method: %d %s", w.Code, w.Body)
	}
	e.srv.Echo().GET("/boom", func(echo.Context) error { panic("secret internal state") })
	w := e.do(t, req{method: http.MethodGet, path: "/boom"})
	p := problemOf(t, w)
	if w.Code != 500 || p.Code != "internal_error" || strings.Contains(w.Body.String(), "secret") || p.RequestID == "" ||
		p.RequestID != w.Header().Get("X-Request-Id") {
		t.Fatalf("panic: %d %s %v", w.Code, w.Body, w.Header())
	}
}
