package chaos

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is an HTTP server that counts the request body bytes it read.
func upstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
		w.Header().Set("X-Read", "yes")
		io.WriteString(w, "ok "+r.Method)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func startProxy(t *testing.T, up string) *Proxy {
	t.Helper()
	p, err := StartProxy(t.Context(), ProxyConfig{Upstream: up, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func noKeepAlive() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

func TestProxyFaults(t *testing.T) {
	t.Parallel()
	const body = 1 << 20
	tests := []struct {
		name   string
		faults Faults
		// want: status code, or 0 for a transport error
		wantStatus int
		check      func(t *testing.T, s Stats, upstreamRead int64, took time.Duration)
	}{
		{name: "clean", wantStatus: 200, check: func(t *testing.T, s Stats, read int64, _ time.Duration) {
			if read != body || s.BytesUp < body {
				t.Errorf("upstream read %d bytes, proxy forwarded %d; want %d", read, s.BytesUp, body)
			}
		}},
		{name: "latency", faults: Faults{Latency: 30 * time.Millisecond}, wantStatus: 200,
			check: func(t *testing.T, _ Stats, _ int64, took time.Duration) {
				// at least one chunk each way
				if took < 60*time.Millisecond {
					t.Errorf("request took %v with 30ms per chunk", took)
				}
			}},
		{name: "refuse", faults: Faults{Refuse: true}, check: func(t *testing.T, s Stats, read int64, _ time.Duration) {
			if s.Refused != 1 || read != 0 {
				t.Errorf("refused %d, upstream read %d; want 1 and 0", s.Refused, read)
			}
		}},
		{name: "status", faults: Faults{Status: 503}, wantStatus: 503, check: func(t *testing.T, s Stats, read int64, _ time.Duration) {
			if s.Answered != 1 || read != 0 {
				t.Errorf("answered %d, upstream read %d; want 1 and 0", s.Answered, read)
			}
		}},
		{name: "reset mid-upload", faults: Faults{ResetAfter: 100 << 10}, check: func(t *testing.T, s Stats, read int64, _ time.Duration) {
			if s.Resets != 1 {
				t.Errorf("resets = %d, want 1", s.Resets)
			}
			if s.BytesUp != 100<<10 || read >= body {
				t.Errorf("forwarded %d bytes (want exactly %d), upstream read %d of %d", s.BytesUp, 100<<10, read, body)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, read := upstream(t)
			p := startProxy(t, srv.Listener.Addr().String())
			p.SetFaults(tt.faults)
			start := time.Now()
			resp, err := noKeepAlive().Post(p.URL()+"/x", "application/octet-stream", bytes.NewReader(make([]byte, body)))
			took := time.Since(start)
			switch {
			case tt.wantStatus == 0 && err == nil:
				resp.Body.Close()
				t.Fatalf("got %s, want a transport error", resp.Status)
			case tt.wantStatus != 0 && err != nil:
				t.Fatalf("got %v, want %d", err, tt.wantStatus)
			case err == nil:
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.wantStatus {
					t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tt.wantStatus, b)
				}
				if tt.wantStatus == 503 && !strings.Contains(string(b), "<Code>ServiceUnavailable</Code>") {
					t.Errorf("503 body %q is not an S3 error", b)
				}
			}
			time.Sleep(50 * time.Millisecond) // let the upstream handler finish counting
			tt.check(t, p.Stats(), read.Load(), took)
		})
	}
}

func TestProxyUpstreamDown(t *testing.T) {
	t.Parallel()
	// An address nothing listens on: a port outside the ephemeral range
	// (freePort), which no :0 listener of a parallel test can be given.
	dead := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for _, tt := range []struct {
		name       string
		downStatus int
	}{{"reset", 0}, {"gateway 503", 503}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, dead)
			p.SetFaults(Faults{DownStatus: tt.downStatus})
			resp, err := noKeepAlive().Get(p.URL() + "/")
			if tt.downStatus == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got %s, want a transport error", resp.Status)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.downStatus {
					t.Fatalf("status %d, want %d", resp.StatusCode, tt.downStatus)
				}
			}
			if s := p.Stats(); s.DialFailures != 1 {
				t.Errorf("dial failures %d, want 1", s.DialFailures)
			}
		})
	}
}

func TestProxyDropAll(t *testing.T) {
	t.Parallel()
	// The upstream holds the response until released, so the connection is
	// open when DropAll runs.
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	p := startProxy(t, srv.Listener.Addr().String())
	errc := make(chan error, 1)
	go func() {
		resp, err := noKeepAlive().Get(p.URL() + "/")
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Accepted == 0 || p.DropAll() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the proxy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("request succeeded through a dropped connection")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("request still running after DropAll")
	}
	if s := p.Stats(); s.Dropped < 1 {
		t.Errorf("dropped %d, want ≥ 1", s.Dropped)
	}
}

func TestProxyResetRate(t *testing.T) {
	t.Parallel()
	srv, _ := upstream(t)
	p := startProxy(t, srv.Listener.Addr().String())
	p.SetFaults(Faults{ResetAfter: 1, ResetRate: 0.5})
	failed := 0
	const n = 40
	for range n {
		resp, err := noKeepAlive().Post(p.URL()+"/", "text/plain", strings.NewReader("hello"))
		if err != nil {
			failed++
			continue
		}
		resp.Body.Close()
	}
	// With seed 1 and rate 0.5 both outcomes must occur; the exact split is
	// the generator's business.
	if failed == 0 || failed == n {
		t.Fatalf("%d of %d requests failed at reset rate 0.5", failed, n)
	}
	if s := p.Stats(); s.Resets != int64(failed) {
		t.Errorf("resets %d, failed requests %d", s.Resets, failed)
	}
}

func TestProxyConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  ProxyConfig
		ok   bool
	}{
		{"no upstream", ProxyConfig{}, false},
		{"no port", ProxyConfig{Upstream: "127.0.0.1"}, false},
		{"negative dial timeout", ProxyConfig{Upstream: "127.0.0.1:9", DialTimeout: -1}, false},
		{"ok", ProxyConfig{Upstream: "127.0.0.1:9"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.cfg.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
	if _, err := StartProxy(context.Background(), ProxyConfig{}); err == nil {
		t.Fatal("StartProxy without an upstream succeeded")
	}
}

func TestProxyClose(t *testing.T) {
	t.Parallel()
	srv, _ := upstream(t)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := StartProxy(ctx, ProxyConfig{Upstream: srv.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // ending the context closes the proxy
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("proxy still accepting after its context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
