package app

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"edgepipe/api"
)

func TestHTTPSettings(t *testing.T) {
	t.Parallel()
	read := func(env map[string]string) (Config, error) {
		var environ []string
		for k, v := range env {
			environ = append(environ, k+"="+v)
		}
		return FromEnv(func(k string) string { return env[k] }, environ)
	}
	c, err := read(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.ReadHeaderTimeout != api.DefaultReadHeaderTimeout || c.HTTP.ReadTimeout != api.DefaultReadTimeout ||
		c.HTTP.IdleTimeout != api.DefaultIdleTimeout || c.HTTP.MaxConns != api.DefaultMaxConns || c.SSEMaxAge != api.DefaultSSEMaxAge {
		t.Fatalf("defaults: %+v, SSE max age %s", c.HTTP, c.SSEMaxAge)
	}
	c, err = read(map[string]string{"EDGEPIPE_HTTP_READ_HEADER_TIMEOUT": "2s", "EDGEPIPE_HTTP_READ_TIMEOUT": "15s",
		"EDGEPIPE_HTTP_IDLE_TIMEOUT": "1m", "EDGEPIPE_HTTP_MAX_CONNS": "64", "EDGEPIPE_SSE_MAX_AGE": "5m"})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP != (api.HTTPConfig{ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 15 * time.Second, IdleTimeout: time.Minute, MaxConns: 64}) ||
		c.SSEMaxAge != 5*time.Minute {
		t.Fatalf("%+v %s", c.HTTP, c.SSEMaxAge)
	}
	for k, v := range map[string]string{
		"EDGEPIPE_HTTP_READ_HEADER_TIMEOUT": "1ms",
		"EDGEPIPE_HTTP_READ_TIMEOUT":        "soon",
		"EDGEPIPE_HTTP_IDLE_TIMEOUT":        "-1s",
		"EDGEPIPE_HTTP_MAX_CONNS":           "0",
		"EDGEPIPE_SSE_MAX_AGE":              "10ms",
	} {
		if _, err := read(map[string]string{k: v}); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
	// The whole request cannot take less time than its headers.
	if _, err := read(map[string]string{"EDGEPIPE_HTTP_READ_HEADER_TIMEOUT": "30s", "EDGEPIPE_HTTP_READ_TIMEOUT": "5s"}); err == nil ||
		!strings.Contains(err.Error(), "EDGEPIPE_HTTP_READ_TIMEOUT") {
		t.Errorf("read timeout below header timeout: %v", err)
	}
}

// Build hands the configured limits to the server it makes.
func TestBuildAppliesHTTPSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir, map[string]string{"EDGEPIPE_HTTP_READ_TIMEOUT": "20s", "EDGEPIPE_HTTP_IDLE_TIMEOUT": "40s"})
	a, err := Open(t.Context(), cfg, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p, err := a.Build(t.Context(), true, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Listener.Close()
	if p.HTTP.ReadTimeout != 20*time.Second || p.HTTP.IdleTimeout != 40*time.Second || p.HTTP.ReadHeaderTimeout != api.DefaultReadHeaderTimeout {
		t.Fatalf("%+v", p.HTTP)
	}
}

// The listener Build makes serves at most EDGEPIPE_HTTP_MAX_CONNS
// connections at once.
func TestBuildCapsConnections(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir(), map[string]string{"EDGEPIPE_HTTP_MAX_CONNS": "1"})
	a, err := Open(t.Context(), cfg, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p, err := a.Build(t.Context(), true, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	go p.HTTP.Serve(p.Listener)
	defer p.HTTP.Close()
	addr := p.Listener.Addr().String()
	hold, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	time.Sleep(100 * time.Millisecond) // accepted: the one slot is taken
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(400 * time.Millisecond))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("a second connection was served with EDGEPIPE_HTTP_MAX_CONNS=1")
	}
	hold.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("once the slot freed: %v %v", resp, err)
	}
}

// EDGEPIPE_DATABASE_URL is a Postgres URL or empty (SQLite); anything else
// is refused at start-up without echoing the value, which may hold a
// password.
func TestDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		url, kind string
		ok        bool
	}{
		{"", "sqlite", true},
		{"postgres://edgepipe:pw@db:5432/edgepipe", "postgres", true},
		{"postgresql://db/edgepipe?sslmode=disable", "postgres", true},
		{"mysql://u:sekrit@db/x", "", false},
		{"postgres:///nohost", "", false},
		{"sekrit", "", false},
	} {
		env := map[string]string{"EDGEPIPE_DATABASE_URL": tt.url}
		cfg, err := FromEnv(func(k string) string { return env[k] }, nil)
		if tt.ok != (err == nil) {
			t.Errorf("%q: err = %v", tt.url, err)
			continue
		}
		if err != nil {
			if strings.Contains(err.Error(), "sekrit") || !strings.Contains(err.Error(), "EDGEPIPE_DATABASE_URL") {
				t.Errorf("%q: error %q must name the setting and not echo it", tt.url, err)
			}
			continue
		}
		if cfg.DatabaseKind() != tt.kind || cfg.DatabaseURL() != tt.url {
			t.Errorf("%q: kind %s url %q", tt.url, cfg.DatabaseKind(), cfg.DatabaseURL())
		}
	}
}
