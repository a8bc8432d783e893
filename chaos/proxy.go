package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrProxyClosed is returned by Proxy methods after Close.
var ErrProxyClosed = errors.New("chaos: proxy closed")

// ProxyConfig configures a Proxy.
type ProxyConfig struct {
	// Listen is the address to accept on. Default "127.0.0.1:0".
	Listen string
	// Upstream is the address every connection is forwarded to. Required.
	Upstream string
	// DialTimeout bounds the connection to Upstream. Default 2 s.
	DialTimeout time.Duration
	// Seed drives ResetRate's draws; 0 picks a random seed.
	Seed uint64
	// Logger receives one line per injected fault (nil = discard).
	Logger *slog.Logger
}

func (c *ProxyConfig) setDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first bad setting.
func (c ProxyConfig) Validate() error {
	if c.Upstream == "" {
		return errors.New("chaos: proxy needs an upstream address")
	}
	if _, _, err := net.SplitHostPort(c.Upstream); err != nil {
		return fmt.Errorf("chaos: proxy upstream %q: %w", c.Upstream, err)
	}
	if c.DialTimeout < 0 {
		return errors.New("chaos: proxy dial timeout must not be negative")
	}
	return nil
}

// Faults is what the proxy does to connections. The zero value forwards
// everything untouched. Refuse, Status and ResetAfter are decided when a
// connection is accepted, so changing them affects new connections only
// (call DropAll to force clients onto new ones); Latency applies at once.
type Faults struct {
	// Latency delays every chunk forwarded, in either direction.
	Latency time.Duration
	// Refuse resets every new connection before reading from it, the way a
	// crashed load balancer or a full accept queue looks to a client.
	Refuse bool
	// Status, when non-zero, answers the first request on each new
	// connection with this HTTP status and an S3-style XML error, without
	// forwarding anything, then closes the connection.
	Status int
	// ResetAfter, when positive, resets a connection (both sides, RST) once
	// that many bytes went from the client to the upstream: a connection
	// cut in the middle of an upload.
	ResetAfter int64
	// ResetRate is the share of new connections ResetAfter applies to
	// (0 or ≥1 means all of them).
	ResetRate float64
	// DownStatus, when non-zero, is the HTTP status answered when the
	// upstream cannot be reached (a gateway in front of a stopped server);
	// zero resets the client's connection instead.
	DownStatus int
}

// Stats counts what the proxy did since it started.
type Stats struct {
	Accepted     int64 // connections accepted
	Refused      int64 // reset at once (Faults.Refuse)
	Answered     int64 // answered with Faults.Status or DownStatus
	Resets       int64 // reset mid-stream (Faults.ResetAfter)
	Dropped      int64 // reset by DropAll
	DialFailures int64 // upstream unreachable
	BytesUp      int64 // client → upstream
	BytesDown    int64 // upstream → client
}

// Proxy is a TCP proxy that injects faults between a client and one
// upstream. It is safe for concurrent use.
type Proxy struct {
	cfg ProxyConfig
	ln  net.Listener

	mu     sync.Mutex
	faults Faults
	rng    *rand.Rand
	conns  map[*pair]struct{}
	closed bool

	wg    sync.WaitGroup
	stats struct {
		accepted, refused, answered, resets, dropped, dialFailures, up, down atomic.Int64
	}
}

// pair is one proxied connection.
type pair struct {
	client, upstream net.Conn
	once             sync.Once
}

// StartProxy listens on cfg.Listen and forwards to cfg.Upstream until Close
// or until ctx ends.
func StartProxy(ctx context.Context, cfg ProxyConfig) (*Proxy, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy listen: %w", err)
	}
	p := &Proxy{cfg: cfg, ln: ln, conns: map[*pair]struct{}{},
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	p.wg.Add(1)
	go p.acceptLoop() //nolint:contextcheck // ctx ending closes the proxy (below); each dial has its own DialTimeout
	if ctx.Done() != nil {
		go func() {
			<-ctx.Done()
			_ = p.Close()
		}()
	}
	return p, nil
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is "http://" + Addr.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// SetFaults replaces the faults.
func (p *Proxy) SetFaults(f Faults) {
	p.mu.Lock()
	p.faults = f
	p.mu.Unlock()
	p.cfg.Logger.Info("proxy faults", "faults", fmt.Sprintf("%+v", f))
}

// Faults returns the current faults.
func (p *Proxy) Faults() Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults
}

// DropAll resets every open connection and returns how many there were.
func (p *Proxy) DropAll() int {
	p.mu.Lock()
	ps := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		ps = append(ps, c)
	}
	p.mu.Unlock()
	for _, c := range ps {
		c.reset()
	}
	p.stats.dropped.Add(int64(len(ps)))
	return len(ps)
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted: p.stats.accepted.Load(), Refused: p.stats.refused.Load(), Answered: p.stats.answered.Load(),
		Resets: p.stats.resets.Load(), Dropped: p.stats.dropped.Load(), DialFailures: p.stats.dialFailures.Load(),
		BytesUp: p.stats.up.Load(), BytesDown: p.stats.down.Load(),
	}
}

// Close stops accepting, resets every open connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.stats.accepted.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

func (p *Proxy) handle(c net.Conn) {
	p.mu.Lock()
	f, closed := p.faults, p.closed
	resetAt := int64(0)
	if f.ResetAfter > 0 && (f.ResetRate <= 0 || f.ResetRate >= 1 || p.rng.Float64() < f.ResetRate) {
		resetAt = f.ResetAfter
	}
	p.mu.Unlock()
	if closed {
		resetConn(c)
		return
	}
	switch {
	case f.Refuse:
		p.stats.refused.Add(1)
		resetConn(c)
		return
	case f.Status != 0:
		p.stats.answered.Add(1)
		answer(c, f.Status)
		return
	}
	var d net.Dialer
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	up, err := d.DialContext(ctx, "tcp", p.cfg.Upstream)
	cancel()
	if err != nil {
		p.stats.dialFailures.Add(1)
		if f.DownStatus != 0 {
			p.stats.answered.Add(1)
			answer(c, f.DownStatus)
		} else {
			resetConn(c)
		}
		return
	}
	pr := &pair{client: c, upstream: up}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pr.reset()
		return
	}
	p.conns[pr] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, pr)
		p.mu.Unlock()
	}()

	done := make(chan struct{}, 2)
	go func() {
		p.pump(pr, up, c, &p.stats.up, resetAt)
		done <- struct{}{}
	}()
	go func() {
		p.pump(pr, c, up, &p.stats.down, 0)
		done <- struct{}{}
	}()
	<-done
	<-done
	pr.close()
}

// pump copies src to dst, applying Latency per chunk, and resets the pair
// once resetAt bytes (when positive) have been copied.
func (p *Proxy) pump(pr *pair, dst, src net.Conn, counter *atomic.Int64, resetAt int64) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		m, rerr := src.Read(buf)
		if m > 0 {
			chunk := buf[:m]
			cut := false
			if resetAt > 0 && n+int64(m) >= resetAt {
				chunk, cut = buf[:resetAt-n], true
			}
			if lat := p.Faults().Latency; lat > 0 {
				time.Sleep(lat)
			}
			if len(chunk) > 0 {
				if _, err := dst.Write(chunk); err != nil {
					pr.reset()
					return
				}
			}
			n += int64(len(chunk))
			counter.Add(int64(len(chunk)))
			if cut {
				p.stats.resets.Add(1)
				p.cfg.Logger.Info("proxy: reset mid-stream", "after_bytes", n)
				pr.reset()
				return
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				// Half-close so the other side sees the end of the stream
				// while its answer can still come back.
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			pr.reset()
			return
		}
	}
}

func (pr *pair) reset() {
	pr.once.Do(func() {
		resetConn(pr.client)
		resetConn(pr.upstream)
	})
}

func (pr *pair) close() {
	pr.once.Do(func() {
		_ = pr.client.Close()
		_ = pr.upstream.Close()
	})
}

// resetConn closes c with an RST instead of a FIN, so the peer sees
// "connection reset by peer".
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// answer reads one request head from c and answers it with status and an
// S3-style error document, then closes the connection.
func answer(c net.Conn, status int) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if strings.TrimRight(line, "\r\n") == "" {
			break
		}
	}
	code := "ServiceUnavailable"
	if status == http.StatusInternalServerError {
		code = "InternalError"
	}
	body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by the chaos proxy</Message></Error>`, code)
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	// Closing with an unread request body in the socket buffer would send an
	// RST that can overtake the answer; half-close and drain instead.
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.Copy(io.Discard, br)
}
