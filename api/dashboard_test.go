package api

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"edgepipe/pipeline"
	"edgepipe/webhook"
)

// The Grafana dashboard under docs/ is built on the metrics this package
// serves: every series a panel queries exists in a scrape, with the type
// its suffix implies (_bucket, _sum, _count only on histograms; rate() of a
// gauge is a mistake Grafana draws without complaint), and every label a
// panel groups by is a label of that family.
func TestGrafanaDashboardQueriesServedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/grafana/edgepipe.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) < 10 {
		t.Fatalf("dashboard uid %q with %d panels", dash.UID, len(dash.Panels))
	}

	e := newEnv(t)
	e.mustSubmit(t, tokAcme, "k1")
	// Every labelled family shows up only once it has a series.
	e.metrics.ProviderCall(pipeline.OpImage, pipeline.CallSucceeded)
	e.metrics.ProviderLatency("http", pipeline.OpImage, time.Second)
	e.metrics.BytesUploaded("render", 1)
	e.metrics.StageDuration("execute", time.Second)
	e.metrics.UnitReused("image")
	e.metrics.RetryScheduled("provider_rate_limited")
	e.metrics.WebhookDelivery(webhook.OutcomeRetry)
	e.metrics.JobSettled("v1", pipeline.StatusSucceeded, time.Minute, 1)
	mfs := scrape(t, e)

	name := regexp.MustCompile(`\b(?:edgepipe|process|go)_[a-z_]+\b`)
	by := regexp.MustCompile(`\bby \(([^)]*)\)`)
	queried := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				family, suffix := n, ""
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					if f, ok := strings.CutSuffix(n, s); ok && mfs[f] != nil {
						family, suffix = f, s
					}
				}
				mf := mfs[family]
				if mf == nil {
					t.Errorf("panel %q queries %s, which /metrics does not serve", p.Title, n)
					continue
				}
				queried++
				isHist := mf.GetType() == dto.MetricType_HISTOGRAM
				if isHist != (suffix != "") {
					t.Errorf("panel %q queries %s of a %v", p.Title, n, mf.GetType())
				}
				if strings.Contains(tg.Expr, "rate(") && mf.GetType() == dto.MetricType_GAUGE {
					t.Errorf("panel %q takes a rate of the gauge %s", p.Title, n)
				}
				labels := map[string]bool{"le": isHist}
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						labels[l.GetName()] = true
					}
				}
				for _, g := range by.FindAllStringSubmatch(tg.Expr, -1) {
					for _, l := range strings.Split(g[1], ",") {
						if l = strings.TrimSpace(l); !labels[l] {
							t.Errorf("panel %q groups %s by %q, which it does not have", p.Title, n, l)
						}
					}
				}
			}
		}
	}
	if queried < len(dash.Panels) {
		t.Errorf("%d metrics queried by %d panels", queried, len(dash.Panels))
	}
}
