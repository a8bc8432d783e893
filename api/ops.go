package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
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

// openapi is GET /openapi.yaml: the embedded OpenAPI 3.1 document.
func (s *Server) openapi(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "application/yaml", openAPIDoc)
}
