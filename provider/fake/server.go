package fake

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"edgepipe/pipeline"
)

// Sentinel errors.
var (
	// ErrFFmpegUnavailable: the configured ffmpeg cannot be run, so videos
	// cannot be rendered.
	ErrFFmpegUnavailable = errors.New("fake: ffmpeg unavailable")
	// ErrAlreadyStarted: Start was called on a running server.
	ErrAlreadyStarted = errors.New("fake: server already started")
	// ErrClosed: the server was stopped or closed.
	ErrClosed = errors.New("fake: server closed")
)

// Server imitates the three providers. Create it with New; serve
// Handler() yourself or call Start. Safe for concurrent use.
type Server struct {
	cfg      Config
	log      *slog.Logger
	videoErr error
	seed     uint64
	mux      *http.ServeMux
	ledger   *ledger
	idem     *idemStore

	chaosMu sync.Mutex
	faults  Faults
	rng     *mrand.Rand // fault draws: a fixed number per faultable request
	idRng   *mrand.Rand // video ids, separate so ids do not shift fault draws

	videosMu sync.Mutex
	videos   map[string]*videoJob

	cacheDir  string
	ownCache  bool
	renderSem chan struct{}
	bgCtx     context.Context
	bgCancel  context.CancelFunc
	bg        sync.WaitGroup

	lifeMu  sync.Mutex
	httpSrv *http.Server
	baseURL string
	closed  bool
}

// New builds a Server. It fails on an invalid config, and when
// cfg.RequireFFmpeg is set and ffmpeg cannot be found (the error matches
// ErrFFmpegUnavailable). Without RequireFFmpeg a missing ffmpeg is logged as
// a warning and reported by VideoUnavailable.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		ledger:    newLedger(),
		idem:      newIdemStore(),
		faults:    cfg.Faults,
		videos:    map[string]*videoJob{},
		renderSem: make(chan struct{}, cfg.RenderConcurrency),
	}
	if _, err := exec.LookPath(cfg.FFmpegPath); err != nil {
		s.videoErr = fmt.Errorf("%w: %q: %v", ErrFFmpegUnavailable, cfg.FFmpegPath, err)
		if cfg.RequireFFmpeg {
			return nil, s.videoErr
		}
		s.log.Warn("fake provider: videos disabled, POST /v1/videos will answer 503", "err", s.videoErr)
	}
	s.seed = cfg.Seed
	if s.seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
		s.seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	s.rng = mrand.New(mrand.NewPCG(s.seed, 0x6564676570697065))   // "edgepipe"
	s.idRng = mrand.New(mrand.NewPCG(s.seed, 0x766964656f696473)) // "videoids"
	s.cacheDir = cfg.CacheDir
	if s.cacheDir == "" {
		s.ownCache = true // created on the first render
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	s.routes()
	s.log.Info("fake provider ready", "seed", s.seed, "faults", s.faults.String(), "video_processing", cfg.VideoProcessing)
	return s, nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/images", s.handleImage)
	m.HandleFunc("POST /v1/speech", s.handleSpeech)
	m.HandleFunc("POST /v1/videos", s.handleVideoSubmit)
	m.HandleFunc("GET /v1/videos/{id}", s.handleVideoStatus)
	m.HandleFunc("GET /v1/videos/{id}/content", s.handleVideoContent)
	m.HandleFunc("GET /ledger", s.handleLedger)
	m.HandleFunc("POST /ledger/reset", s.handleLedgerReset)
	m.HandleFunc("GET /faults", s.handleGetFaults)
	m.HandleFunc("PUT /faults", s.handlePutFaults)
	m.HandleFunc("GET /healthz", s.handleHealthz)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			s.ledger.call()
		}
		writeError(w, http.StatusNotFound, CodeNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	s.mux = m
}

// Handler returns the HTTP handler of the fake providers.
func (s *Server) Handler() http.Handler { return s.mux }

// Seed returns the effective seed of the fault generator.
func (s *Server) Seed() uint64 { return s.seed }

// VideoUnavailable returns why videos cannot be rendered (matching
// ErrFFmpegUnavailable), or nil.
func (s *Server) VideoUnavailable() error { return s.videoErr }

// SetFaults replaces the fault configuration. The generator keeps its state.
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.chaosMu.Lock()
	s.faults = f
	s.chaosMu.Unlock()
	s.log.Info("fake provider: faults changed", "faults", f.String())
	return nil
}

// Faults returns the current fault configuration.
func (s *Server) Faults() Faults {
	s.chaosMu.Lock()
	defer s.chaosMu.Unlock()
	return s.faults
}

// Ledger returns what has been billed so far.
func (s *Server) Ledger() LedgerSnapshot { return s.ledger.snapshot() }

// ResetLedger zeroes the ledger. The image idempotency store and video jobs
// are kept, so a replay after a reset is still not billed.
func (s *Server) ResetLedger() { s.ledger.reset() }

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves in the
// background until Stop. ctx bounds only the listen. It returns the base URL,
// e.g. "http://127.0.0.1:41234"; an unspecified host (":0", "0.0.0.0:0") is
// reported as 127.0.0.1.
func (s *Server) Start(ctx context.Context, addr string) (string, error) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	if s.httpSrv != nil {
		return "", ErrAlreadyStarted
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("fake: listen %s: %w", addr, err)
	}
	tcp, _ := ln.Addr().(*net.TCPAddr)
	host := ln.Addr().String()
	if tcp != nil && tcp.IP.IsUnspecified() {
		host = net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
	}
	s.httpSrv = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.baseURL = "http://" + host
	srv := s.httpSrv
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("fake provider: serve failed", "err", err)
		}
	}()
	s.log.Info("fake provider listening", "url", s.baseURL)
	return s.baseURL, nil
}

// Run is Start followed by Stop once ctx is done, for the standalone
// `edgepipe fake-provider` command: it blocks until ctx is canceled, then
// shuts down within shutdownTimeout. The base URL is logged at Info and
// available from BaseURL.
func (s *Server) Run(ctx context.Context, addr string, shutdownTimeout time.Duration) error {
	if _, err := s.Start(ctx, addr); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	return s.Stop(stopCtx)
}

// BaseURL returns the URL Start reported, or "" before Start.
func (s *Server) BaseURL() string {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return s.baseURL
}

// Stop shuts the listener down gracefully (bounded by ctx), then Closes.
// Stopping a server that was never started only Closes it.
func (s *Server) Stop(ctx context.Context) error {
	s.lifeMu.Lock()
	srv := s.httpSrv
	s.lifeMu.Unlock()
	var err error
	if srv != nil {
		if err = srv.Shutdown(ctx); err != nil {
			err = errors.Join(fmt.Errorf("fake: shutdown: %w", err), srv.Close())
		}
	}
	return errors.Join(err, s.Close())
}

// Close kills running renders, waits for them and removes the video cache
// directory if New created it. It does not stop a listener started by Start
// (use Stop). Safe to call more than once.
func (s *Server) Close() error {
	s.lifeMu.Lock()
	if s.closed {
		s.lifeMu.Unlock()
		return nil
	}
	s.closed = true
	s.lifeMu.Unlock()

	s.bgCancel()
	s.bg.Wait()
	s.videosMu.Lock()
	dir, own := s.cacheDir, s.ownCache
	s.videosMu.Unlock()
	if own && dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("fake: remove video cache: %w", err)
		}
	}
	return nil
}

func (s *Server) handleLedger(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Ledger())
}

func (s *Server) handleLedgerReset(w http.ResponseWriter, _ *http.Request) {
	s.ResetLedger()
	w.WriteHeader(http.StatusNoContent)
}

type faultsBody struct {
	Spec string `json:"spec"`
}

func (s *Server) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, faultsBody{Spec: s.Faults().String()})
}

// handlePutFaults lets a test driving a standalone fake change faults at
// runtime: body {"spec": "..."}.
func (s *Server) handlePutFaults(w http.ResponseWriter, r *http.Request) {
	var b faultsBody
	if !decodeJSON(w, r, &b) {
		return
	}
	f, err := ParseFaults(b.Spec)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	if err := s.SetFaults(f); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, faultsBody{Spec: f.String()})
}

func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	body := map[string]any{"status": "ok", "video": s.videoErr == nil}
	if s.videoErr != nil {
		body["video_error"] = s.videoErr.Error()
	}
	writeJSON(w, http.StatusOK, body)
}

// clock is the server's time source.
func (s *Server) clock() pipeline.Clock { return s.cfg.Clock }
