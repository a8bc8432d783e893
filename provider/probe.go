package provider

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"edgepipe/pipeline"
)

// A probe is the seeds' verification of an idempotency key, as code: the
// same request is sent twice under one fresh key, and the provider's
// contract holds only if both answers are the same and, where the provider
// reports usage, it billed once. Equal answers alone prove nothing about a
// deterministic model, or a cache in front of it, so the probe also sends
// the request once under another key (the control): without a usage
// report, a key is proven only when the control's answer differs. It spends
// real money (ProbeCalls billable requests), so only `edgepipe provider
// probe --yes` runs it.

// ProbeCalls is how many billable requests a probe sends: two under one
// key and the control under another.
const ProbeCalls = 3

// ProbeUnitPrefix starts the unit id of every probe request
// (pipeline.ProbeUnitPrefix).
const ProbeUnitPrefix = pipeline.ProbeUnitPrefix

// DefaultProbeInterval is the pause between a probe's two calls: long
// enough that the second is not served by an in-flight deduplication of the
// first, short enough that a provider's key retention certainly covers it.
const DefaultProbeInterval = 2 * time.Second

// Probe's fixed requests: small, so a probe costs as little as the
// provider charges.
const (
	probePrompt     = "edgepipe contract probe"
	probeImageSide  = 256
	probeSpeechText = "edgepipe contract probe."
	probeVideoMS    = 1000
)

// ErrUsageUnavailable: the provider does not report what it billed per
// idempotency key; a probe then judges by the answers alone.
var ErrUsageUnavailable = errors.New("provider: usage per idempotency key is not available")

// UsageReporter is a Providers that can tell how many calls it billed
// under an idempotency key. BilledByKey answers ErrUsageUnavailable when
// the provider does not expose it.
type UsageReporter interface {
	BilledByKey(ctx context.Context, key string) (int64, error)
}

var _ UsageReporter = (*HTTP)(nil)

// ProbeConfig tunes Probe; the zero value is the production setting.
type ProbeConfig struct {
	// Interval between the two calls (0 = DefaultProbeInterval).
	Interval time.Duration
	// Clock dates the proof (nil = the system clock).
	Clock pipeline.Clock
	// Sleep waits between the calls (nil = a timer that ends early with
	// ctx's error).
	Sleep func(ctx context.Context, d time.Duration) error
}

func (c ProbeConfig) withDefaults() ProbeConfig {
	if c.Interval <= 0 {
		c.Interval = DefaultProbeInterval
	}
	if c.Clock == nil {
		c.Clock = pipeline.SystemClock{}
	}
	if c.Sleep == nil {
		c.Sleep = sleepCtx
	}
	return c
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrNothingToProve: the operation's declared contract is not
// idempotent_verified, so it sends no key and a probe has nothing to check.
// It comes wrapped with pipeline.ErrInvalidInput.
var ErrNothingToProve = errors.New("nothing to prove")

// Probeable refuses (ErrNothingToProve) an operation a probe cannot check:
// one whose declared contract on p is not idempotent_verified.
func Probeable(p pipeline.Providers, op string) error {
	if c := p.Contract(op); c != pipeline.ContractIdempotentVerified {
		return fmt.Errorf("%w: %s on %s declares %s: it sends no idempotency key, so there is %w",
			pipeline.ErrInvalidInput, op, pipeline.ProviderName(p, op), c, ErrNothingToProve)
	}
	return nil
}

// Probe sends op's fixed request to p twice, under one fresh idempotency
// key and unit id, and returns the proof of what happened (not yet
// recorded). It refuses, sending nothing, an operation whose declared
// contract is not idempotent_verified: such an operation sends no key, so
// there is nothing to prove. A failed call returns its error and no proof:
// the probe proved nothing either way (the failed call may still have been
// billed).
func Probe(ctx context.Context, p pipeline.Providers, op string, cfg ProbeConfig) (pipeline.Proof, error) {
	if err := Probeable(p, op); err != nil {
		return pipeline.Proof{}, err
	}
	name := pipeline.ProviderName(p, op)
	cfg = cfg.withDefaults()
	id, err := randomHex()
	if err != nil {
		return pipeline.Proof{}, err
	}
	meta := pipeline.CallMeta{UnitID: ProbeUnitPrefix + id, IdempotencyKey: "probe-" + id}
	control := pipeline.CallMeta{UnitID: ProbeUnitPrefix + id + "-control", IdempotencyKey: "probe-" + id + "-control"}
	var answers [ProbeCalls]probeAnswer
	for i := range answers {
		if i > 0 {
			if err := cfg.Sleep(ctx, cfg.Interval); err != nil {
				return pipeline.Proof{}, fmt.Errorf("probe of %s on %s: waiting between the calls: %w", op, name, err)
			}
		}
		m := meta
		if i == ProbeCalls-1 {
			m = control
		}
		if answers[i], err = probeCall(ctx, p, op, m); err != nil {
			return pipeline.Proof{}, fmt.Errorf("probe of %s on %s: call %d of %d failed, nothing proven: %w", op, name, i+1, ProbeCalls, err)
		}
	}
	billed, usage := int64(0), false
	if ur, ok := p.(UsageReporter); ok {
		switch billed, err = ur.BilledByKey(ctx, meta.IdempotencyKey); {
		case err == nil:
			usage = true
		case !errors.Is(err, ErrUsageUnavailable):
			// The provider has usage but we could not read it: a verdict
			// from the answers alone would claim less than it could.
			return pipeline.Proof{}, fmt.Errorf("probe of %s on %s: reading usage of key %s: %w", op, name, meta.IdempotencyKey, err)
		}
	}
	same := answers[0].id == answers[1].id
	// Without a usage report, equal answers mean something only if another
	// key gets another answer.
	controlSame := answers[2].id == answers[0].id
	verdict := pipeline.ProofIdempotent
	if !same || (usage && billed != 1) || (!usage && controlSame) {
		verdict = pipeline.ProofNotIdempotent
	}
	proof := pipeline.Proof{
		Provider: name, Op: op, Model: p.Model(op), Endpoint: pipeline.ProviderEndpoint(p, op), Verdict: verdict, Calls: ProbeCalls,
		Detail:   probeDetail(meta.IdempotencyKey, answers, same, controlSame, usage, billed),
		ProvedAt: cfg.Clock.Now().UTC(),
	}
	if err := proof.Check(); err != nil {
		return pipeline.Proof{}, fmt.Errorf("probe of %s on %s: %w", op, name, err)
	}
	return proof, nil
}

// probeAnswer is what one call returned: the media's SHA-256 (and size),
// or a video job's external id.
type probeAnswer struct {
	id   string
	size int64
}

func (a probeAnswer) String() string {
	if a.size < 0 {
		return "job " + sanitize(a.id, 64)
	}
	return fmt.Sprintf("sha256 %s… (%d bytes)", a.id[:16], a.size)
}

func probeCall(ctx context.Context, p pipeline.Providers, op string, meta pipeline.CallMeta) (probeAnswer, error) {
	var m pipeline.Media
	var err error
	switch op {
	case pipeline.OpImage:
		m, err = p.GenerateImage(ctx, meta, pipeline.ImageRequest{Prompt: probePrompt, Width: probeImageSide, Height: probeImageSide, Model: p.Model(op)})
	case pipeline.OpSpeech:
		m, err = p.Synthesize(ctx, meta, pipeline.SpeechRequest{Text: probeSpeechText})
	case pipeline.OpVideoSubmit:
		id, err := p.SubmitVideo(ctx, meta, pipeline.VideoRequest{Prompt: probePrompt, DurationMS: probeVideoMS,
			Width: probeImageSide, Height: probeImageSide})
		if err != nil {
			return probeAnswer{}, err
		}
		// The same id twice means the provider deduplicated the
		// submission; two ids are two jobs, both billed.
		return probeAnswer{id: id, size: -1}, nil
	default:
		return probeAnswer{}, fmt.Errorf("%w: no probe request for operation %q", pipeline.ErrInvalidInput, op)
	}
	if err != nil {
		return probeAnswer{}, err
	}
	defer m.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, m.Body)
	if err != nil {
		return probeAnswer{}, fmt.Errorf("reading the answer: %w", err)
	}
	return probeAnswer{id: hex.EncodeToString(h.Sum(nil)), size: n}, nil
}

// probeDetail says what was compared, within pipeline.MaxProofDetail.
func probeDetail(key string, a [ProbeCalls]probeAnswer, same, controlSame, usage bool, billed int64) string {
	s := fmt.Sprintf("key %s; call 1: %s; call 2: %s; control under another key: %s", key, a[0], a[1], a[2])
	if same {
		s += "; answers equal"
	} else {
		s += "; answers DIFFER"
	}
	switch {
	case !usage && controlSame:
		s += "; usage not reported by the provider, and the control's answer is the same too: equal answers prove nothing"
	case !usage:
		s += "; usage not reported by the provider; the control's answer differs"
	case billed == 1:
		s += "; billed once under the key"
	default:
		s += fmt.Sprintf("; billed %d times under the key (want 1)", billed)
	}
	if len(s) > pipeline.MaxProofDetail {
		s = s[:pipeline.MaxProofDetail]
	}
	return s
}

func randomHex() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("probe: random key: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// pathLedger is the fake provider's billing ledger (provider/fake's GET
// /ledger), relative to Config.BaseURL.
const pathLedger = "/ledger"

// maxLedgerBody bounds the ledger answer: it lists every unit and key the
// provider has billed since it started, so it outgrows maxJSONBody.
const maxLedgerBody = 64 << 20

// BilledByKey reads GET {base}/ledger, the fake provider's billing ledger,
// and returns by_idempotency_key[key] (0 when the key was never billed).
// A provider without the endpoint (404) answers ErrUsageUnavailable.
func (h *HTTP) BilledByKey(ctx context.Context, key string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	u := *h.base
	u.Path = h.base.Path + pathLedger
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("provider ledger: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("provider ledger: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return 0, ErrUsageUnavailable
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("provider ledger: http %d", resp.StatusCode)
	}
	var l struct {
		ByKey map[string]int64 `json:"by_idempotency_key"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxLedgerBody)).Decode(&l); err != nil {
		return 0, fmt.Errorf("provider ledger: malformed answer: %w", err)
	}
	if l.ByKey == nil { // an answer that is not the fake's ledger
		return 0, ErrUsageUnavailable
	}
	return l.ByKey[key], nil
}
