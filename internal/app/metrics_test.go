package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"edgepipe/pipeline"
)

// One job runs end to end in a process wired like `edgepipe serve` (the
// in-process fake providers, real ffmpeg, the shared api.Metrics), and
// /metrics, scraped through the API's handler and parsed as a scraper
// would, shows what the engine, the worker and the store observed: the
// job's latency and attempts, the provider calls' latency, the bytes
// stored by kind, the stages, and an empty queue.
func TestMetricsAfterAJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token = "metrics-test-token-0123456789"
	cfg := testConfig(t, t.TempDir(), map[string]string{
		"EDGEPIPE_TOKENS": token + ":acme", "EDGEPIPE_FAKE_VIDEO_PROCESSING": "10ms", "EDGEPIPE_RENDER_PRESET": "ultrafast",
	})
	a, parts := openBuilt(t, cfg, true, 1)
	if err := parts.Worker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parts.Worker.Stop(context.Background()) })
	h := parts.API.Handler()

	body := `{"operation":"render_video","title":"Metrics","scenes":[
	 {"image_prompt":"a lighthouse at dusk","narration":"Every night the keeper climbed.","duration_ms":1000},
	 {"video_prompt":"waves on rocks","narration":"And the sea answered.","duration_ms":1000}],
	 "options":{"resolution":"640x360","fps":24}}`
	r := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+token)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "metrics-1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	jobs, _, err := a.Store.ListJobs(ctx, pipeline.ListFilter{Tenant: "acme", Limit: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("%v %v", jobs, err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		j, err := a.Store.GetTenantJob(ctx, "acme", jobs[0].InstanceID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status.Settled() {
			if j.Status != pipeline.StatusSucceeded {
				t.Fatalf("job settled %s: %s", j.Status, j.LastErrorCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job still %s", j.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The worker observes the settlement right after recording it; wait
	// for that rather than race it.
	var mfs map[string]*dto.MetricFamily
	for {
		mfs = scrape(t, h)
		if _, ok := mfs["edgepipe_job_duration_seconds"]; ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	version := jobs[0].Version
	hist := func(name string, labels map[string]string) *dto.Histogram {
		t.Helper()
		if m := find(mfs, name, dto.MetricType_HISTOGRAM, labels); m != nil {
			return m.GetHistogram()
		}
		t.Fatalf("no %s%v", name, labels)
		return nil
	}
	if h := hist("edgepipe_job_duration_seconds", map[string]string{"version": version, "status": "succeeded"}); h.GetSampleCount() != 1 || h.GetSampleSum() <= 0 {
		t.Errorf("job duration: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := hist("edgepipe_job_attempts", map[string]string{"status": "succeeded"}); h.GetSampleCount() != 1 || h.GetSampleSum() != 1 {
		t.Errorf("job attempts: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, op := range []string{pipeline.OpImage, pipeline.OpSpeech, pipeline.OpVideoSubmit} {
		if h := hist("edgepipe_provider_call_duration_seconds", map[string]string{"operation": op}); h.GetSampleCount() < 1 {
			t.Errorf("provider latency of %s: count %d", op, h.GetSampleCount())
		}
	}
	for _, stage := range []string{pipeline.StagePrepare, pipeline.StageExecute, pipeline.StageApply, pipeline.StageFinalize} {
		if h := hist("edgepipe_stage_duration_seconds", map[string]string{"stage": stage}); h.GetSampleCount() != 1 {
			t.Errorf("stage %s: count %d", stage, h.GetSampleCount())
		}
	}
	value := func(name string, typ dto.MetricType, labels map[string]string) float64 {
		t.Helper()
		m := find(mfs, name, typ, labels)
		if m == nil {
			t.Fatalf("no %s%v", name, labels)
		}
		if typ == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	for _, kind := range []string{"render", pipeline.ArtifactImage, pipeline.ArtifactSpeech, pipeline.ArtifactVideo} {
		if n := value("edgepipe_bytes_uploaded_total", dto.MetricType_COUNTER, map[string]string{"kind": kind}); n < 100 {
			t.Errorf("bytes uploaded of kind %s: %v", kind, n)
		}
	}
	if n := value("edgepipe_provider_calls_total", dto.MetricType_COUNTER, map[string]string{"operation": pipeline.OpImage, "status": pipeline.CallSucceeded}); n != 1 {
		t.Errorf("image calls: %v", n)
	}
	if n := value("edgepipe_jobs", dto.MetricType_GAUGE, map[string]string{"status": "succeeded"}); n != 1 {
		t.Errorf("succeeded jobs: %v", n)
	}
	if n := value("edgepipe_queue_depth", dto.MetricType_GAUGE, map[string]string{"queue": "render-" + version}); n != 0 {
		t.Errorf("queue depth after the job: %v", n)
	}
	if t.Failed() {
		for name, mf := range mfs {
			if strings.HasPrefix(name, "edgepipe_") {
				t.Log(mf.String())
			}
		}
	}
}

func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", w.Code, w.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// find returns the first sample of family name, of type typ, whose labels
// include labels.
func find(mfs map[string]*dto.MetricFamily, name string, typ dto.MetricType, labels map[string]string) *dto.Metric {
	mf := mfs[name]
	if mf == nil || mf.GetType() != typ {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}
