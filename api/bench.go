package api

import (
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
)

// BareHandler is the benchmark's baseline: echo with one route, POST
// /v1/jobs, that reads the body and answers 202 with a small JSON body and
// does nothing else — no auth, no validation, no database. Comparing the
// real API against it under the same load (testdata/wrk-submit.lua) shows
// what durability costs.
func BareHandler() http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	body := []byte(`{"id":"v1-bare","status":"pending"}`)
	e.POST("/v1/jobs", func(c echo.Context) error {
		_, _ = io.Copy(io.Discard, c.Request().Body)
		c.Response().Header().Set(echo.HeaderLocation, "/v1/jobs/v1-bare")
		return c.JSONBlob(http.StatusAccepted, body)
	})
	return e
}
