package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// failFirstVideo reports the first submitted video job as failed (the
// provider gave up on it) and passes everything else through.
type failFirstVideo struct {
	pipeline.Providers
	mu     sync.Mutex
	first  string
	submit int
}

func (p *failFirstVideo) setInner(in pipeline.Providers) { p.Providers = in }

func (p *failFirstVideo) SubmitVideo(ctx context.Context, m pipeline.CallMeta, r pipeline.VideoRequest) (string, error) {
	ext, err := p.Providers.SubmitVideo(ctx, m, r)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.submit++
	if err == nil && p.first == "" {
		p.first = ext
	}
	return ext, err
}

func (p *failFirstVideo) VideoStatus(ctx context.Context, ext string) (pipeline.VideoState, error) {
	p.mu.Lock()
	first := p.first
	p.mu.Unlock()
	if ext == first {
		return pipeline.VideoState{Failed: true, Code: "generation_failed"}, nil
	}
	return p.Providers.VideoStatus(ctx, ext)
}

// Issue 11, finding 3: an operator's retry of a unit whose external video
// job failed waives that submission (audited by a call_waived event naming
// the operator), clears the external id and submits exactly once more. On
// main every retry polled the same failed job and went back to review.
func TestOperatorRetrySubmitsFailedVideoOnceMore(t *testing.T) {
	t.Parallel()
	needFFmpeg(t, "the fake provider renders videos with ffmpeg")
	ctx := context.Background()
	prov := &failFirstVideo{}
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers { return prov }))
	const id = "v1-videoretry"
	h.submit(id, board(vid("a waterfall", "", 600)))
	h.drain(5)
	j := h.job(id)
	if j.Status != pipeline.StatusNeedsReview || j.LastErrorCode != "provider_job_failed" {
		t.Fatalf("job %s (%s), want needs_review provider_job_failed", j.Status, j.LastErrorCode)
	}
	if _, err := h.store.Decide(ctx, &pipeline.DecideParams{JobID: id, Decision: pipeline.DecisionRetry, Operator: "alice"}); err != nil {
		t.Fatal(err)
	}
	calls, err := h.store.ProviderCalls(ctx, id, 0, pipeline.OpVideoSubmit)
	if err != nil || len(calls) != 1 || calls[0].Status != pipeline.CallWaived {
		t.Fatalf("video submissions after the retry decision: %+v %v; want the failed one waived", calls, err)
	}
	waived := unitEvents(t, h, id, pipeline.EventCallWaived)
	if len(waived) != 1 || waived[0]["operator"] != "alice" || waived[0]["op"] != pipeline.OpVideoSubmit {
		t.Fatalf("call_waived events %v; want one for the video submission, by alice", waived)
	}
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("after the operator's retry the job ended %s (%s)", j.Status, j.LastErrorCode)
	}
	prov.mu.Lock()
	n := prov.submit
	prov.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d video submissions, want 2 (the failed one and exactly one more)", n)
	}
	if b := h.fake.Ledger().Billed.Video; b != 2 {
		t.Fatalf("video billed %d times, want 2", b)
	}
}

// panicProviders panics inside the adapter for op, the way a buggy adapter
// would in the middle of a request.
type panicProviders struct {
	pipeline.Providers
	op    string
	times int // panics left
	mu    sync.Mutex
}

func (p *panicProviders) setInner(in pipeline.Providers) { p.Providers = in }

func (p *panicProviders) maybePanic(op string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if op == p.op && p.times > 0 {
		p.times--
		panic("adapter bug: nil map write")
	}
}

func (p *panicProviders) GenerateImage(ctx context.Context, m pipeline.CallMeta, r pipeline.ImageRequest) (pipeline.Media, error) {
	p.maybePanic(pipeline.OpImage)
	return p.Providers.GenerateImage(ctx, m, r)
}

func (p *panicProviders) Synthesize(ctx context.Context, m pipeline.CallMeta, r pipeline.SpeechRequest) (pipeline.Media, error) {
	p.maybePanic(pipeline.OpSpeech)
	return p.Providers.Synthesize(ctx, m, r)
}

// panicRenderer panics while joining the clips.
type panicRenderer struct{ pipeline.Renderer }

func (panicRenderer) JoinTo(context.Context, []string, io.Writer) error { panic("renderer bug") }

// panicPuts panics on puts of final image artifacts.
type panicPuts struct{ pipeline.ObjectStore }

func (p panicPuts) Put(ctx context.Context, key string, r io.Reader, o pipeline.PutOptions) (pipeline.ObjectInfo, error) {
	if strings.HasPrefix(key, pipeline.PrefixUnits) && strings.HasSuffix(key, ".png") {
		panic("object store bug")
	}
	return p.ObjectStore.Put(ctx, key, r, o)
}

// Issue 11: a panic never takes the process down. A panic inside a paid
// call is an unknown outcome (the request may have been billed): a sync
// call goes to review with its audit row ambiguous; an idempotent call is
// retried. A panic where nothing was being paid for (a renderer, an object
// store, a unit's own code) is retried. On main any of these killed every
// attempt in flight in the process.
func TestPanicIsRecoveredIntoAClassifiedFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opt      harnessOpt
		want     pipeline.Status
		wantCode string
	}{
		{"sync speech adapter", withProviders(func(pipeline.Providers) pipeline.Providers {
			return &panicProviders{op: pipeline.OpSpeech, times: 1}
		}), pipeline.StatusNeedsReview, "provider_adapter_panic"},
		{"idempotent image adapter", withProviders(func(pipeline.Providers) pipeline.Providers {
			return &panicProviders{op: pipeline.OpImage, times: 1}
		}), pipeline.StatusRetryWait, "provider_adapter_panic"},
		{"renderer", withRenderers(func(ctx context.Context, w, h, fps int) (pipeline.Renderer, error) {
			r, err := stubRenderers(ctx, w, h, fps)
			return panicRenderer{r}, err
		}), pipeline.StatusRetryWait, "render_failed"},
		{"object store in a unit", withConfig(func(ec *pipeline.EngineConfig) { ec.Objects = panicPuts{ec.Objects} }),
			pipeline.StatusRetryWait, "internal_panic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tc.opt)
			id := "v1-panic"
			h.submit(id, board(img("a lantern", "a lantern in the rain", 600)))
			_, o, err := h.attempt("render-v1", true)
			if err != nil || o.Status != tc.want || o.ErrorCode != tc.wantCode {
				t.Fatalf("outcome %+v %v; want %s %s", o, err, tc.want, tc.wantCode)
			}
			if strings.Contains(o.ErrorMessage, "bug") {
				t.Fatalf("the panic value reached the job's message: %q", o.ErrorMessage)
			}
			if tc.want == pipeline.StatusNeedsReview {
				calls, err := h.store.ProviderCalls(context.Background(), id, 0, pipeline.OpSpeech)
				if err != nil || len(calls) != 1 || calls[0].Status != pipeline.CallAmbiguous {
					t.Fatalf("speech calls %+v %v; want one ambiguous", calls, err)
				}
				return
			}
			if len(unitEvents(t, h, id, pipeline.EventAttemptPanicked)) == 0 && tc.wantCode == "internal_panic" {
				t.Fatal("no attempt_panicked event")
			}
		})
	}
}

// opNamed routes image to a provider of its own name (as provider.Routed
// does for EDGEPIPE_PROVIDER_IMAGE).
type opNamed struct{ pipeline.Providers }

func (p *opNamed) setInner(in pipeline.Providers) { p.Providers = in }

func (p *opNamed) ProviderName(op string) string {
	if op == pipeline.OpImage {
		return "imagehouse"
	}
	return ""
}

// Intent rows name the provider that serves the operation and the model
// asked for; object keys follow the operation's own provider.
func TestIntentRowsNameProviderAndModelPerOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers { return &opNamed{} }))
	const id = "v1-named"
	h.submit(id, board(img("a kiln", "the kiln glows", 600)))
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("job %s (%s)", j.Status, j.LastErrorCode)
	}
	for op, want := range map[string]string{pipeline.OpImage: "imagehouse", pipeline.OpSpeech: h.prov.Name()} {
		calls, err := h.store.ProviderCalls(ctx, id, 0, op)
		if err != nil || len(calls) != 1 {
			t.Fatalf("%s calls %+v %v", op, calls, err)
		}
		if calls[0].Provider != want || calls[0].Model != h.prov.Model(op) || calls[0].Model == "" {
			t.Errorf("%s intent row provider %q model %q; want %q and %q", op, calls[0].Provider, calls[0].Model, want, h.prov.Model(op))
		}
	}
	units, err := h.store.Units(ctx, id)
	if err != nil || len(units) != 1 {
		t.Fatal(err)
	}
	sb, _ := board(img("a kiln", "the kiln glows", 600)).Normalize()
	w, hh := sb.Options.Size()
	want := pipeline.ArtifactKey("acme", "v1", "imagehouse", h.prov.Model(pipeline.OpImage), pipeline.OpImage,
		fmt.Sprintf("%dx%d", w, hh), "a kiln", "png")
	if got := units[0].Artifacts[pipeline.ArtifactImage]; got != want {
		t.Errorf("image key %s, want %s (named after the image's own provider)", got, want)
	}
}

// An idempotency key goes with the requests of an operation declared
// idempotent_verified and with no other: the audit row of a plain sync
// call must not claim a key the provider never honoured.
func TestIdempotencyKeyOnlyForDeclaredIdempotentOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t)
	const id = "v1-keys"
	h.submit(id, board(img("a lock gate", "water through the gate", 600)))
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("job %s (%s)", j.Status, j.LastErrorCode)
	}
	calls, err := h.store.ProviderCalls(ctx, id, pipeline.AllScenes, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[bool]bool{}
	for _, c := range calls {
		declared := h.prov.Contract(c.Op) == pipeline.ContractIdempotentVerified
		seen[declared] = true
		if (c.IdempotencyKey != "") != declared {
			t.Errorf("%s call (declared %s) has idempotency key %q", c.Op, h.prov.Contract(c.Op), c.IdempotencyKey)
		}
	}
	if !seen[true] || !seen[false] {
		t.Fatalf("calls %+v: want one operation declared idempotent_verified and one not", calls)
	}
}

// expireFirstOutput answers the first download of a finished video the
// way Replicate does once it deleted the output.
type expireFirstOutput struct {
	pipeline.Providers
	mu      sync.Mutex
	expired bool
	submits int
}

func (p *expireFirstOutput) setInner(in pipeline.Providers) { p.Providers = in }

func (p *expireFirstOutput) SubmitVideo(ctx context.Context, m pipeline.CallMeta, r pipeline.VideoRequest) (string, error) {
	p.mu.Lock()
	p.submits++
	p.mu.Unlock()
	return p.Providers.SubmitVideo(ctx, m, r)
}

func (p *expireFirstOutput) FetchVideo(ctx context.Context, ext string) (pipeline.Media, error) {
	p.mu.Lock()
	first := !p.expired
	p.expired = true
	p.mu.Unlock()
	if first {
		return pipeline.Media{}, &pipeline.CallError{Op: pipeline.OpVideoSubmit, Outcome: pipeline.OutcomeFailed, HTTPStatus: 404, Code: "provider_output_expired"}
	}
	return p.Providers.FetchVideo(ctx, ext)
}

// A finished video whose output the provider already deleted cannot be
// fetched by retrying: the job goes to review, and an operator's retry pays
// for exactly one more.
func TestExpiredVideoOutputGoesToReview(t *testing.T) {
	t.Parallel()
	needFFmpeg(t, "the fake provider renders videos with ffmpeg")
	prov := &expireFirstOutput{}
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers { return prov }))
	const id = "v1-expired"
	h.submit(id, board(vid("a glacier", "", 600)))
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusNeedsReview || j.LastErrorCode != "provider_output_expired" {
		t.Fatalf("job %s (%s), want needs_review provider_output_expired", j.Status, j.LastErrorCode)
	}
	if _, err := h.store.Decide(context.Background(), &pipeline.DecideParams{JobID: id, Decision: pipeline.DecisionRetry, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("after the retry: %s (%s)", j.Status, j.LastErrorCode)
	}
	if prov.submits != 2 {
		t.Fatalf("%d submissions, want 2", prov.submits)
	}
}

// When an earlier attempt may have paid for a sync call whose result was
// lost, the job stops for a human and the message names the scene the way
// the owner numbers it (from 1).
func TestEngineMaybeBilledMessageNamesScene(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.UnitConcurrency = 1 }))
	h.submit("v1-maybe", board(img("a quiet street", "footsteps on the street", 700)))
	// Intent #1 is the image's, #2 the speech's: die right after it.
	h.crashAt("render-v1", "after_provider_intent", 2)
	h.clock.Advance(2 * time.Minute)
	_, o, err := h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusNeedsReview || o.ErrorCode != "provider_outcome_unknown" {
		t.Fatalf("outcome %+v, want needs_review provider_outcome_unknown", o)
	}
	if !strings.Contains(o.ErrorMessage, "scene 1's speech") {
		t.Fatalf("message %q does not name scene 1's speech", o.ErrorMessage)
	}
}

// errNoProofs marks the case of an engine configured without proofs.
var errNoProofs = errors.New("no proofs configured")

// proofBook is a pipeline.ProofReader holding at most one proof; it
// records what it was asked for.
type proofBook struct {
	mu    sync.Mutex
	proof *pipeline.Proof
	err   error
	asked []pipeline.LatestProofParams
}

func (b *proofBook) LatestProof(_ context.Context, p *pipeline.LatestProofParams) (pipeline.Proof, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, *p)
	switch {
	case b.err != nil:
		return pipeline.Proof{}, b.err
	case b.proof == nil:
		return pipeline.Proof{}, fmt.Errorf("proof of %s: %w", p.Op, pipeline.ErrNotFound)
	}
	return *b.proof, nil
}

// Issue 14: an operation declared idempotent_verified runs as such only
// with a fresh proof of its (provider, operation, model). Without one, an
// ambiguous failure of the call (here a panic in the adapter, an unknown
// outcome) stops for a human as a sync call does, and the intent row says
// sync; the key is still sent. With one, the call is retried.
func TestIdempotentVerifiedNeedsAFreshProof(t *testing.T) {
	t.Parallel()
	proof := func(v pipeline.ProofVerdict, at time.Time) *pipeline.Proof {
		return &pipeline.Proof{Verdict: v, ProvedAt: at, Calls: 2}
	}
	for _, tc := range []struct {
		name     string
		proof    *pipeline.Proof
		err      error
		want     pipeline.Status
		wantCode string
	}{
		{"fresh proof", proof(pipeline.ProofIdempotent, t0.Add(-time.Hour)), nil, pipeline.StatusRetryWait, "provider_adapter_panic"},
		{"no proof", nil, nil, pipeline.StatusNeedsReview, "provider_adapter_panic"},
		{"expired proof", proof(pipeline.ProofIdempotent, t0.Add(-pipeline.DefaultProofMaxAge)), nil, pipeline.StatusNeedsReview, "provider_adapter_panic"},
		{"proof from the future", proof(pipeline.ProofIdempotent, t0.Add(time.Minute)), nil, pipeline.StatusNeedsReview, "provider_adapter_panic"},
		{"latest proof failed", proof(pipeline.ProofNotIdempotent, t0.Add(-time.Hour)), nil, pipeline.StatusNeedsReview, "provider_adapter_panic"},
		{"proofs unreadable", nil, errors.New("database is locked"), pipeline.StatusRetryWait, "store_unavailable"},
		{"no proofs configured", nil, errNoProofs, pipeline.StatusNeedsReview, "provider_adapter_panic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			book := &proofBook{proof: tc.proof, err: tc.err}
			h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers {
				return &panicProviders{op: pipeline.OpImage, times: 1}
			}), withConfig(func(ec *pipeline.EngineConfig) {
				if ec.Proofs = book; errors.Is(tc.err, errNoProofs) {
					ec.Proofs = nil // fails closed: unproven
				}
			}))
			const id = "v1-proof"
			h.submit(id, board(img("a lantern", "a lantern in the rain", 600)))
			_, o, err := h.attempt("render-v1", true)
			if err != nil || o.Status != tc.want || o.ErrorCode != tc.wantCode {
				t.Fatalf("outcome %+v %v; want %s %s", o, err, tc.want, tc.wantCode)
			}
			book.mu.Lock()
			asked := book.asked
			book.mu.Unlock()
			if errors.Is(tc.err, errNoProofs) {
				asked = []pipeline.LatestProofParams{{Provider: pipeline.ProviderName(h.prov, pipeline.OpImage), Op: pipeline.OpImage,
					Model: h.prov.Model(pipeline.OpImage), Endpoint: pipeline.ProviderEndpoint(h.prov, pipeline.OpImage)}}
			}
			want := pipeline.LatestProofParams{Provider: pipeline.ProviderName(h.prov, pipeline.OpImage), Op: pipeline.OpImage, Model: h.prov.Model(pipeline.OpImage),
				Endpoint: pipeline.ProviderEndpoint(h.prov, pipeline.OpImage)}
			if len(asked) == 0 || asked[0] != want {
				t.Fatalf("asked for proofs %+v; want %+v first", asked, want)
			}
			for _, a := range asked {
				if a.Op != pipeline.OpImage {
					t.Errorf("asked for a proof of %s, whose declared contract is not idempotent_verified", a.Op)
				}
			}
			calls, err := h.store.ProviderCalls(context.Background(), id, 0, pipeline.OpImage)
			if tc.err != nil && !errors.Is(tc.err, errNoProofs) {
				if err != nil || len(calls) != 0 {
					t.Fatalf("image calls %+v %v; want none when the proofs cannot be read", calls, err)
				}
				return
			}
			if err != nil || len(calls) != 1 || calls[0].IdempotencyKey == "" {
				t.Fatalf("image calls %+v %v; want one, with its key", calls, err)
			}
			wantContract := pipeline.ContractSync
			if tc.want == pipeline.StatusRetryWait {
				wantContract = pipeline.ContractIdempotentVerified
			}
			if calls[0].Contract != wantContract {
				t.Errorf("intent row contract %s; want %s", calls[0].Contract, wantContract)
			}
			if tc.want == pipeline.StatusNeedsReview && calls[0].Status != pipeline.CallAmbiguous {
				t.Errorf("call status %s; want ambiguous", calls[0].Status)
			}
		})
	}
}
