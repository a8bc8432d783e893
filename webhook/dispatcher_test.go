package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/storage/sqlite"
	"edgepipe/webhook"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

var secret = []byte("whsec-test-0123456789abcdef")

type env struct {
	store *sqlite.Store
	clock *pipeline.ManualClock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clock := pipeline.NewManualClock(t0)
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "db"), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &env{store: s, clock: clock}
}

// settledJob creates a job with a webhook and cancels it: the cancel's
// transaction writes the outbox row.
func (e *env) settledJob(t *testing.T, id, url string) pipeline.Job {
	t.Helper()
	ctx := context.Background()
	if _, _, err := e.store.CreateJob(ctx, pipeline.NewJob{ID: id, Tenant: "acme", Operation: "render_video",
		IdempotencyKey: id, RequestFingerprint: "fp", Version: "v1", Queue: "render-v1", WebhookURL: url}); err != nil {
		t.Fatal(err)
	}
	j, err := e.store.RequestCancel(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (e *env) dispatcher(t *testing.T, mutate func(*webhook.Config)) *webhook.Dispatcher {
	t.Helper()
	cfg := webhook.Config{
		Store: e.store, Secret: secret, AllowPrivate: true, Clock: e.clock,
		Backoff: pipeline.RetryPolicy{Base: time.Minute, Cap: time.Hour, MaxAttempts: 3, Rand: func() float64 { return 0.5 }},
		Timeout: 2 * time.Second, Poll: 10 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type received struct {
	header http.Header
	body   []byte
}

// receiver verifies every request as a real receiver would and answers with
// the status codes it is given, in turn (the last one repeats).
type receiver struct {
	mu       sync.Mutex
	got      []received
	statuses []int
	verr     []error
	now      func() time.Time
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, received{req.Header.Clone(), body})
	r.verr = append(r.verr, webhook.Verify(secret, req.Header.Get(webhook.SignatureHeader), body, r.now(), time.Minute))
	code := r.statuses[min(len(r.got)-1, len(r.statuses)-1)]
	w.WriteHeader(code)
	io.WriteString(w, "receiver internals: stack trace with secrets")
}

func (r *receiver) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.got) }

func TestDeliverSignedWebhook(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := &receiver{statuses: []int{204}, now: e.clock.Now}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	j := e.settledJob(t, "v1-a", srv.URL+"/hook")
	d := e.dispatcher(t, nil)

	n, err := d.RunOnce(context.Background())
	if err != nil || n != 1 || rc.count() != 1 {
		t.Fatalf("RunOnce = %d, %v; receiver saw %d", n, err, rc.count())
	}
	got := rc.got[0]
	if rc.verr[0] != nil {
		t.Fatalf("signature did not verify: %v (header %q)", rc.verr[0], got.header.Get(webhook.SignatureHeader))
	}
	if got.header.Get("Content-Type") != "application/json" || got.header.Get(webhook.AttemptHeader) != "1" || got.header.Get(webhook.DeliveryHeader) == "" {
		t.Fatalf("headers %v", got.header)
	}
	var p map[string]any
	if err := json.Unmarshal(got.body, &p); err != nil || p["job_id"] != j.ID || p["status"] != "canceled" {
		t.Fatalf("payload %s", got.body)
	}
	// A receiver that checks a tampered copy refuses it.
	if err := webhook.Verify(secret, got.header.Get(webhook.SignatureHeader), []byte(strings.Replace(string(got.body), "canceled", "succeeded", 1)), e.clock.Now(), 0); !errors.Is(err, webhook.ErrInvalidSignature) {
		t.Fatalf("tampered payload verified: %v", err)
	}
	ds, _ := e.store.WebhookDeliveries(context.Background(), j.ID)
	if len(ds) != 1 || ds[0].Status != webhook.StatusDelivered {
		t.Fatalf("deliveries %+v", ds)
	}
	// Nothing more to send.
	e.clock.Advance(time.Hour)
	if n, _ := d.RunOnce(context.Background()); n != 0 || rc.count() != 1 {
		t.Fatalf("sent again: %d %d", n, rc.count())
	}
}

func TestFailedDeliveryRetriesWithBackoffThenGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	rc := &receiver{statuses: []int{500, 503, 500}, now: e.clock.Now}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	j := e.settledJob(t, "v1-a", srv.URL+"/hook")
	before, _ := e.store.GetJob(ctx, j.ID)
	beforeEvents, _ := e.store.Events(ctx, j.ID, 0, 0)
	d := e.dispatcher(t, nil)

	if n, _ := d.RunOnce(ctx); n != 1 {
		t.Fatal("first attempt not made")
	}
	ds, _ := e.store.WebhookDeliveries(ctx, j.ID)
	// Attempt 1 failed: next try after max(backoff, base) = base here.
	if ds[0].Status != webhook.StatusPending || ds[0].LastError != "HTTP 500" || !ds[0].LeaseUntil.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after 1st failure: %+v", ds[0])
	}
	if strings.Contains(ds[0].LastError, "receiver internals") {
		t.Fatal("the receiver's body was stored")
	}
	// Not before its time.
	e.clock.Advance(59 * time.Second)
	if n, _ := d.RunOnce(ctx); n != 0 {
		t.Fatal("retried before the backoff elapsed")
	}
	e.clock.Advance(time.Second)
	if n, _ := d.RunOnce(ctx); n != 1 {
		t.Fatal("second attempt not made")
	}
	ds, _ = e.store.WebhookDeliveries(ctx, j.ID)
	if ds[0].Attempts != 2 || ds[0].LastError != "HTTP 503" || !ds[0].LeaseUntil.After(e.clock.Now()) {
		t.Fatalf("after 2nd failure: %+v", ds[0])
	}
	e.clock.Advance(time.Hour)
	if n, _ := d.RunOnce(ctx); n != 1 {
		t.Fatal("third attempt not made")
	}
	ds, _ = e.store.WebhookDeliveries(ctx, j.ID)
	if ds[0].Status != webhook.StatusFailed || ds[0].Attempts != 3 {
		t.Fatalf("after max attempts: %+v", ds[0])
	}
	e.clock.Advance(24 * time.Hour)
	if n, _ := d.RunOnce(ctx); n != 0 || rc.count() != 3 {
		t.Fatalf("given-up delivery sent again: %d", rc.count())
	}
	if got := rc.got[2].header.Get(webhook.AttemptHeader); got != "3" {
		t.Fatalf("attempt header %q", got)
	}
	// The job never noticed.
	after, _ := e.store.GetJob(ctx, j.ID)
	afterEvents, _ := e.store.Events(ctx, j.ID, 0, 0)
	if after.Status != before.Status || !after.UpdatedAt.Equal(before.UpdatedAt) || len(afterEvents) != len(beforeEvents) {
		t.Fatalf("delivery failures touched the job: %+v → %+v", before, after)
	}
}

// Without AllowPrivate the dial guard refuses loopback targets, also when
// the URL names a host that resolves there only at delivery time (as a
// rebinding attacker's would): no request reaches the receiver.
func TestDispatchRefusesPrivateTargets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':'):]
	e.settledJob(t, "v1-literal", srv.URL+"/hook")
	e.settledJob(t, "v1-name", "http://localhost"+port+"/hook")
	d := e.dispatcher(t, func(c *webhook.Config) { c.AllowPrivate = false })
	if n, err := d.RunOnce(ctx); n != 2 || err != nil {
		t.Fatalf("RunOnce %d %v", n, err)
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests reached a loopback receiver", hits.Load())
	}
	for _, id := range []string{"v1-literal", "v1-name"} {
		ds, _ := e.store.WebhookDeliveries(ctx, id)
		if ds[0].LastError != "refused: target address is not public" || ds[0].Status != webhook.StatusPending {
			t.Fatalf("%s: %+v", id, ds[0])
		}
	}
}

func TestRedirectIsAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var followed atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Add(1) }))
	t.Cleanup(target.Close)
	redir := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	t.Cleanup(redir.Close)
	j := e.settledJob(t, "v1-r", redir.URL)
	if _, err := e.dispatcher(t, nil).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	ds, _ := e.store.WebhookDeliveries(context.Background(), j.ID)
	if followed.Load() != 0 || ds[0].LastError != "HTTP 307" {
		t.Fatalf("followed=%d delivery %+v", followed.Load(), ds[0])
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := &receiver{statuses: []int{200}, now: e.clock.Now}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	for _, id := range []string{"v1-a", "v1-b", "v1-c"} {
		e.settledJob(t, id, srv.URL)
	}
	d := e.dispatcher(t, nil)
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err == nil {
		t.Fatal("second Start succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for rc.count() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if rc.count() != 3 {
		t.Fatalf("receiver saw %d deliveries, want 3", rc.count())
	}
	for _, err := range rc.verr {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Stop waits for a slow receiver until its context ends, then abandons the
// request; the delivery stays claimed and is retried after the lease.
func TestStopAbandonsSlowDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	j := e.settledJob(t, "v1-slow", srv.URL)
	d := e.dispatcher(t, func(c *webhook.Config) { c.Timeout = 30 * time.Second; c.Lease = time.Minute })
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := d.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want DeadlineExceeded", err)
	}
	ds, _ := e.store.WebhookDeliveries(context.Background(), j.ID)
	if ds[0].Status != webhook.StatusPending || ds[0].Attempts != 1 || !ds[0].LeaseUntil.Equal(t0.Add(time.Minute)) {
		t.Fatalf("abandoned delivery %+v", ds[0])
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, c := range map[string]webhook.Config{
		"no store":        {Secret: secret},
		"no secret":       {Store: e.store},
		"short secret":    {Store: e.store, Secret: []byte("short")},
		"lease ≤ timeout": {Store: e.store, Secret: secret, Timeout: time.Minute, Lease: time.Minute},
		"bad backoff":     {Store: e.store, Secret: secret, Backoff: pipeline.RetryPolicy{Base: time.Second, Cap: time.Millisecond, MaxAttempts: 1}},
	} {
		if _, err := webhook.New(c); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
