package main

import (
	"cmp"
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
)

// memProofs is a pipeline.ProofStore in memory with the drivers' rules (the
// latest of a key is the last recorded), so a test sees exactly what the
// command recorded; TestProviderProbeRecordsInTheJobStore uses the real
// store.
type memProofs struct {
	mu     sync.Mutex
	proofs []pipeline.Proof
}

func (m *memProofs) RecordProof(_ context.Context, p *pipeline.RecordProofParams) (int64, error) {
	if err := p.Proof.Check(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	pr := p.Proof
	pr.ID = int64(len(m.proofs) + 1)
	m.proofs = append(m.proofs, pr)
	return pr.ID, nil
}

func (m *memProofs) LatestProof(_ context.Context, p *pipeline.LatestProofParams) (pipeline.Proof, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.proofs) - 1; i >= 0; i-- {
		if pr := m.proofs[i]; pr.Provider == p.Provider && pr.Op == p.Op && pr.Model == p.Model && pr.Endpoint == p.Endpoint {
			return pr, nil
		}
	}
	return pipeline.Proof{}, pipeline.ErrNotFound
}

func (m *memProofs) ListProofs(_ context.Context, p *pipeline.ListProofsParams) ([]pipeline.Proof, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	latest := map[[4]string]pipeline.Proof{}
	for _, pr := range m.proofs {
		latest[[4]string{pr.Provider, pr.Op, pr.Model, pr.Endpoint}] = pr
	}
	var out []pipeline.Proof
	for _, pr := range latest {
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b pipeline.Proof) int { return cmp.Compare(b.ID, a.ID) })
	return out[:min(len(out), cmp.Or(p.Limit, pipeline.DefaultProofListLimit))], nil
}

func (m *memProofs) all() []pipeline.Proof {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.proofs)
}

// startProbeFake runs a real fake provider; stripKey puts a proxy in front
// that drops Idempotency-Key, so the key is not honoured and both calls are
// billed. It returns the fake and the URL to give EDGEPIPE_PROVIDER_URL.
func startProbeFake(t *testing.T, stripKey bool) (*fake.Server, string) {
	t.Helper()
	srv, err := fake.New(fake.Config{FFmpegPath: "/nonexistent/ffmpeg", CacheDir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	base, err := srv.Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if !stripKey {
		return srv, base
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		pr.Out.Host = pr.In.Host // as NewSingleHostReverseProxy did
		pr.Out.Header.Del(provider.HeaderIdempotencyKey)
	}}
	px := httptest.NewServer(rp)
	t.Cleanup(px.Close)
	return srv, px.URL
}

func TestProviderProbe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		stripKey bool
		args     []string
		code     int
		out      []string // regexps the output must match
		errText  string
		billed   int64 // images the fake billed
		verdict  pipeline.ProofVerdict
	}{
		{name: "without --yes nothing is sent", args: []string{"image"}, code: exitUsage,
			out:     []string{`(?m)^edgepipe provider probe sends 3 billable requests to http \(fake-image-1, kind fake, at http://127\.0\.0\.1:\d+\) for image, 1ms apart; rerun with --yes$`},
			errText: "nothing sent"},
		{name: "idempotent", args: []string{"image", "--yes"}, code: exitOK, billed: 2, verdict: pipeline.ProofIdempotent,
			out: []string{`(?m)^verdict: idempotent$`, `(?m)^detail: key probe-[0-9a-f]+; .*answers equal; billed once under the key$`,
				`(?m)^proof 1 recorded at 2026-12-02T10:00:00Z$`,
				`(?m)^image on http runs under idempotent_verified until 2027-01-01T10:00:00Z \(EDGEPIPE_PROOF_MAX_AGE 720h0m0s\)$`}},
		{name: "flags before OP", args: []string{"--yes", "--provider", "fake", "image"}, code: exitOK, billed: 2, verdict: pipeline.ProofIdempotent,
			out: []string{`(?m)^verdict: idempotent$`}},
		{name: "key not honoured", stripKey: true, args: []string{"image", "--yes"}, code: exitNotIdempotent, billed: 3,
			verdict: pipeline.ProofNotIdempotent,
			out:     []string{`(?m)^verdict: not_idempotent$`, `(?m)billed 0 times under the key \(want 1\)$`, `(?m)^proof 1 recorded`},
			errText: "image on http is not idempotent: it runs under sync"},
		{name: "sync operation", args: []string{"speech", "--yes"}, code: exitUsage,
			errText: "speech on http declares sync: it sends no idempotency key, so there is nothing to prove"},
		{name: "unknown operation", args: []string{"upscale", "--yes"}, code: exitUsage, errText: `unknown operation "upscale"`},
		{name: "unknown kind", args: []string{"image", "--provider", "dall-e", "--yes"}, code: exitUsage, errText: `unknown provider kind "dall-e"`},
		{name: "no OP", args: []string{"--yes"}, code: exitUsage, errText: "OP is required"},
		{name: "extra argument", args: []string{"image", "speech"}, code: exitUsage, errText: `unexpected argument "speech"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, base := startProbeFake(t, tc.stripKey)
			c := newTestCLI(t, "", provider.EnvURL, base)
			c.now = func() time.Time { return time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC) }
			store := &memProofs{}
			c.proofs = store
			err := c.provider(t.Context(), append([]string{"probe", "--interval", "1ms"}, tc.args...))
			if got := exitCode(err); got != tc.code {
				t.Fatalf("exit %d, want %d; err %v\nstdout:\n%s", got, tc.code, err, c.out)
			}
			if tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText) || strings.Contains(oneLine(err), "\n")) {
				t.Errorf("err %v, want one line with %q", err, tc.errText)
			}
			for _, re := range tc.out {
				if !regexp.MustCompile(re).MatchString(c.out.String()) {
					t.Errorf("stdout lacks %s:\n%s", re, c.out)
				}
			}
			l := srv.Ledger()
			if l.Billed.Image != tc.billed || (tc.billed == 0 && l.Calls != 0) {
				t.Errorf("ledger %+v: want %d images billed", l, tc.billed)
			}
			proofs := store.all()
			if tc.verdict == "" {
				if len(proofs) != 0 {
					t.Errorf("proofs %+v recorded, want none", proofs)
				}
				return
			}
			if len(proofs) != 1 || proofs[0].Verdict != tc.verdict || proofs[0].Provider != "http" || proofs[0].Op != "image" ||
				proofs[0].Model != "fake-image-1" || proofs[0].Endpoint != base || proofs[0].Calls != provider.ProbeCalls {
				t.Errorf("proofs %+v, want one %s proof of image on http", proofs, tc.verdict)
			}
		})
	}
}

// TestProviderProbeRecordsInTheJobStore runs the probe with the configured
// job store (the embedded SQLite): the proofs of an idempotent and a
// not_idempotent probe are recorded there and provider proofs lists them.
func TestProviderProbeRecordsInTheJobStore(t *testing.T) {
	t.Parallel()
	_, honest := startProbeFake(t, false)
	srv, stripped := startProbeFake(t, true)
	c := newTestCLI(t, "", provider.EnvURL, honest)
	if err := c.provider(t.Context(), []string{"probe", "image", "--interval", "1ms", "--yes"}); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^proof 1 recorded at `).MatchString(c.out.String()) {
		t.Errorf("probe:\n%s", c.out)
	}
	c.out.Reset()
	if err := c.provider(t.Context(), []string{"proofs"}); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^http\s+image\s+fake-image-1\s+` + regexp.QuoteMeta(honest) + `\s+idempotent\s+\S+Z\s+\d+s\s+yes$`).MatchString(c.out.String()) {
		t.Errorf("proofs after an idempotent probe:\n%s", c.out)
	}
	// The same provider name and model, now behind a proxy that drops
	// the key: that endpoint's proof says not_idempotent and is not fresh,
	// and it is the last recorded.
	c.env[provider.EnvURL] = stripped
	c.out.Reset()
	if err := c.provider(t.Context(), []string{"probe", "image", "--interval", "1ms", "--yes"}); exitCode(err) != exitNotIdempotent {
		t.Fatalf("exit %d (%v), want %d", exitCode(err), err, exitNotIdempotent)
	}
	if srv.Ledger().Billed.Image != 3 {
		t.Errorf("ledger %+v", srv.Ledger())
	}
	c.out.Reset()
	if err := c.provider(t.Context(), []string{"proofs", "--limit", "1"}); err != nil {
		t.Fatal(err)
	}
	if s := c.out.String(); !regexp.MustCompile(`(?m)^http\s+image\s+fake-image-1\s+`+regexp.QuoteMeta(stripped)+`\s+not_idempotent\s+\S+Z\s+\d+s\s+no$`).MatchString(s) ||
		strings.Count(s, "\n") != 2 {
		t.Errorf("proofs after a not_idempotent probe:\n%s", s)
	}
	if err := c.provider(t.Context(), []string{"proofs", "--limit", "501"}); exitCode(err) != exitUsage {
		t.Errorf("--limit 501: %v", err)
	}
}

func TestProviderProofsLists(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	store := &memProofs{}
	for _, p := range []pipeline.Proof{
		{Provider: "http", Op: "image", Model: "fake-image-1", Verdict: pipeline.ProofIdempotent, ProvedAt: now.Add(-40 * 24 * time.Hour)},
		{Provider: "http", Op: "image", Model: "fake-image-2", Verdict: pipeline.ProofNotIdempotent, ProvedAt: now.Add(-5 * time.Minute)},
		{Provider: "http", Op: "image", Model: "fake-image-1", Verdict: pipeline.ProofIdempotent, ProvedAt: now.Add(-3 * time.Hour)},
		{Provider: "stub", Op: "video_submit", Model: "v", Verdict: pipeline.ProofIdempotent, ProvedAt: now.Add(-31 * 24 * time.Hour)},
	} {
		p.Calls, p.Endpoint = provider.ProbeCalls, "in-process"
		if _, err := store.RecordProof(t.Context(), &pipeline.RecordProofParams{Proof: p}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		kv     []string
		fresh3 string // FRESH of the 3h-old idempotent proof
		fresh  string // of the 31-day-old one
	}{
		{"default age", nil, "yes", "no"},
		{"shorter age", []string{"EDGEPIPE_PROOF_MAX_AGE", "2h"}, "no", "no"},
		{"longer age", []string{"EDGEPIPE_PROOF_MAX_AGE", "1000h"}, "yes", "yes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newTestCLI(t, "", tc.kv...)
			c.now = func() time.Time { return now }
			c.proofs = store
			if err := c.provider(t.Context(), []string{"proofs"}); err != nil {
				t.Fatal(err)
			}
			s := c.out.String()
			for _, re := range []string{
				`(?m)\APROVIDER\s+OP\s+MODEL\s+ENDPOINT\s+VERDICT\s+PROVED_AT\s+AGE\s+FRESH\n` +
					`stub\s+video_submit\s+v\s+in-process\s+idempotent\s+2026-11-01T10:00:00Z\s+31d\s+` + tc.fresh + `\n` +
					`http\s+image\s+fake-image-1\s+in-process\s+idempotent\s+2026-12-02T07:00:00Z\s+3h\s+` + tc.fresh3 + `\n` +
					`http\s+image\s+fake-image-2\s+in-process\s+not_idempotent\s+2026-12-02T09:55:00Z\s+5m\s+no\n\z`,
			} {
				if !regexp.MustCompile(re).MatchString(s) {
					t.Errorf("output does not match %s:\n%s", re, s)
				}
			}
		})
	}
	c := newTestCLI(t, "")
	c.proofs = &memProofs{}
	if err := c.provider(t.Context(), []string{"proofs"}); err != nil || !strings.Contains(c.out.String(), "no proofs") {
		t.Errorf("empty: %v %q", err, c.out)
	}
	if err := c.provider(t.Context(), []string{"proofs", "--limit", "0"}); exitCode(err) != exitUsage {
		t.Errorf("--limit 0: %v", err)
	}
}

func TestAge(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 59 * time.Second: "59s", time.Minute: "1m", 47 * time.Hour: "47h", 48 * time.Hour: "2d", -2 * time.Hour: "-2h",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%s) = %q, want %q", d, got, want)
		}
	}
}
