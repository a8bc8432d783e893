package pipeline

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// callsStore holds provider calls, answers ProviderCalls as the stores do
// (a negative scene: every scene) and records what FinishCall was told.
type callsStore struct {
	Store
	calls    []ProviderCall
	finished []FinishCallParams
}

func (s *callsStore) AppendEvent(context.Context, Lease, string, any) error { return nil }

func (s *callsStore) ProviderCalls(_ context.Context, jobID string, scene int, _ string) ([]ProviderCall, error) {
	var out []ProviderCall
	for _, c := range s.calls {
		if c.JobID == jobID && (scene < 0 || c.Scene == scene) {
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *callsStore) FinishCall(_ context.Context, p *FinishCallParams) error {
	s.finished = append(s.finished, *p)
	return nil
}

// A panic is ambiguous when a call of this attempt may be in flight: in the
// panicking unit's scene, or in any scene for a panic outside the units
// (scene -1); the open calls become ambiguous. Otherwise it is transient.
func TestRecovered(t *testing.T) {
	t.Parallel()
	lease := Lease{JobID: "j", AttemptID: "a2", Attempt: 2}
	calls := []ProviderCall{
		{ID: 1, JobID: "j", Scene: 0, AttemptID: "a1", Status: CallIntent}, // an earlier attempt's
		{ID: 2, JobID: "j", Scene: 0, AttemptID: "a2", Status: CallSucceeded},
		{ID: 3, JobID: "j", Scene: 2, AttemptID: "a2", Status: CallIntent},
	}
	for _, tc := range []struct {
		name     string
		scene    int
		class    ErrorClass
		finished []int64
	}{
		{"outside the units", -1, ClassAmbiguous, []int64{3}},
		{"in the unit with the open call", 2, ClassAmbiguous, []int64{3}},
		{"in another unit", 0, ClassTransient, nil},
		{"in a unit without calls", 1, ClassTransient, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &callsStore{calls: calls}
			ce := recovered(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)), st, lease, tc.scene, "boom")
			if ce.Class != tc.class || ce.Code != "internal_panic" {
				t.Errorf("recovered = %s/%s, want %s/internal_panic", ce.Class, ce.Code, tc.class)
			}
			var ids []int64
			for _, p := range st.finished {
				if p.Status != CallAmbiguous {
					t.Errorf("call %d finished %s, want %s", p.ID, p.Status, CallAmbiguous)
				}
				ids = append(ids, p.ID)
			}
			if len(ids) != len(tc.finished) || (len(ids) > 0 && ids[0] != tc.finished[0]) {
				t.Errorf("calls made ambiguous %v, want %v", ids, tc.finished)
			}
		})
	}
}

// Validate names the first missing part or bad setting of an engine's
// configuration, and passes a complete one.
func TestEngineConfigValidate(t *testing.T) {
	t.Parallel()
	type noProviders struct{ Providers }
	valid := func() EngineConfig {
		return EngineConfig{Store: &callsStore{}, Objects: readingStore{}, Providers: noProviders{},
			Renderers:       func(context.Context, int, int, int) (Renderer, error) { return nil, nil },
			UnitConcurrency: 1, ClipConcurrency: 1, Retry: DefaultRetryPolicy()}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("a complete config: %v", err)
	}
	for _, tc := range []struct {
		want   string
		change func(*EngineConfig)
	}{
		{"no store", func(c *EngineConfig) { c.Store = nil }},
		{"no object store", func(c *EngineConfig) { c.Objects = nil }},
		{"no providers", func(c *EngineConfig) { c.Providers = nil }},
		{"no renderer", func(c *EngineConfig) { c.Renderers = nil }},
		{"unit concurrency", func(c *EngineConfig) { c.UnitConcurrency = 0 }},
		{"clip concurrency", func(c *EngineConfig) { c.ClipConcurrency = 0 }},
		{"max attempts", func(c *EngineConfig) { c.Retry.MaxAttempts = 0 }},
		{"engine: invalid input: rate limits need a store", func(c *EngineConfig) { c.RateLimits.Limits = []RateLimit{{}} }},
	} {
		c := valid()
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want an error naming it", tc.want, err)
		}
	}
}
