package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/webhook"
)

// Every store the suite runs is the dispatcher's store too.
var _ webhook.Store = (*env)(nil)

var webhookT0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func openWebhookStore(t *testing.T, h *Harness) (*env, *pipeline.ManualClock) {
	t.Helper()
	clock := pipeline.NewManualClock(webhookT0)
	return h.open(t, clock), clock
}

// canceledJobWithWebhook creates a job with a webhook URL and cancels it, so
// the settling transaction writes one outbox row.
func canceledJobWithWebhook(t *testing.T, s *env, id string) {
	t.Helper()
	ctx := context.Background()
	_, created, err := s.CreateJob(ctx, pipeline.NewJob{
		ID: id, Tenant: "acme", Operation: "render_video", IdempotencyKey: "k-" + id, RequestFingerprint: "fp",
		Input: json.RawMessage(`{}`), Version: "v1", Queue: "render-v1", WebhookURL: "https://hooks.example.test/" + id,
	})
	if err != nil || !created {
		t.Fatalf("create %s: %v %v", id, created, err)
	}
	if _, err := s.RequestCancel(ctx, "acme", id); err != nil {
		t.Fatal(err)
	}
}

func testWebhookOutboxWrittenWhenJobSettles(t *testing.T, h *Harness) {
	t.Parallel()
	s, _ := openWebhookStore(t, h)
	canceledJobWithWebhook(t, s, "v1-w1")
	ds, err := s.WebhookDeliveries(context.Background(), "v1-w1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Status != webhook.StatusPending || ds[0].Attempts != 0 {
		t.Fatalf("deliveries = %+v, want one pending", ds)
	}
	var p map[string]any
	if err := json.Unmarshal(ds[0].Payload, &p); err != nil || p["status"] != "canceled" || p["job_id"] != "v1-w1" {
		t.Fatalf("payload %s: %v", ds[0].Payload, err)
	}
}

func testWebhookClaimLeasesAndFences(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s, clock := openWebhookStore(t, h)
	canceledJobWithWebhook(t, s, "v1-w1")

	first, err := s.ClaimWebhooks(ctx, 10, time.Minute)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v %v", first, err)
	}
	if first[0].Attempts != 1 || !first[0].LeaseUntil.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("claimed %+v", first[0])
	}
	// While leased, nobody else gets it.
	clock.Advance(59 * time.Second)
	if again, err := s.ClaimWebhooks(ctx, 10, time.Minute); err != nil || len(again) != 0 {
		t.Fatalf("claim during lease: %v %v", again, err)
	}
	// The lease ran out: a second dispatcher takes over.
	clock.Advance(2 * time.Second)
	second, err := s.ClaimWebhooks(ctx, 10, time.Minute)
	if err != nil || len(second) != 1 || second[0].Attempts != 2 {
		t.Fatalf("claim after lease: %v %v", second, err)
	}
	// The first claimer's late results are refused.
	if err := s.MarkWebhookDelivered(ctx, first[0]); !errors.Is(err, pipeline.ErrLeaseLost) {
		t.Fatalf("stale MarkWebhookDelivered: %v, want ErrLeaseLost", err)
	}
	if err := s.MarkWebhookFailed(ctx, first[0], "HTTP 500", clock.Now()); !errors.Is(err, pipeline.ErrLeaseLost) {
		t.Fatalf("stale MarkWebhookFailed: %v, want ErrLeaseLost", err)
	}
	if err := s.MarkWebhookDelivered(ctx, second[0]); err != nil {
		t.Fatal(err)
	}
	ds, _ := s.WebhookDeliveries(ctx, "v1-w1")
	if ds[0].Status != webhook.StatusDelivered || !ds[0].DeliveredAt.Equal(clock.Now()) {
		t.Fatalf("after delivery: %+v", ds[0])
	}
	clock.Advance(time.Hour)
	if again, _ := s.ClaimWebhooks(ctx, 10, time.Minute); len(again) != 0 {
		t.Fatalf("a delivered webhook was claimed again: %+v", again)
	}
	// Marking twice is refused too: the claim is gone.
	if err := s.MarkWebhookDelivered(ctx, second[0]); !errors.Is(err, pipeline.ErrLeaseLost) {
		t.Fatalf("second MarkWebhookDelivered: %v", err)
	}
}

func testWebhookFailedRetriesThenGivesUp(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s, clock := openWebhookStore(t, h)
	canceledJobWithWebhook(t, s, "v1-w1")

	d := claimOneWebhook(t, s)
	next := clock.Now().Add(30 * time.Second)
	if err := s.MarkWebhookFailed(ctx, d, "HTTP 503 "+strings.Repeat("x", 500), next); err != nil {
		t.Fatal(err)
	}
	ds, _ := s.WebhookDeliveries(ctx, "v1-w1")
	if ds[0].Status != webhook.StatusPending || len(ds[0].LastError) != maxWebhookError || !strings.HasPrefix(ds[0].LastError, "HTTP 503") {
		t.Fatalf("after failure: %+v", ds[0])
	}
	clock.Advance(29 * time.Second)
	if got, _ := s.ClaimWebhooks(ctx, 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed before its retry time: %+v", got)
	}
	clock.Advance(time.Second)
	d = claimOneWebhook(t, s)
	if d.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2", d.Attempts)
	}
	if err := s.MarkWebhookFailed(ctx, d, "timeout", time.Time{}); err != nil {
		t.Fatal(err)
	}
	ds, _ = s.WebhookDeliveries(ctx, "v1-w1")
	if ds[0].Status != webhook.StatusFailed || ds[0].LastError != "timeout" {
		t.Fatalf("after giving up: %+v", ds[0])
	}
	clock.Advance(24 * time.Hour)
	if got, _ := s.ClaimWebhooks(ctx, 10, time.Minute); len(got) != 0 {
		t.Fatalf("a failed delivery was claimed: %+v", got)
	}
	counts, err := s.CountWebhooks(ctx)
	if err != nil || counts[webhook.StatusFailed] != 1 || counts[webhook.StatusPending] != 0 {
		t.Fatalf("counts %v %v", counts, err)
	}
}

func claimOneWebhook(t *testing.T, s *env) webhook.Delivery {
	t.Helper()
	ds, err := s.ClaimWebhooks(context.Background(), 10, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	return ds[0]
}

// A delivery's fate never reaches the job: the job row and its event log are
// byte-for-byte the same after claims, failures, give-up and success.
func testWebhookOutcomesNeverTouchJobs(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s, clock := openWebhookStore(t, h)
	canceledJobWithWebhook(t, s, "v1-a")
	canceledJobWithWebhook(t, s, "v1-b")
	snapshot := func() string {
		var b strings.Builder
		for _, id := range []string{"v1-a", "v1-b"} {
			j, err := s.GetJob(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := s.Events(ctx, id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%+v %+v\n", j, evs)
		}
		return b.String()
	}
	before := snapshot()
	clock.Advance(time.Minute)
	ds, err := s.ClaimWebhooks(ctx, 10, time.Minute)
	if err != nil || len(ds) != 2 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	if err := s.MarkWebhookFailed(ctx, ds[0], "HTTP 500", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkWebhookDelivered(ctx, ds[1]); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); after != before {
		t.Fatalf("webhook outcomes changed a job:\nbefore %s\nafter  %s", before, after)
	}
}

// Two dispatchers claiming at the same moment never get the same delivery.
func testWebhookConcurrentClaimsAreDisjoint(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openWebhookStore(t, h)
	const n = 30
	for i := range n {
		canceledJobWithWebhook(t, s, fmt.Sprintf("v1-c%d", i))
	}
	var (
		mu   sync.Mutex
		seen = map[int64]int{}
		wg   sync.WaitGroup
	)
	for range 6 {
		wg.Go(func() {
			for range n { // bounded: a claim that does not hide its rows must not hang the test
				ds, err := s.ClaimWebhooks(ctx, 4, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					return
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("claimed %d distinct deliveries, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("delivery %d claimed %d times", id, c)
		}
	}
}

func testWebhookClaimRefusesBadArguments(t *testing.T, h *Harness) {
	t.Parallel()
	s, _ := openWebhookStore(t, h)
	for _, tc := range []struct {
		limit int
		lease time.Duration
	}{{0, time.Minute}, {-1, time.Minute}, {1, 0}, {1, time.Microsecond}} {
		if _, err := s.ClaimWebhooks(context.Background(), tc.limit, tc.lease); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("ClaimWebhooks(%d, %s) = %v, want ErrInvalidInput", tc.limit, tc.lease, err)
		}
	}
}

// The smallest lease and limit ClaimWebhooks accepts are 1 ms and 1.
func testWebhookClaimSmallestArguments(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openWebhookStore(t, h)
	canceledJobWithWebhook(t, s, "v1-wh1")
	if _, err := s.ClaimWebhooks(ctx, 1, time.Millisecond-time.Nanosecond); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("ClaimWebhooks(1, 999.999µs) = %v, want ErrInvalidInput", err)
	}
	ds, err := s.ClaimWebhooks(ctx, 1, time.Millisecond)
	if err != nil || len(ds) != 1 || ds[0].JobID != "v1-wh1" {
		t.Fatalf("ClaimWebhooks(1, 1ms) = %+v, %v; want the one delivery", ds, err)
	}
}
