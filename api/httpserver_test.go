package api

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

func TestHTTPConfigValidation(t *testing.T) {
	t.Parallel()
	var def HTTPConfig
	def.SetDefaults()
	if def.ReadHeaderTimeout != DefaultReadHeaderTimeout || def.ReadTimeout != DefaultReadTimeout ||
		def.IdleTimeout != DefaultIdleTimeout || def.MaxConns != DefaultMaxConns || def.Validate() != nil {
		t.Fatalf("defaults %+v: %v", def, def.Validate())
	}
	for _, tc := range []struct {
		cfg  HTTPConfig
		want string
	}{
		{HTTPConfig{ReadHeaderTimeout: time.Millisecond}, EnvHTTPReadHeaderTimeout},
		{HTTPConfig{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Second}, EnvHTTPReadTimeout},
		{HTTPConfig{IdleTimeout: time.Millisecond}, EnvHTTPIdleTimeout},
		{HTTPConfig{MaxConns: -1}, EnvHTTPMaxConns},
		{HTTPConfig{MaxConns: MaxMaxConns + 1}, EnvHTTPMaxConns},
	} {
		c := tc.cfg
		c.SetDefaults()
		err := c.Validate()
		if !errors.Is(err, pipeline.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
		if _, err := NewHTTPServer(http.NotFoundHandler(), tc.cfg); err == nil {
			t.Errorf("%+v: NewHTTPServer accepted it", tc.cfg)
		}
	}
	hs, err := NewHTTPServer(http.NotFoundHandler(), HTTPConfig{ReadTimeout: 30 * time.Second})
	if err != nil || hs.ReadTimeout != 30*time.Second || hs.ReadHeaderTimeout != DefaultReadHeaderTimeout ||
		hs.IdleTimeout != DefaultIdleTimeout || hs.WriteTimeout != 0 {
		t.Fatalf("%+v %v", hs, err)
	}
}

// serveReal serves e on a real loopback listener the way internal/app does
// (NewHTTPServer + LimitListener), every exchange checked against
// openapi.yaml, and returns its address.
func serveReal(t *testing.T, e *testEnv, hc HTTPConfig) string {
	t.Helper()
	hs, err := NewHTTPServer(e.checked(t), hc)
	if err != nil {
		t.Fatal(err)
	}
	hs.RegisterOnShutdown(e.srv.CloseStreams)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(LimitListener(l, hc))
	t.Cleanup(func() { e.srv.CloseStreams(); hs.Close() })
	return l.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// trickle writes s one byte every gap until done is closed or a write
// fails (the server hung up), and reports how many bytes it got out.
func trickle(c net.Conn, s string, gap time.Duration, done <-chan struct{}) <-chan int {
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		for i := 0; i < len(s); i++ {
			select {
			case <-done:
				return
			case <-time.After(gap):
			}
			if _, err := c.Write([]byte{s[i]}); err != nil {
				return
			}
			n++
		}
	}()
	return sent
}

// readUntilClosed reads what the server sends until it closes the
// connection, failing if that takes longer than limit.
func readUntilClosed(t *testing.T, c net.Conn, limit time.Duration) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(limit))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still holds the connection after %s (got %q)", limit, b)
	}
	return string(b), time.Since(start)
}

// A client that sends its headers one byte at a time (slowloris) loses the
// connection at ReadHeaderTimeout, whatever it still has to send.
func TestSlowlorisHeadersAreCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := serveReal(t, e, HTTPConfig{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 5 * time.Second})
	c := dial(t, addr)
	done := make(chan struct{})
	defer close(done)
	head := "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 20)
	sent := trickle(c, head, 20*time.Millisecond, done)
	got, took := readUntilClosed(t, c, 3*time.Second)
	// net/http itself answers a request whose headers never completed
	// (a bare 400, before any handler could make it a problem), then
	// hangs up.
	if took > 2*time.Second || (got != "" && !strings.HasPrefix(got, "HTTP/1.1 400 ")) {
		t.Fatalf("answered %q after %s", got, took)
	}
	if n := <-sent; n >= len(head) {
		t.Fatalf("all %d header bytes went out before the cut", n)
	}
}

// A client that sends its headers at once and then trickles the body gets a
// 408 problem at ReadTimeout and the connection is closed: the handler does
// not wait for the rest.
func TestSlowlorisBodyIsCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := serveReal(t, e, HTTPConfig{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 600 * time.Millisecond})
	for _, tc := range []struct{ path, auth, body string }{
		{"/v1/jobs", "Bearer " + tokAcme, validBody},
		// Padded so that trickling it takes well over ReadTimeout.
		{"/v1/admin/jobs/v1-x/decision", "Bearer " + tokAdmin, `{"decision":"retry"` + strings.Repeat(" ", 80) + `}`},
		{"/v1/admin/dead-letters/1/discard", "Bearer " + tokAdmin, `{"reason":"x"` + strings.Repeat(" ", 80) + `}`},
		{"/v1/admin/dead-letters/redrive", "Bearer " + tokAdmin, `{"filter":{"tenant":"acme"}` + strings.Repeat(" ", 80) + `}`},
		{"/v1/admin/dead-letters/discard", "Bearer " + tokAdmin, `{"filter":{"tenant":"acme"},"reason":"x"` + strings.Repeat(" ", 80) + `}`},
	} {
		c := dial(t, addr)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Type: application/json\r\nIdempotency-Key: slow-1\r\nContent-Length: %d\r\n\r\n",
			tc.path, tc.auth, len(tc.body))
		done := make(chan struct{})
		sent := trickle(c, tc.body, 30*time.Millisecond, done)
		got, took := readUntilClosed(t, c, 3*time.Second)
		close(done)
		if n := <-sent; n >= len(tc.body) {
			t.Fatalf("%s: the whole body (%d bytes) went out before the cut", tc.path, n)
		}
		if took > 2*time.Second || !strings.HasPrefix(got, "HTTP/1.1 408 ") || !strings.Contains(got, ProblemContentType) ||
			!strings.Contains(got, `"code":"request_timeout"`) || !strings.Contains(got, "Connection: close") {
			t.Fatalf("%s: after %s: %q", tc.path, took, got)
		}
	}
	jobs, _, _ := e.store.ListJobs(t.Context(), pipeline.ListFilter{AllTenants: true})
	if len(jobs) != 0 {
		t.Fatalf("a cut-off submission created %d jobs", len(jobs))
	}
}

// An idle keep-alive connection is closed after IdleTimeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := serveReal(t, e, HTTPConfig{IdleTimeout: 300 * time.Millisecond})
	c := dial(t, addr)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("%v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	start := time.Now()
	c.SetReadDeadline(start.Add(3 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection not closed by the server: %v after %s", err, time.Since(start))
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 2*time.Second {
		t.Fatalf("closed after %s, want about 300ms", took)
	}
}

// MaxConns connections are served at once; one more waits until one of
// them closes, then it is served.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := serveReal(t, e, HTTPConfig{MaxConns: 2, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second})
	// Two connections that send nothing hold both slots.
	a, b := dial(t, addr), dial(t, addr)
	_ = b
	time.Sleep(100 * time.Millisecond) // let the server accept them
	c := dial(t, addr)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(400 * time.Millisecond))
	r := bufio.NewReader(c)
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("a third connection was served while two held the cap")
	}
	a.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a slot freed: %v %v", resp, err)
	}
}

// An event stream is exempt from ReadTimeout (which would cancel its
// context) and instead ends itself at SSEMaxAge, telling the client why.
func TestEventStreamOutlivesReadTimeoutUntilMaxAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.SSEMaxAge = 1500 * time.Millisecond; c.SSEHeartbeat = 100 * time.Millisecond })
	addr := serveReal(t, e, HTTPConfig{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	j := e.mustSubmit(t, tokAcme, "k1")
	e.claim(t, "render-v1") // running: the stream stays open
	start := time.Now()
	s := openStream(t, "http://"+addr, j.ID, "", "")
	var comments []string
	var events []sseEvent
	for {
		ev, err := s.next(t, &comments)
		if errors.Is(err, io.EOF) {
			break
		}
		events = append(events, ev)
	}
	took := time.Since(start)
	if took < 1400*time.Millisecond || took > 5*time.Second {
		t.Fatalf("stream ended after %s (ReadTimeout 300ms, max age 1.5s); comments %q", took, comments)
	}
	if len(events) == 0 || len(comments) < 5 || comments[len(comments)-1] != ": stream age limit reached; reconnect with Last-Event-ID" {
		t.Fatalf("events %d, comments %q", len(events), comments)
	}
}
