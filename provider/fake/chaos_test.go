package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFaultEffectsOnTheLedger: what each fault kind does to the answer and
// to the bill, for every operation.
func TestFaultEffectsOnTheLedger(t *testing.T) {
	t.Parallel()
	type op struct {
		name Operation
		path string
		body any
		ok   int
	}
	ops := []op{
		{OpImage, "/v1/images", sampleImage, 200},
		{OpSpeech, "/v1/speech", sampleSpeech, 200},
		{OpVideo, "/v1/videos", sampleVideo, 202},
	}
	kinds := []struct {
		spec       string // after "OP:"
		kind       FaultKind
		wantStatus int // 0: the connection is dropped
		billed     int64
		retryAfter string
	}{
		{"before_commit=1", FaultBeforeCommit, 500, 0, ""},
		{"after_commit=1", FaultAfterCommit, 500, 1, ""},
		{"drop=1", FaultDrop, 0, 1, ""},
		{"rate_limit=1", FaultRateLimit, 429, 0, "1"},
		{"rate_limit=7s@1", FaultRateLimit, 429, 0, "7"},
		{"latency=120ms", FaultLatency, -1, 1, ""}, // -1: the operation's success status
	}
	for _, o := range ops {
		for _, k := range kinds {
			t.Run(string(o.name)+":"+k.spec, func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, Config{
					FFmpegPath: stubFFmpeg(t, "ffmpeg-stub.sh"),
					Faults:     mustParseFaults(t, string(o.name)+":"+k.spec),
				})
				start := time.Now()
				r := h.post(o.path, o.body, map[string]string{HeaderUnitID: "u1"})
				took := time.Since(start)
				switch k.wantStatus {
				case 0:
					if r.err == nil {
						t.Fatalf("got %d %s, want the connection dropped", r.status, r.body)
					}
					if !errors.Is(r.err, io.EOF) && !strings.Contains(r.err.Error(), "EOF") {
						t.Logf("drop surfaced as %v", r.err)
					}
				case -1:
					mustStatus(t, r, o.ok)
					if took < 120*time.Millisecond {
						t.Fatalf("answered after %s, want at least the injected 120ms", took)
					}
				default:
					mustStatus(t, r, k.wantStatus)
					if got := r.header.Get(HeaderFault); got != string(k.kind) {
						t.Errorf("%s = %q", HeaderFault, got)
					}
					if got := r.header.Get("Retry-After"); got != k.retryAfter {
						t.Errorf("Retry-After = %q, want %q", got, k.retryAfter)
					}
				}
				l := h.srv.Ledger()
				if got := l.Billed.Get(o.name); got != k.billed {
					t.Fatalf("billed %s = %d, want %d (ledger %+v)", o.name, got, k.billed, l)
				}
				if got := l.ByUnit["u1"].Get(o.name); got != k.billed {
					t.Fatalf("billed to unit = %d, want %d", got, k.billed)
				}
				if l.Billed.Total() != k.billed || l.Injected[k.kind] != 1 || l.Calls != 1 {
					t.Fatalf("ledger = %+v", l)
				}
			})
		}
	}
}

// outcome classifies one answer for the determinism test.
func outcome(r result) string {
	if r.err != nil {
		return "drop"
	}
	return fmt.Sprint(r.status)
}

const (
	imageChaos  = "image:before_commit=0.25,image:after_commit=0.2,image:drop=0.15"
	speechChaos = "speech:rate_limit=0.25,speech:drop=0.2,speech:after_commit=0.2"
)

func runSequence(t *testing.T, seed uint64, spec string) ([]string, LedgerSnapshot) {
	t.Helper()
	h := newHarness(t, Config{Seed: seed, Faults: mustParseFaults(t, spec)})
	var got []string
	for i := range 60 {
		if i%2 == 0 {
			got = append(got, "image:"+outcome(h.post("/v1/images", ImageRequest{Prompt: fmt.Sprint(i), Width: 16, Height: 16}, nil)))
		} else {
			got = append(got, "speech:"+outcome(h.post("/v1/speech", SpeechRequest{Text: "s", SampleRate: 8000}, nil)))
		}
	}
	return got, h.srv.Ledger()
}

func TestFaultsAreReproducibleWithASeed(t *testing.T) {
	t.Parallel()
	a, la := runSequence(t, 7, imageChaos+","+speechChaos)
	b, lb := runSequence(t, 7, imageChaos+","+speechChaos)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different outcomes:\n%v\n%v", a, b)
	}
	if la.Billed != lb.Billed || fmt.Sprint(la.Injected) != fmt.Sprint(lb.Injected) {
		t.Fatalf("same seed, different ledgers: %+v vs %+v", la, lb)
	}
	distinct := map[string]bool{}
	for _, o := range a {
		distinct[o] = true
	}
	if len(distinct) < 6 {
		t.Fatalf("the sequence exercised only %v; the test proves little", distinct)
	}
	c, _ := runSequence(t, 8, imageChaos+","+speechChaos)
	if slices.Equal(a, c) {
		t.Fatal("seeds 7 and 8 gave the same 60 outcomes: the seed is ignored")
	}

	// Every faultable request takes the same number of draws whatever its
	// fate, so turning image faults off leaves every speech outcome alone.
	d, _ := runSequence(t, 7, speechChaos)
	for i := 1; i < len(a); i += 2 {
		if a[i] != d[i] {
			t.Fatalf("request %d: %s with image faults, %s without; one operation's faults shifted another's", i, a[i], d[i])
		}
	}
}

// TestGoTransportResendsDroppedPOSTWithIdempotencyKey pins a trap for the
// client adapters: net/http's Transport treats a POST carrying an
// Idempotency-Key header as replayable and silently resends it when a reused
// keep-alive connection is closed before the response. Against speech, which
// ignores the key, one client call is then billed twice while the caller
// sees a single error. Without the header there is no resend.
func TestGoTransportResendsDroppedPOSTWithIdempotencyKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		path       string
		body       any
		op         Operation
		key        string
		wantBilled int64 // for the one faulted client call
	}{
		{"speech with key is billed twice", "/v1/speech", sampleSpeech, OpSpeech, "k", 2},
		{"speech without key is billed once", "/v1/speech", sampleSpeech, OpSpeech, "", 1},
		{"image with key is deduplicated", "/v1/images", sampleImage, OpImage, "k", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{})
			// Warm a keep-alive connection so the next request reuses it.
			mustStatus(t, h.post("/v1/healthz-warmup-unknown", nil, nil), http.StatusNotFound)
			if err := h.srv.SetFaults(mustParseFaults(t, string(tt.op)+":drop=1")); err != nil {
				t.Fatal(err)
			}
			hdr := map[string]string{}
			if tt.key != "" {
				hdr[HeaderIdempotencyKey] = tt.key
			}
			if r := h.post(tt.path, tt.body, hdr); r.err == nil {
				t.Fatalf("got %d, want a dropped connection", r.status)
			}
			l := h.srv.Ledger()
			if got := l.Billed.Get(tt.op); got != tt.wantBilled {
				t.Fatalf("one client call was billed %d times, want %d (ledger %+v)", got, tt.wantBilled, l)
			}
		})
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	s, err := New(Config{FFmpegPath: noFFmpeg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base, err := s.Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") || s.BaseURL() != base {
		t.Fatalf("base URL %q / %q", base, s.BaseURL())
	}
	if _, err := s.Start(ctx, "127.0.0.1:0"); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Start: %v", err)
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz %d", resp.StatusCode)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if resp, err := http.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after Stop")
	}
	if _, err := s.Start(ctx, "127.0.0.1:0"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Stop: %v", err)
	}
	if err := s.Stop(stopCtx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStartUnspecifiedHostReportsLoopback(t *testing.T) {
	t.Parallel()
	s, err := New(Config{FFmpegPath: noFFmpeg})
	if err != nil {
		t.Fatal(err)
	}
	base, err := s.Start(context.Background(), ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("base URL %q", base)
	}
}

func TestLedgerEndpoint(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	mustStatus(t, h.post("/v1/images", sampleImage, map[string]string{HeaderUnitID: "j1/s1", HeaderIdempotencyKey: "i1"}), 200)
	mustStatus(t, h.post("/v1/speech", sampleSpeech, map[string]string{HeaderUnitID: "j1/s1"}), 200)

	r := h.get("/ledger")
	mustStatus(t, r, 200)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"billed", "by_unit", "by_idempotency_key", "calls"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("GET /ledger lacks %q: %s", k, r.body)
		}
	}
	var l LedgerSnapshot
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatal(err)
	}
	want := Counts{Image: 1, Speech: 1}
	if l.Billed != want || l.ByUnit["j1/s1"] != want || l.ByIdempotencyKey["i1"] != 1 || l.Calls != 2 {
		t.Fatalf("ledger = %s", r.body)
	}
	if !strings.Contains(string(r.body), `"by_unit":{"j1/s1":{"image":1,"speech":1,"video":0}}`) {
		t.Fatalf("wire format changed: %s", r.body)
	}

	mustStatus(t, h.post("/ledger/reset", nil, nil), http.StatusNoContent)
	if l := h.srv.Ledger(); l.Billed.Total() != 0 || len(l.ByUnit) != 0 || len(l.ByIdempotencyKey) != 0 || l.Calls != 0 {
		t.Fatalf("after reset: %+v", l)
	}
	// The idempotency store survives a reset: a replay is still free.
	mustStatus(t, h.post("/v1/images", sampleImage, map[string]string{HeaderIdempotencyKey: "i1"}), 200)
	if l := h.srv.Ledger(); l.Billed.Image != 0 || l.Replayed != 1 {
		t.Fatalf("replay after reset: %+v", l)
	}
}

func TestFaultsEndpoint(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	r := h.do(http.MethodPut, "/faults", map[string]string{"spec": "*:drop=0.5, speech:latency=10ms"}, nil)
	mustStatus(t, r, 200)
	want := "image:drop=0.5,speech:latency=10ms@1,speech:drop=0.5,video:drop=0.5"
	if got := h.srv.Faults().String(); got != want {
		t.Fatalf("faults = %q, want %q", got, want)
	}
	r = h.get("/faults")
	mustStatus(t, r, 200)
	if !strings.Contains(string(r.body), want) {
		t.Fatalf("GET /faults = %s", r.body)
	}
	r = h.do(http.MethodPut, "/faults", map[string]string{"spec": "image:drop=2"}, nil)
	mustStatus(t, r, http.StatusBadRequest)
	if !strings.Contains(string(r.body), "outside [0,1]") {
		t.Fatalf("error body %s", r.body)
	}
	if got := h.srv.Faults().String(); got != want {
		t.Fatalf("a refused spec changed the faults to %q", got)
	}
	if err := h.srv.SetFaults(Faults{Image: OpFaults{Drop: 3}}); !errors.Is(err, ErrInvalidFaults) {
		t.Fatalf("SetFaults accepted an invalid config: %v", err)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Faults: Faults{Speech: OpFaults{AfterCommit: -1}}}); !errors.Is(err, ErrInvalidFaults) {
		t.Fatalf("New with a negative probability: %v", err)
	}
	if _, err := New(Config{RenderConcurrency: -1}); err == nil {
		t.Fatal("New with negative render concurrency succeeded")
	}
	s, err := New(Config{FFmpegPath: noFFmpeg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Seed() == 0 {
		t.Fatal("an unseeded server reports seed 0; a run could not be replayed")
	}
}

// TestConcurrentChaosKeepsTheLedgerConsistent hammers the server from
// several goroutines while faults change, then checks that what clients saw
// adds up to what was billed.
func TestConcurrentChaosKeepsTheLedgerConsistent(t *testing.T) {
	t.Parallel()
	spec := "*:before_commit=0.15,*:after_commit=0.15,*:drop=0.1,*:rate_limit=0.1,*:latency=2ms@0.2"
	h := newHarness(t, Config{Seed: 99, Faults: mustParseFaults(t, spec)})
	const workers, perWorker = 4, 25
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				var r result
				if (w+i)%2 == 0 {
					r = h.post("/v1/images", ImageRequest{Prompt: fmt.Sprint(w, i), Width: 16, Height: 16}, nil)
				} else {
					r = h.post("/v1/speech", SpeechRequest{Text: "x", SampleRate: 8000}, nil)
				}
				mu.Lock()
				seen[outcome(r)]++
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			_ = h.srv.Ledger()
			if err := h.srv.SetFaults(mustParseFaults(t, spec)); err != nil {
				t.Error(err)
			}
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()

	l := h.srv.Ledger()
	inj := l.Injected
	if got, want := l.Calls, int64(workers*perWorker); got != want {
		t.Errorf("calls = %d, want %d", got, want)
	}
	if got, want := l.Billed.Total(), int64(seen["200"])+inj[FaultAfterCommit]+inj[FaultDrop]; got != want {
		t.Errorf("billed %d, but clients saw %d successes and %d+%d after-commit faults", got, seen["200"], inj[FaultAfterCommit], inj[FaultDrop])
	}
	if int64(seen["500"]) != inj[FaultBeforeCommit]+inj[FaultAfterCommit] || int64(seen["429"]) != inj[FaultRateLimit] || int64(seen["drop"]) != inj[FaultDrop] {
		t.Errorf("client outcomes %v do not match injected faults %v", seen, inj)
	}
	if seen["200"] == 0 || seen["drop"] == 0 || seen["500"] == 0 || seen["429"] == 0 {
		t.Errorf("outcomes %v: not every path was exercised", seen)
	}
}

func TestRunServesUntilCanceled(t *testing.T) {
	t.Parallel()
	s, err := New(Config{FFmpegPath: noFFmpeg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, "127.0.0.1:0", 5*time.Second) }()
	deadline := time.Now().Add(5 * time.Second)
	for s.BaseURL() == "" {
		if time.Now().After(deadline) {
			t.Fatal("Run never started listening")
		}
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Get(s.BaseURL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if resp, err := http.Get(s.BaseURL() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("still serving after Run returned")
	}
}
