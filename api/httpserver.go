package api

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"edgepipe/pipeline"
)

// Environment variables of HTTPConfig (read by internal/app).
const (
	EnvHTTPReadHeaderTimeout = "EDGEPIPE_HTTP_READ_HEADER_TIMEOUT"
	EnvHTTPReadTimeout       = "EDGEPIPE_HTTP_READ_TIMEOUT"
	EnvHTTPIdleTimeout       = "EDGEPIPE_HTTP_IDLE_TIMEOUT"
	EnvHTTPMaxConns          = "EDGEPIPE_HTTP_MAX_CONNS"
	EnvSSEMaxAge             = "EDGEPIPE_SSE_MAX_AGE"
)

// HTTPConfig bounds what one client can hold of the HTTP server: how long
// it may take to send a request, how long an idle keep-alive connection
// stays open, and how many connections are served at once. Without these a
// client trickling a body one byte every few seconds (slowloris) holds a
// handler, a connection and a goroutine indefinitely.
type HTTPConfig struct {
	// ReadHeaderTimeout bounds reading the request line and headers.
	// Default 10 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included.
	// Default 60 s (a 1 MiB body at 20 KiB/s). Event streams and result
	// downloads lift it once the request is read: they are bounded by a
	// per-write deadline and, for streams, Config.SSEMaxAge.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sent no new request
	// for this long. Default 120 s.
	IdleTimeout time.Duration
	// MaxConns caps the connections served at once; further ones wait in
	// the listen backlog until one closes. Default 1024.
	MaxConns int
}

// HTTP defaults.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxConns          = 1024
	// MaxMaxConns keeps the cap below what a process's file descriptor
	// limit usually allows.
	MaxMaxConns = 65536
)

// SetDefaults fills zero fields.
func (c *HTTPConfig) SetDefaults() {
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
}

// Validate reports the first bad setting (after defaults).
func (c HTTPConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{pipeline.ErrInvalidInput}, args...)...)
	}
	switch {
	case c.ReadHeaderTimeout < 100*time.Millisecond:
		return bad("%s: %s is below 100ms", EnvHTTPReadHeaderTimeout, c.ReadHeaderTimeout)
	case c.ReadTimeout < c.ReadHeaderTimeout:
		return bad("%s: %s is below the header timeout %s (it includes reading the headers)", EnvHTTPReadTimeout, c.ReadTimeout, c.ReadHeaderTimeout)
	case c.IdleTimeout < 100*time.Millisecond:
		return bad("%s: %s is below 100ms", EnvHTTPIdleTimeout, c.IdleTimeout)
	case c.MaxConns < 1 || c.MaxConns > MaxMaxConns:
		return bad("%s: %d is not from 1 to %d", EnvHTTPMaxConns, c.MaxConns, MaxMaxConns)
	}
	return nil
}

// NewHTTPServer returns an http.Server for h with the timeouts of c
// (defaults applied, then validated). There is deliberately no
// WriteTimeout: it bounds a whole response and would cut off event streams
// and large downloads; their writes carry deadlines of their own instead.
func NewHTTPServer(h http.Handler, c HTTPConfig) (*http.Server, error) {
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}, nil
}

// LimitListener serves at most c.MaxConns connections of l at once
// (defaults applied); Accept waits while the cap is reached.
func LimitListener(l net.Listener, c HTTPConfig) net.Listener {
	c.SetDefaults()
	return netutil.LimitListener(l, c.MaxConns)
}
