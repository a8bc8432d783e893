package api

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"edgepipe/pipeline"
)

// healthz is GET /healthz: the process is up and serving.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// Readiness reports each dependency as "ok" or "unavailable"; the causes go
// to the log, not to whoever can reach the endpoint.
type Readiness struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// readyz is GET /readyz: the database and the object store answer.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	out := Readiness{Status: "ok", Checks: map[string]string{}}
	check := func(name string, ping func(context.Context) error) {
		if err := ping(ctx); err != nil {
			s.log.Warn("readiness check failed", "check", name, "err", err)
			out.Checks[name], out.Status = "unavailable", "unavailable"
			return
		}
		out.Checks[name] = "ok"
	}
	check("database", s.cfg.Store.Ping)
	check("objects", s.cfg.Objects.Ping)
	code := http.StatusOK
	if out.Status != "ok" {
		code = http.StatusServiceUnavailable
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(code, out)
}

// Known dead-letter reasons are always reported, at 0 when there are none.
var deadLetterReasons = []string{pipeline.ReasonUnboundVersion, pipeline.ReasonPoison, pipeline.ReasonRetriesExhausted, pipeline.ReasonInfraUnavailable}

// metrics is GET /metrics in the Prometheus text format: gauges read from
// the store now, then the in-process counters.
func (s *Server) metrics(c echo.Context) error {
	ctx := c.Request().Context()
	byStatus, err := s.cfg.Store.CountByStatus(ctx)
	if err != nil {
		return err
	}
	dls, err := s.cfg.Store.CountDeadLetters(ctx)
	if err != nil {
		return err
	}
	billed, err := s.cfg.Store.CountBilledCalls(ctx)
	if err != nil {
		return err
	}
	statuses := map[string]int{}
	for st, n := range byStatus {
		statuses[string(st)] = n
	}
	all := make([]string, len(pipeline.AllStatuses))
	for i, st := range pipeline.AllStatuses {
		all[i] = string(st)
	}
	var buf bytes.Buffer
	pw := newPromWriter(&buf)
	pw.gaugeVec("edgepipe_jobs", "Jobs by status, from the database.", "status", statuses, all)
	pw.gaugeVec("edgepipe_dead_letters_open", "Dead letters not yet redriven, by reason, from the database.", "reason", dls, deadLetterReasons)
	pw.gaugeVec("edgepipe_provider_calls_billed", "Provider calls that may have been billed (the audit trail), by operation, from the database.",
		"operation", billed, []string{pipeline.OpImage, pipeline.OpSpeech, pipeline.OpVideoSubmit})
	if err := pw.flush(); err != nil {
		return err
	}
	if err := s.cfg.Metrics.WritePrometheus(&buf); err != nil {
		return err
	}
	return c.Blob(http.StatusOK, "text/plain; version=0.0.4; charset=utf-8", buf.Bytes())
}

// openapi is GET /openapi.yaml: the embedded OpenAPI 3.1 document.
func (s *Server) openapi(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "application/yaml", openAPIDoc)
}
