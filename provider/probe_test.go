package provider_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
)

var probeNow = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// probeConfig records the pauses the probe asks for instead of sleeping;
// between, if set, runs during the pause (e.g. to change the faults).
func probeConfig(slept *[]time.Duration, between func()) provider.ProbeConfig {
	return provider.ProbeConfig{
		Interval: 3 * time.Second,
		Clock:    fixedClock{probeNow},
		Sleep: func(_ context.Context, d time.Duration) error {
			*slept = append(*slept, d)
			if between != nil {
				between()
			}
			return nil
		},
	}
}

// TestProbeImageIsIdempotentAgainstTheFake: the fake honours the key, so the
// probe's two keyed calls give the same PNG, one bill and one replay; the
// control under another key is billed on its own. The fake draws the same
// PNG for the control (its images are a function of the prompt), which is
// why usage decides here.
func TestProbeImageIsIdempotentAgainstTheFake(t *testing.T) {
	t.Parallel()
	srv, base := startFake(t, fake.Config{})
	p := newClient(t, base)
	var slept []time.Duration
	proof, err := provider.Probe(t.Context(), p, pipeline.OpImage, probeConfig(&slept, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := pipeline.Proof{Provider: "http", Op: "image", Model: "fake-image-1", Endpoint: base, Verdict: pipeline.ProofIdempotent,
		Calls: 3, ProvedAt: probeNow, Detail: proof.Detail}
	if proof != want {
		t.Errorf("proof %+v, want %+v", proof, want)
	}
	if err := proof.Check(); err != nil {
		t.Error(err)
	}
	for _, s := range []string{"key probe-", "answers equal", "billed once under the key"} {
		if !strings.Contains(proof.Detail, s) {
			t.Errorf("detail %q lacks %q", proof.Detail, s)
		}
	}
	if len(slept) != 2 || slept[0] != 3*time.Second || slept[1] != 3*time.Second {
		t.Errorf("slept %v, want two pauses of the interval", slept)
	}
	l := srv.Ledger()
	if l.Billed.Image != 2 || l.Replayed != 1 || l.Calls != 3 || len(l.ByIdempotencyKey) != 2 {
		t.Fatalf("ledger %+v: want 3 calls, 2 billed images (the key's and the control's), 1 replay, 2 keys", l)
	}
	for k, n := range l.ByIdempotencyKey {
		if !strings.HasPrefix(k, "probe-") || n != 1 || !strings.Contains(proof.Detail, strings.TrimSuffix(k, "-control")) {
			t.Errorf("key %q billed %d (detail %q)", k, n, proof.Detail)
		}
	}
	for u := range l.ByUnit {
		if !strings.HasPrefix(u, provider.ProbeUnitPrefix) {
			t.Errorf("unit %q, want %s<hex>", u, provider.ProbeUnitPrefix)
		}
	}
}

// keyIgnorer is a provider that ignores Idempotency-Key: every image is
// drawn anew (random bytes) and billed; with ledger it reports the bills
// per key as the fake's GET /ledger does, else it has no /ledger (404).
func keyIgnorer(t *testing.T, ledger bool) string {
	t.Helper()
	var mu sync.Mutex
	byKey := map[string]int64{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/images", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		byKey[r.Header.Get(provider.HeaderIdempotencyKey)]++
		mu.Unlock()
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte(rand.Text()))
	})
	if ledger {
		mux.HandleFunc("GET /ledger", func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"by_idempotency_key":{`)
			sep := ""
			for k, n := range byKey {
				fmt.Fprintf(w, "%s%q:%d", sep, k, n)
				sep = ","
			}
			fmt.Fprint(w, `}}`)
		})
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s.URL
}

// keyStripper puts a proxy that drops Idempotency-Key (as a misconfigured
// gateway would) in front of the real fake: the fake draws the same PNG for
// the same prompt, but bills both calls, under no key.
func keyStripper(t *testing.T, ledger bool) (*fake.Server, string) {
	t.Helper()
	srv, base := startFake(t, fake.Config{})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		pr.Out.Host = pr.In.Host // as NewSingleHostReverseProxy did
		pr.Out.Header.Del(provider.HeaderIdempotencyKey)
	}}
	var h http.Handler = rp
	if !ledger {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/ledger" {
				http.NotFound(w, r)
				return
			}
			rp.ServeHTTP(w, r)
		})
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return srv, s.URL
}

// TestProbeFindsAKeyNotHonoured: each way a provider can fail to honour the
// key gives not_idempotent, with the detail saying what differed.
func TestProbeFindsAKeyNotHonoured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		base func(t *testing.T) string
		want []string
	}{
		// Only the answers tell: the provider reports no usage.
		{"redraws, no usage", func(t *testing.T) string { return keyIgnorer(t, false) },
			[]string{"answers DIFFER", "usage not reported"}},
		{"redraws, bills twice", func(t *testing.T) string { return keyIgnorer(t, true) },
			[]string{"answers DIFFER", "billed 2 times under the key (want 1)"}},
		// Only the bill tells: the answers are equal.
		{"key stripped in front of the fake", func(t *testing.T) string { _, b := keyStripper(t, true); return b },
			[]string{"answers equal", "billed 0 times under the key (want 1)"}},
		// Neither the bill nor the answers alone tell: the fake draws the
		// same image for the same prompt whatever the key. The control
		// under another key gets that image too, so equal answers prove
		// nothing.
		{"key stripped, no ledger", func(t *testing.T) string { _, b := keyStripper(t, false); return b },
			[]string{"answers equal", "the control's answer is the same too: equal answers prove nothing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newClient(t, tc.base(t))
			var slept []time.Duration
			proof, err := provider.Probe(t.Context(), p, pipeline.OpImage, probeConfig(&slept, nil))
			if err != nil {
				t.Fatal(err)
			}
			if proof.Verdict != pipeline.ProofNotIdempotent || proof.Calls != 3 || proof.ProvedAt != probeNow {
				t.Errorf("proof %+v, want not_idempotent after 3 calls", proof)
			}
			for _, s := range tc.want {
				if !strings.Contains(proof.Detail, s) {
					t.Errorf("detail %q lacks %q", proof.Detail, s)
				}
			}
			if err := proof.Check(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestProbeRefusesAnOperationWithoutAKey: sync and async_pollable
// operations send no key; the probe refuses them without a call.
func TestProbeRefusesAnOperationWithoutAKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ op, contract string }{
		{pipeline.OpSpeech, "sync"},
		{pipeline.OpVideoSubmit, "async_pollable"},
		{"upscale", "fail_closed"},
	} {
		t.Run(tc.op, func(t *testing.T) {
			t.Parallel()
			srv, base := startFake(t, fake.Config{})
			var slept []time.Duration
			proof, err := provider.Probe(t.Context(), newClient(t, base), tc.op, probeConfig(&slept, nil))
			want := tc.op + " on http declares " + tc.contract + ": it sends no idempotency key, so there is nothing to prove"
			if !errors.Is(err, pipeline.ErrInvalidInput) || !errors.Is(err, provider.ErrNothingToProve) || !strings.Contains(err.Error(), want) {
				t.Errorf("err %v, want ErrInvalidInput saying %q", err, want)
			}
			if proof != (pipeline.Proof{}) || len(slept) != 0 {
				t.Errorf("proof %+v, slept %v: want none", proof, slept)
			}
			if l := srv.Ledger(); l.Calls != 0 {
				t.Errorf("ledger %+v: the refused probe called the provider", l)
			}
		})
	}
}

// TestProbeFailedCallProvesNothing: a failed call (first, second or the
// control) is returned, with no proof.
func TestProbeFailedCallProvesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		before, between string // fault specs before the first call, in the pause
		wantCall        string
	}{
		{"first call 500 before commit", "image:before_commit=1", "", "call 1 of 3"},
		{"second call 500 after commit", "", "image:after_commit=1", "call 2 of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, base := startFake(t, fake.Config{})
			setFaults(t, srv, tc.before)
			var slept []time.Duration
			between := func() { setFaults(t, srv, tc.between) }
			proof, err := provider.Probe(t.Context(), newClient(t, base), pipeline.OpImage, probeConfig(&slept, between))
			var ce *pipeline.CallError
			if !errors.As(err, &ce) || ce.Code != provider.CodeServerError || !strings.Contains(err.Error(), tc.wantCall) {
				t.Errorf("err %v, want the %s's CallError", err, tc.wantCall)
			}
			if proof != (pipeline.Proof{}) {
				t.Errorf("proof %+v after a failed call", proof)
			}
		})
	}
}

// videoDedup is a Providers declaring video_submit idempotent_verified
// (no real provider does yet); dedup says whether the second submission
// answers the first one's id.
type videoDedup struct {
	pipeline.Providers
	dedup bool
	mu    sync.Mutex
	metas []pipeline.CallMeta
}

func (v *videoDedup) Name() string { return "stub" }
func (v *videoDedup) Contract(op string) pipeline.Contract {
	if op == pipeline.OpVideoSubmit {
		return pipeline.ContractIdempotentVerified
	}
	return pipeline.ContractFailClosed
}
func (v *videoDedup) Model(string) string { return "stub-video" }
func (v *videoDedup) SubmitVideo(_ context.Context, meta pipeline.CallMeta, _ pipeline.VideoRequest) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.metas = append(v.metas, meta)
	if v.dedup {
		return "vid_" + meta.IdempotencyKey, nil
	}
	return fmt.Sprintf("vid_%d", len(v.metas)), nil
}

// TestProbeVideoComparesExternalIDs: a deduplicated submission answers the
// same job id under the same meta.
func TestProbeVideoComparesExternalIDs(t *testing.T) {
	t.Parallel()
	for _, dedup := range []bool{true, false} {
		t.Run(fmt.Sprint("dedup=", dedup), func(t *testing.T) {
			t.Parallel()
			v := &videoDedup{dedup: dedup}
			var slept []time.Duration
			proof, err := provider.Probe(t.Context(), v, pipeline.OpVideoSubmit, probeConfig(&slept, nil))
			if err != nil {
				t.Fatal(err)
			}
			want := pipeline.ProofNotIdempotent
			if dedup {
				want = pipeline.ProofIdempotent
			}
			if proof.Verdict != want || !strings.Contains(proof.Detail, "call 1: job vid_") {
				t.Errorf("proof %+v, want %s", proof, want)
			}
			if len(v.metas) != 3 || v.metas[0] != v.metas[1] || v.metas[0].IdempotencyKey == "" || v.metas[2].IdempotencyKey == v.metas[0].IdempotencyKey {
				t.Errorf("metas %+v, want the same keyed meta twice, then the control under another key", v.metas)
			}
		})
	}
}

// TestProbeUsageReadings: a ledger that fails is an error (the provider has
// usage we could not read); a 404 or an answer without by_idempotency_key
// means the provider does not report usage, and the answers alone decide.
func TestProbeUsageReadings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ledger http.HandlerFunc // nil: no /ledger (404)
		detail string
		err    string
	}{
		{"no ledger", nil, "answers equal; usage not reported by the provider; the control's answer differs", ""},
		{"not the fake's ledger", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"credits":12}`)
		}, "answers equal; usage not reported by the provider; the control's answer differs", ""},
		{"ledger fails", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusBadGateway) },
			"", "reading usage of key probe-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A provider that honours the key: the same bytes for it.
			mux := http.NewServeMux()
			mux.HandleFunc("POST /v1/images", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "image/png")
				fmt.Fprint(w, "png for "+r.Header.Get(provider.HeaderIdempotencyKey))
			})
			if tc.ledger != nil {
				mux.HandleFunc("GET /ledger", tc.ledger)
			}
			s := httptest.NewServer(mux)
			t.Cleanup(s.Close)
			var slept []time.Duration
			proof, err := provider.Probe(t.Context(), newClient(t, s.URL), pipeline.OpImage, probeConfig(&slept, nil))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || proof != (pipeline.Proof{}) {
					t.Errorf("proof %+v, err %v: want no proof and %q", proof, err, tc.err)
				}
				return
			}
			if err != nil || proof.Verdict != pipeline.ProofIdempotent || !strings.HasSuffix(proof.Detail, tc.detail) {
				t.Errorf("proof %+v, err %v: want idempotent ending %q", proof, err, tc.detail)
			}
		})
	}
}
