package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"edgepipe/internal/tracing"
	"edgepipe/pipeline"
)

// Store is what the API needs from the job store (storage/sqlite
// implements it).
type Store interface {
	CreateJob(ctx context.Context, nj pipeline.NewJob) (pipeline.Job, bool, error)
	GetTenantJob(ctx context.Context, tenant, id string) (pipeline.Job, error)
	ListJobs(ctx context.Context, f pipeline.ListFilter) ([]pipeline.Job, pipeline.Cursor, error)
	Events(ctx context.Context, jobID string, afterID int64, limit int) ([]pipeline.Event, error)
	RequestCancel(ctx context.Context, tenant, id string) (pipeline.Job, error)
	GetAsset(ctx context.Context, key string) (pipeline.Asset, error)
	// JobStory reads one job (by its store key, jobs.id) with its events,
	// provider calls, assets and open object claims, for GET /admin/jobs/{id}.
	JobStory(ctx context.Context, p *pipeline.JobStoryParams) (pipeline.JobStory, error)

	Decide(ctx context.Context, p *pipeline.DecideParams) (pipeline.Job, error)
	RecentDecisions(ctx context.Context, limit int) ([]pipeline.Job, error)
	ListDeadLetters(ctx context.Context, includeSettled bool, afterID int64, limit int) ([]pipeline.DeadLetter, error)
	FindDeadLetters(ctx context.Context, f pipeline.DeadLetterFilter, limit int) ([]pipeline.DeadLetter, bool, error)
	GetDeadLetter(ctx context.Context, id int64) (pipeline.DeadLetter, error)
	Redrive(ctx context.Context, p *pipeline.RedriveParams) (pipeline.Job, error)
	DiscardDeadLetter(ctx context.Context, p *pipeline.DiscardDeadLetterParams) (pipeline.DeadLetter, error)

	CountByStatus(ctx context.Context) (map[pipeline.Status]int, error)
	CountDeadLetters(ctx context.Context) (map[string]int, error)
	CountBilledCalls(ctx context.Context) (map[string]int, error)
	// ListProofs lists the latest proof of every (provider, operation,
	// model), for the operations page.
	ListProofs(ctx context.Context, p *pipeline.ListProofsParams) ([]pipeline.Proof, error)
	LatestProof(ctx context.Context, p *pipeline.LatestProofParams) (pipeline.Proof, error)
	Ping(ctx context.Context) error
}

// Presigner is implemented by object stores that can hand out a temporary
// download URL (storage/s3). The result endpoint redirects to it instead of
// streaming the object through the API.
type Presigner interface {
	PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error)
}

//go:embed openapi.yaml
var openAPIDoc []byte

//go:embed templates/*.html
var templateFS embed.FS

// Server is the HTTP API.
type Server struct {
	cfg       Config
	log       *slog.Logger
	e         *echo.Echo
	handler   http.Handler // e, or e inside otelhttp
	tokens    tokenIndex
	adminHash []byte // sha256 of the admin token; nil when disabled
	csrf      string
	pages     *template.Template // templates/*.html: the operator pages

	closeOnce sync.Once
	closing   chan struct{} // closed by CloseStreams

	live liveBindings

	// methods lists, per route pattern, the methods it serves: a request
	// whose path matches a pattern but whose method does not is answered
	// 405 with Allow (echo's group catch-alls would otherwise say 404).
	methods []routeMethods
}

type routeMethods struct {
	segments []string // paramSegment matches any one non-empty segment
	methods  []string
}

// New validates cfg and builds the server and its routes.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, tokens: newTokenIndex(cfg.Tokens), closing: make(chan struct{})}
	if cfg.AdminToken != "" {
		h := sha256.Sum256([]byte(cfg.AdminToken))
		s.adminHash = h[:]
		s.csrf = csrfToken(cfg.AdminToken)
	}
	t, err := template.New("pages").Funcs(templateFuncs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	s.pages = t
	s.e = s.routes()
	s.handler = s.e
	if cfg.TracerProvider != nil {
		s.handler = otelhttp.NewHandler(s.e, "edgepipe.api", otelhttp.WithTracerProvider(cfg.TracerProvider),
			otelhttp.WithPropagators(tracing.Propagator),
			// Named by method here; observe renames the span by route once
			// echo has routed the request.
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
	}
	return s, nil
}

// Handler is the API as an http.Handler: the *echo.Echo, inside otelhttp's
// handler when Config.TracerProvider is set.
func (s *Server) Handler() http.Handler { return s.handler }

// CloseStreams ends every open event stream (clients reconnect with
// Last-Event-ID, elsewhere or later). http.Server.Shutdown does not cancel
// the contexts of running requests, so without this a graceful shutdown
// would wait for every stream to end on its own: register it with
// http.Server.RegisterOnShutdown. Safe to call more than once.
func (s *Server) CloseStreams() { s.closeOnce.Do(func() { close(s.closing) }) }

// Echo exposes the router, e.g. to list its routes.
func (s *Server) Echo() *echo.Echo { return s.e }

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Pre(s.options)
	e.Use(s.requestID)
	e.Use(s.observe)
	e.Use(s.recover)
	e.Use(s.limitBody)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", s.metrics)
	e.GET("/openapi.yaml", s.openapi)

	v1 := e.Group("/v1/jobs", s.requireTenant)
	v1.POST("", s.submit)
	v1.GET("", s.listJobs)
	v1.GET("/:id", s.getJob)
	v1.GET("/:id/events", s.events)
	v1.POST("/:id/cancellation", s.cancel)
	v1.GET("/:id/result", s.result)

	adm := e.Group("/v1/admin", s.requireAdmin)
	adm.GET("/jobs", s.adminJobs)
	adm.GET("/jobs/:id", s.adminJobStoryJSON)
	adm.POST("/jobs/:id/decision", s.adminDecide)
	adm.GET("/dead-letters", s.adminDeadLetters)
	adm.POST("/dead-letters/:id/redrive", s.adminRedrive)
	adm.POST("/dead-letters/:id/discard", s.adminDiscard)
	adm.POST("/dead-letters/redrive", s.adminBulkRedrive)
	adm.POST("/dead-letters/discard", s.adminBulkDiscard)
	e.GET("/admin", s.adminPage, s.requireAdmin)
	e.GET("/admin/jobs/:id", s.adminStoryPage, s.requireAdmin)
	s.methods = routeTable(e.Routes())
	return e
}

// routeTable groups the routes' methods by path pattern.
func routeTable(routes []*echo.Route) []routeMethods {
	var out []routeMethods
	idx := map[string]int{}
	for _, r := range routes {
		if r.Method == echo.RouteNotFound || strings.Contains(r.Path, "*") {
			continue
		}
		i, ok := idx[r.Path]
		if !ok {
			segs := strings.Split(r.Path, "/")
			for j, sg := range segs {
				if strings.HasPrefix(sg, ":") {
					segs[j] = paramSegment
				}
			}
			i = len(out)
			idx[r.Path] = i
			out = append(out, routeMethods{segments: segs})
		}
		if !slices.Contains(out[i].methods, r.Method) {
			out[i].methods = append(out[i].methods, r.Method)
		}
	}
	for i := range out {
		// echo answers OPTIONS itself (see options).
		out[i].methods = append(out[i].methods, http.MethodOptions)
		slices.Sort(out[i].methods)
	}
	return out
}

// paramSegment stands for a path parameter in routeMethods.segments.
const paramSegment = ":"

// options answers OPTIONS on every path a route serves with 204 and Allow,
// before routing: echo does so only outside the authenticated groups, and
// a preflight carries no credentials anyway. Unknown paths go on to 404.
func (s *Server) options(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Method != http.MethodOptions {
			return next(c)
		}
		allow := s.allowed(r.URL.Path)
		if len(allow) == 0 {
			return next(c)
		}
		c.Response().Header().Set(echo.HeaderAllow, strings.Join(allow, ", "))
		return c.NoContent(http.StatusNoContent)
	}
}

// allowed returns the methods some route serves at path, nil when no route
// has that path.
func (s *Server) allowed(path string) []string {
	segs := strings.Split(path, "/")
	var out []string
	for _, rm := range s.methods {
		if len(rm.segments) != len(segs) {
			continue
		}
		match := true
		for i, sg := range rm.segments {
			if sg == paramSegment && segs[i] == "" || sg != paramSegment && sg != segs[i] {
				match = false
				break
			}
		}
		if match {
			for _, m := range rm.methods {
				if !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// recover turns a panic into an error that handleError answers as a
// generic 500, so no panic reaches a user (the stack goes to the log).
// http.ErrAbortHandler is re-raised: it is net/http's way to abort a
// response on purpose.
func (s *Server) recover(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if r == http.ErrAbortHandler { //nolint:errorlint // the panic value itself, compared as net/http does
				panic(r)
			}
			s.log.Error("panic in handler", "path", c.Path(), "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}()
		return next(c)
	}
}

// requestID gives every response an X-Request-Id (the caller's, if it sent
// a sane one) that 5xx bodies and logs repeat, so support can find a
// failure without the API showing its cause.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if id == "" || len(id) > 64 || !printable(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

// observe counts requests by route (the pattern, never the raw path, so the
// label set stays small) and logs them at debug level.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		code := c.Response().Status
		switch {
		case err != nil && c.Request().Context().Err() != nil && errors.Is(err, context.Canceled):
			code = 499 // client closed the request (nginx's convention)
		case err != nil:
			code = s.problemFor(c, err).Status
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		if span := trace.SpanFromContext(c.Request().Context()); span.IsRecording() {
			span.SetName(c.Request().Method + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}
		s.cfg.Metrics.request(c.Request().Method, route, code)
		if s.log.Enabled(c.Request().Context(), slog.LevelDebug) {
			s.log.Debug("request", "method", c.Request().Method, "route", route, "status", code, "took", time.Since(start))
		}
		return err
	}
}

// limitBody refuses bodies over MaxBodyBytes: at once when Content-Length
// says so, and otherwise as soon as reading passes the limit.
func (s *Server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength > s.cfg.MaxBodyBytes {
			return problemFor(&http.MaxBytesError{Limit: s.cfg.MaxBodyBytes})
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, s.cfg.MaxBodyBytes)
		return next(c)
	}
}
