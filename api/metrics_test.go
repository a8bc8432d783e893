package api

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"edgepipe/pipeline"
	"edgepipe/webhook"
)

// scrape GETs /metrics through the server's handler and parses the answer
// with the Prometheus text parser, as a scraper would: a malformed
// exposition (a family declared twice, a sample outside its family, bad
// escaping) fails here.
func scrape(t *testing.T, e *testEnv) map[string]*dto.MetricFamily {
	t.Helper()
	w := e.do(t, req{method: http.MethodGet, path: "/metrics"})
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %v\n%s", w.Code, w.Header(), w.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// series finds the sample of family name whose labels are exactly labels
// (name=value pairs); it fails the test when the family has another type or
// no such sample.
func series(t *testing.T, mfs map[string]*dto.MetricFamily, name string, typ dto.MetricType, labels ...string) *dto.Metric {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("no family %s", name)
	}
	if mf.GetType() != typ {
		t.Fatalf("%s is a %v, want %v", name, mf.GetType(), typ)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
				continue next
			}
		}
		return m
	}
	t.Fatalf("%s has no series %v", name, labels)
	return nil
}

// bucket is a histogram's cumulative count at upper bound le.
func bucket(t *testing.T, h *dto.Histogram, le float64) uint64 {
	t.Helper()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("no bucket le=%v", le)
	return 0
}

func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mustSubmit(t, tokAcme, "k1")
	e.mustSubmit(t, tokAcme, "k1") // a replay
	e.submit(t, tokAcme, "k2", withField("instance_id", "v9-x"))
	e.mustSubmit(t, tokGlobex, "k3")
	e.clock.Advance(90 * time.Second) // both pending jobs have waited 90 s
	// A worker claims one: its message stays on the queue but is hidden
	// for the lease, so it is no longer ready.
	if c, _, err := e.store.Fetch(context.Background(), &pipeline.FetchParams{Queue: "render-v1", Owner: "worker-1", Max: 1, LeaseFor: time.Minute}); err != nil || len(c) != 1 {
		t.Fatalf("fetch: %v %v", c, err)
	}
	e.metrics.ProviderCall(pipeline.OpSpeech, pipeline.CallAmbiguous)
	e.metrics.ProviderCall(`we"ird\op`, "x\ny") // label escaping
	e.metrics.ProviderCall("image", "bad \xff utf-8")
	e.metrics.ProviderLatency("fake", pipeline.OpImage, 300*time.Millisecond)
	e.metrics.ProviderLatency("fake", pipeline.OpImage, 7*time.Second)
	e.metrics.BytesUploaded("render", 1234)
	e.metrics.BytesUploaded("render", 1)
	e.metrics.BytesUploaded(pipeline.KindStaged, 10)
	e.metrics.StageDuration("execute", 700*time.Millisecond)
	e.metrics.StageDuration("execute", 45*time.Second)
	e.metrics.UnitReused("image")
	e.metrics.RetryScheduled("provider_rate_limited")
	e.metrics.WebhookDelivery(webhook.OutcomeRetry)
	e.metrics.JobSettled("v1", pipeline.StatusSucceeded, 75*time.Second, 2)
	e.metrics.JobSettled("v1", pipeline.StatusSucceeded, 4*time.Hour, 1)
	e.metrics.JobSettled("v2", pipeline.StatusDeadLettered, time.Minute, 5)
	e.do(t, req{method: "BREW", path: "/v1/jobs"}) // an invented method

	mfs := scrape(t, e)
	const (
		counter   = dto.MetricType_COUNTER
		gauge     = dto.MetricType_GAUGE
		histogram = dto.MetricType_HISTOGRAM
	)
	for _, tc := range []struct {
		name   string
		typ    dto.MetricType
		labels []string
		want   float64
	}{
		// From the database.
		{"edgepipe_jobs", gauge, []string{"status", "pending"}, 1},
		{"edgepipe_jobs", gauge, []string{"status", "running"}, 1},
		{"edgepipe_jobs", gauge, []string{"status", "dead_lettered"}, 1},
		{"edgepipe_jobs", gauge, []string{"status", "succeeded"}, 0},
		{"edgepipe_dead_letters_open", gauge, []string{"reason", "unbound_version"}, 1},
		{"edgepipe_dead_letters_open", gauge, []string{"reason", "poison"}, 0},
		{"edgepipe_provider_calls_billed", gauge, []string{"operation", "speech"}, 0},
		{"edgepipe_queue_depth", gauge, []string{"queue", "render-v1"}, 2},
		{"edgepipe_queue_ready", gauge, []string{"queue", "render-v1"}, 1},
		{"edgepipe_queue_oldest_ready_age_seconds", gauge, []string{"queue", "render-v1"}, 90},
		{"edgepipe_queue_depth", gauge, []string{"queue", "render-v2"}, 0}, // bound, empty
		// This process's counters.
		{"edgepipe_provider_calls_total", counter, []string{"operation", "speech", "status", "ambiguous"}, 1},
		{"edgepipe_provider_calls_total", counter, []string{"operation", `we"ird\op`, "status", "x\ny"}, 1},
		{"edgepipe_provider_calls_total", counter, []string{"operation", "image", "status", "bad \uFFFD utf-8"}, 1},
		{"edgepipe_bytes_uploaded_total", counter, []string{"kind", "render"}, 1235},
		{"edgepipe_bytes_uploaded_total", counter, []string{"kind", "staged"}, 10},
		{"edgepipe_units_reused_total", counter, []string{"kind", "image"}, 1},
		{"edgepipe_retries_total", counter, []string{"code", "provider_rate_limited"}, 1},
		{"edgepipe_webhook_deliveries_total", counter, []string{"outcome", "retry"}, 1},
		{"edgepipe_submissions_total", counter, []string{"result", "created"}, 3},
		{"edgepipe_submissions_total", counter, []string{"result", "replayed"}, 1},
		{"edgepipe_http_requests_total", counter, []string{"method", "POST", "route", "/v1/jobs", "code", "202"}, 4},
		{"edgepipe_http_requests_total", counter, []string{"method", "other", "route", "/v1/jobs", "code", "401"}, 1},
	} {
		m := series(t, mfs, tc.name, tc.typ, tc.labels...)
		got := m.GetGauge().GetValue()
		if tc.typ == counter {
			got = m.GetCounter().GetValue()
		}
		if got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}

	for _, tc := range []struct {
		name        string
		labels      []string
		count       uint64
		sum         float64
		le          float64 // a bucket bound and its cumulative count
		atLE, atInf uint64
	}{
		{"edgepipe_stage_duration_seconds", []string{"stage", "execute"}, 2, 45.7, 1, 1, 2},
		{"edgepipe_provider_call_duration_seconds", []string{"provider", "fake", "operation", "image"}, 2, 7.3, 0.5, 1, 2},
		{"edgepipe_job_duration_seconds", []string{"version", "v1", "status", "succeeded"}, 2, 75 + 4*3600, 120, 1, 2},
		{"edgepipe_job_duration_seconds", []string{"version", "v2", "status", "dead_lettered"}, 1, 60, 60, 1, 1},
		{"edgepipe_job_attempts", []string{"status", "succeeded"}, 2, 3, 1, 1, 2},
		{"edgepipe_job_attempts", []string{"status", "dead_lettered"}, 1, 5, 4, 0, 1},
	} {
		h := series(t, mfs, tc.name, dto.MetricType_HISTOGRAM, tc.labels...).GetHistogram()
		if h.GetSampleCount() != tc.count || math.Abs(h.GetSampleSum()-tc.sum) > 1e-9 {
			t.Errorf("%s%v: count %d sum %v, want %d and %v", tc.name, tc.labels, h.GetSampleCount(), h.GetSampleSum(), tc.count, tc.sum)
		}
		if got := bucket(t, h, tc.le); got != tc.atLE {
			t.Errorf("%s%v: bucket le=%v holds %d, want %d", tc.name, tc.labels, tc.le, got, tc.atLE)
		}
		if got := bucket(t, h, math.Inf(1)); got != tc.atInf {
			t.Errorf("%s%v: +Inf bucket %d, want %d", tc.name, tc.labels, got, tc.atInf)
		}
	}

	// The Go runtime and process collectors ride along.
	if g := series(t, mfs, "go_goroutines", gauge).GetGauge().GetValue(); g < 1 {
		t.Errorf("go_goroutines = %v", g)
	}
	if _, ok := mfs["process_resident_memory_bytes"]; !ok {
		t.Error("no process collector series")
	}
	if t.Failed() {
		t.Log(e.do(t, req{method: http.MethodGet, path: "/metrics"}).Body.String())
	}
}

// Two Metrics never share a series: each has its own registry (and so
// tests may run in parallel).
func TestMetricsArePrivate(t *testing.T) {
	t.Parallel()
	a, b := newEnv(t), newEnv(t)
	a.metrics.RetryScheduled("only_in_a")
	series(t, scrape(t, a), "edgepipe_retries_total", dto.MetricType_COUNTER, "code", "only_in_a")
	if mf, ok := scrape(t, b)["edgepipe_retries_total"]; ok && len(mf.GetMetric()) > 0 {
		t.Fatalf("b sees a's series: %v", mf)
	}
}

// The scraper chooses the format: OpenMetrics or protobuf when it asks.
func TestMetricsNegotiatesFormats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.metrics.RetryScheduled("provider_timeout")
	w := e.do(t, req{method: http.MethodGet, path: "/metrics", hdr: map[string]string{"Accept": "application/openmetrics-text; version=1.0.0"}})
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/openmetrics-text") || !strings.HasSuffix(w.Body.String(), "# EOF\n") {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	accept := "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
	w = e.do(t, req{method: http.MethodGet, path: "/metrics", hdr: map[string]string{"Accept": accept}})
	format := expfmt.ResponseFormat(w.Header())
	if w.Code != 200 || format.FormatType() != expfmt.TypeProtoDelim {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	dec := expfmt.NewDecoder(w.Body, format)
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			t.Fatalf("no edgepipe_retries_total in the protobuf answer (%v)", err)
		}
		if mf.GetName() == "edgepipe_retries_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 1 {
				t.Fatalf("edgepipe_retries_total = %v", v)
			}
			return
		}
	}
}

// A store that fails is answered as a problem, like on every route: the
// queue read too (the other reads are covered in TestStoreFailuresAreProblems).
type failingQueueStats struct {
	Store
	err error
}

func (f failingQueueStats) QueueStats(context.Context, func(string, int, int, time.Duration)) error {
	return f.err
}

func TestMetricsQueueReadFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.Store = failingQueueStats{Store: c.Store, err: errors.New("database disk image is malformed")}
	})
	w := e.do(t, req{method: http.MethodGet, path: "/metrics"})
	if p := problemOf(t, w); w.Code != 500 || p.Code != "internal_error" || strings.Contains(w.Body.String(), "malformed") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}

func TestNilMetricsIsSafe(t *testing.T) {
	t.Parallel()
	var m *Metrics
	m.ProviderCall("a", "b")
	m.ProviderLatency("p", "a", time.Second)
	m.BytesUploaded("k", 1)
	m.StageDuration("s", time.Second)
	m.UnitReused("k")
	m.RetryScheduled("c")
	m.WebhookDelivery("o")
	m.JobSettled("v1", pipeline.StatusSucceeded, time.Second, 1)
	m.submission("created")
	m.request("GET", "/", 200)
}
