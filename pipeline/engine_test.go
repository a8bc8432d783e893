package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider/fake"
)

func TestEngineHappyPathStoresEverything(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	scenes := []pipeline.Scene{img("a red fox", "The fox wakes.", 1000), img("a blue lake", "", 800)}
	if haveFFmpeg() {
		scenes = append(scenes, vid("waves", "The sea.", 600))
	}
	h.submit("v1-happy", board(scenes...))
	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("outcome %+v err %v", o, err)
	}
	j := h.job("v1-happy")
	if j.Status != pipeline.StatusSucceeded || j.ResultKey == "" || j.UnitsDone != len(scenes) || j.Stage != pipeline.StageFinalize {
		t.Fatalf("job %+v", j)
	}
	a, err := h.store.GetAsset(ctx, j.ResultKey)
	if err != nil || a.Kind != "render" || a.DurationMS != 1000+800+map[bool]int{true: 600}[len(scenes) == 3] {
		t.Fatalf("render asset %+v %v", a, err)
	}
	info, err := h.objs.Head(ctx, j.ResultKey)
	if err != nil || info.Size != a.SizeBytes || info.SHA256 != a.SHA256 {
		t.Fatalf("object %+v vs asset %+v (%v)", info, a, err)
	}
	units, _ := h.store.Units(ctx, "v1-happy")
	for _, u := range units {
		if u.Status != pipeline.UnitGenerated {
			t.Fatalf("unit %+v", u)
		}
		for name, key := range u.Artifacts {
			if strings.Contains(key, "fox") || strings.Contains(key, "..") {
				t.Fatalf("key %q leaks user text", key)
			}
			if _, err := h.store.GetAsset(ctx, key); err != nil {
				t.Fatalf("artifact %s=%s has no asset: %v", name, key, err)
			}
		}
	}
	if len(units[1].Artifacts) != 1 {
		t.Fatalf("scene without narration made %d artifacts", len(units[1].Artifacts))
	}
	calls, _ := h.store.ProviderCalls(ctx, "v1-happy", pipeline.AllScenes, "")
	for _, c := range calls {
		if c.Status != pipeline.CallSucceeded {
			t.Fatalf("call %+v", c)
		}
	}
	led := h.fake.Ledger()
	if led.Billed.Image != 2 || led.Billed.Speech != int64(len(scenes)-1) {
		t.Fatalf("ledger %+v", led.Billed)
	}
}

// A unit generated in attempt 1 is reused by attempt 2 after a crash between
// execute and apply: no new provider calls at all.
func TestUnitsReusedAfterCrashBeforeApply(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.submit("v1-reuse", board(img("one", "first", 700), img("two", "second", 700)))
	h.fp.set("after_execute", once(errCrash))
	if _, _, err := h.attempt("render-v1", false); err != nil {
		t.Fatal(err)
	}
	before := h.fake.Ledger()
	if before.Billed.Image != 2 || before.Billed.Speech != 2 {
		t.Fatalf("attempt 1 billed %+v", before.Billed)
	}
	h.clock.Advance(2 * time.Minute) // the crashed attempt's lease runs out
	c, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusSucceeded || c.Lease.Attempt != 2 {
		t.Fatalf("attempt 2: %+v %+v %v", c.Lease, o, err)
	}
	after := h.fake.Ledger()
	if after.Calls != before.Calls || after.Billed != before.Billed {
		t.Fatalf("attempt 2 called providers: before %+v after %+v", before, after)
	}
}

// A crash after an artifact's asset row was written but before the unit
// recorded it: the next attempt finds the asset by its deterministic key and
// pays nothing again.
func TestAssetFoundByKeyAfterCrashBeforeUnitUpdate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.submit("v1-key", board(img("only", "spoken", 700)))
	h.fp.set("after_asset_before_unit", once(errCrash))
	if _, _, err := h.attempt("render-v1", false); err != nil {
		t.Fatal(err)
	}
	units, _ := h.store.Units(context.Background(), "v1-key")
	if len(units[0].Artifacts) != 0 {
		t.Fatalf("the crash came too late: %+v", units[0])
	}
	before := h.fake.Ledger()
	h.clock.Advance(2 * time.Minute)
	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("attempt 2: %+v %v", o, err)
	}
	after := h.fake.Ledger()
	if after.Billed.Image != before.Billed.Image || after.Billed.Speech != 1 {
		t.Fatalf("attempt 2 paid for the image again (or not once for speech): before %+v after %+v", before.Billed, after.Billed)
	}
}

// An async unit whose submit succeeded but whose worker died before the
// result was saved is recovered by polling the stored id: one submit.
func TestAsyncUnitRecoveredByPolling(t *testing.T) {
	t.Parallel()
	needFFmpeg(t, "ffmpeg not installed: the fake video provider needs it")
	h := newHarness(t)
	h.submit("v1-async", board(vid("clouds", "", 600)))
	h.fp.set("after_provider_response", once(errCrash))
	if _, _, err := h.attempt("render-v1", false); err != nil {
		t.Fatal(err)
	}
	units, _ := h.store.Units(context.Background(), "v1-async")
	if h.fake.Ledger().Billed.Video != 1 {
		t.Fatal("no submit in attempt 1")
	}
	h.clock.Advance(2 * time.Minute)
	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("attempt 2: %+v %v", o, err)
	}
	if n := h.fake.Ledger().Billed.Video; n != 1 {
		t.Fatalf("video billed %d times, want 1 (recovered by polling); unit after crash %+v", n, units)
	}
}

// An error in one of N parallel units fails the stage and cancels the
// siblings; nothing is swallowed.
func TestUnitErrorCancelsSiblings(t *testing.T) {
	t.Parallel()
	var canceled atomic.Int32
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers {
		return &hookProviders{before: func(ctx context.Context, op, unit string) error {
			if op != pipeline.OpImage {
				return nil
			}
			if strings.HasSuffix(unit, "/1") {
				// Fail only once both siblings are inside their calls.
				for range 2 {
					select {
					case <-entered:
					case <-time.After(10 * time.Second):
						return errors.New("siblings never started")
					}
				}
				return &pipeline.CallError{Op: op, Outcome: pipeline.OutcomeRejected, HTTPStatus: 400, Code: "provider_rejected_input", Cause: errors.New("raw: bad prompt")}
			}
			entered <- struct{}{}
			select { // siblings block until canceled
			case <-ctx.Done():
				canceled.Add(1)
				return ctx.Err()
			case <-release:
				return nil
			}
		}}
	}))
	defer close(release)
	h.submit("v1-sib", board(img("a", "", 600), img("b", "", 600), img("c", "", 600)))
	done := make(chan pipeline.Outcome, 1)
	go func() {
		_, o, err := h.attempt("render-v1", true)
		if err != nil {
			t.Error(err)
		}
		done <- o
	}()
	select {
	case o := <-done:
		if o.Status != pipeline.StatusFailed || o.ErrorCode != "provider_rejected_input" {
			t.Fatalf("outcome %+v", o)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a failed unit did not cancel its siblings")
	}
	if canceled.Load() != 2 {
		t.Fatalf("%d siblings saw the cancellation, want 2", canceled.Load())
	}
	if billed := h.fake.Ledger().Billed; billed.Image != 0 {
		t.Fatalf("a sibling's call went through after the stage failed: %+v", billed)
	}
	if strings.Contains(h.job("v1-sib").LastErrorMessage, "raw") {
		t.Fatal("raw provider text reached the job")
	}
}

// A zombie attempt (lease expired and taken over) cannot store a unit result
// or an asset.
func TestZombieAttemptCannotStore(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	proceed := make(chan struct{})
	var first sync.Once
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers {
		return &hookProviders{before: func(ctx context.Context, op, unit string) error {
			blocked := false
			first.Do(func() { blocked = true })
			if blocked {
				close(entered)
				<-proceed
			}
			return nil
		}}
	}))
	ctx := context.Background()
	h.submit("v1-zombie", board(img("z", "", 600)))
	cs, _, _ := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "a", Max: 1, LeaseFor: time.Minute})
	zombie := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, attemptDeadline)
		defer cancel()
		_, err := h.engine.Run(rctx, cs[0])
		zombie <- err
	}()
	within(t, entered, "the zombie's provider call")
	h.clock.Advance(2 * time.Minute)
	b, _, _ := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "b", Max: 1, LeaseFor: time.Minute})
	if len(b) != 1 {
		t.Fatal("lease not taken over")
	}
	close(proceed)
	err := within(t, zombie, "the zombie attempt to end")
	var fe *pipeline.FenceError
	if !errors.As(err, &fe) {
		t.Fatalf("zombie run returned %v, want a FenceError", err)
	}
	units, _ := h.store.Units(ctx, "v1-zombie")
	if len(units[0].Artifacts) != 0 {
		t.Fatalf("zombie stored a unit result: %+v", units[0])
	}
	n := 0
	_ = h.store.ListAssets(ctx, func(pipeline.Asset) error { n++; return nil })
	if n != 0 {
		t.Fatalf("zombie left %d asset rows", n)
	}
	// and its object was cleaned up, since no one else refers to the key
	objects := 0
	_ = h.objs.List(ctx, "", func(pipeline.ObjectInfo) bool { objects++; return true })
	if objects != 0 {
		t.Fatalf("zombie left %d objects", objects)
	}
	// B finishes the job normally, reusing nothing it should not.
	o, err := h.engine.Run(ctx, b[0])
	if err != nil || o.Status != pipeline.StatusSucceeded {
		t.Fatalf("B: %+v %v", o, err)
	}
}

func TestCancellation(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"after_claim", "before_provider_call", "after_execute", "before_upload"} {
		t.Run(at, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			// One scene: its image and speech calls run in sequence, so a
			// cancel recorded at the first boundary stops both.
			h.submit("v1-c", board(img("x", "words", 600)))
			h.fp.set(at, func(ctx context.Context) error {
				_, err := h.store.RequestCancel(context.Background(), "acme", "v1-c")
				return err
			})
			_, o, err := h.attempt("render-v1", true)
			if err != nil || o.Status != pipeline.StatusCanceled {
				t.Fatalf("outcome %+v %v", o, err)
			}
			billed := h.fake.Ledger().Billed
			switch at {
			case "after_claim", "before_provider_call":
				if billed.Image+billed.Speech != 0 {
					t.Fatalf("provider called after cancellation: %+v", billed)
				}
			}
			if h.job("v1-c").Status != pipeline.StatusCanceled {
				t.Fatal("job not canceled")
			}
			j := h.job("v1-c")
			if j.ResultKey != "" {
				t.Fatal("canceled job has a result")
			}
		})
	}
}

// Ambiguous failure → needs_review with requires_action, a safe code, and no
// raw provider text.
func TestAmbiguousFailureNeedsReview(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFaults("speech:after_commit=1", 7))
	h.submit("v1-amb", board(img("x", "hello there", 600)))
	_, o, err := h.attempt("render-v1", true)
	if err != nil || o.Status != pipeline.StatusNeedsReview {
		t.Fatalf("outcome %+v %v", o, err)
	}
	j := h.job("v1-amb")
	if !j.RequiresAction || j.LastErrorClass != pipeline.ClassAmbiguous || j.LastErrorCode != "provider_server_error" {
		t.Fatalf("job %+v", j)
	}
	for _, bad := range []string{"fake", "500", "Internal", "127.0.0.1"} {
		if strings.Contains(j.LastErrorMessage, bad) {
			t.Fatalf("raw text %q in %q", bad, j.LastErrorMessage)
		}
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Fatalf("speech billed %d", n)
	}
	// An operator retries: that waives the unknown call, so the engine may
	// pay for the speech once more, and the job finishes.
	if _, err := h.store.Decide(context.Background(), &pipeline.DecideParams{JobID: "v1-amb", Decision: pipeline.DecisionRetry, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	h.fake.SetFaults(fake.Faults{})
	_, o, _ = h.attempt("render-v1", true)
	if o.Status != pipeline.StatusSucceeded || h.fake.Ledger().Billed.Speech != 2 {
		t.Fatalf("retry after review: %+v billed %d", o, h.fake.Ledger().Billed.Speech)
	}
	calls, _ := h.store.ProviderCalls(context.Background(), "v1-amb", 0, pipeline.OpSpeech)
	if len(calls) != 2 || calls[0].Status != pipeline.CallWaived || calls[1].Status != pipeline.CallSucceeded {
		t.Fatalf("audit after the waiver: %+v", calls)
	}
}

// apply and finalize receive no provider handle: no field of their
// dependency structs can hold one, at any depth.
func TestLaterStagesCannotReachProviders(t *testing.T) {
	t.Parallel()
	prov := reflect.TypeFor[pipeline.Providers]()
	for _, typ := range []reflect.Type{reflect.TypeFor[pipeline.ApplyDeps](), reflect.TypeFor[pipeline.FinalizeDeps]()} {
		if path := reaches(typ, prov, map[reflect.Type]bool{}); path != "" {
			t.Errorf("%s reaches pipeline.Providers through %s", typ.Name(), path)
		}
	}
	// and the check itself works: ExecuteDeps does reach it
	if reaches(reflect.TypeFor[pipeline.ExecuteDeps](), prov, map[reflect.Type]bool{}) == "" {
		t.Fatal("the reachability check cannot see a Providers field")
	}
}

func reaches(t, target reflect.Type, seen map[reflect.Type]bool) string {
	if seen[t] {
		return ""
	}
	seen[t] = true
	if t == target || (t.Kind() == reflect.Interface && target.Kind() == reflect.Interface && t.NumMethod() > 0 && target.Implements(t) && t.Implements(target)) {
		return t.String()
	}
	if t.Kind() == reflect.Interface && t.NumMethod() > 0 {
		// An interface whose method set includes Providers' would let a
		// Providers be stored and asserted back.
		for i := range target.NumMethod() {
			if _, ok := t.MethodByName(target.Method(i).Name); ok {
				return t.String() + "." + target.Method(i).Name
			}
		}
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Type.Kind() == reflect.Interface && f.Type.NumMethod() == 0 {
				return f.Name + " (any)"
			}
			if p := reaches(f.Type, target, seen); p != "" {
				return f.Name + "." + p
			}
		}
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map, reflect.Chan:
		return reaches(t.Elem(), target, seen)
	}
	return ""
}

// siblingFailsDuringPaidCall runs one attempt of a two-scene job in which
// scene 1's image is rate limited while scene 0's paid call (op) is in
// flight, and checks that the paid call was not torn down.
func siblingFailsDuringPaidCall(t *testing.T, id, op string, scene0 pipeline.Scene) *harness {
	t.Helper()
	return siblingFailsDuringPaidCallAnswering(t, id, op, scene0, nil, pipeline.CallSucceeded)
}

// siblingFailsDuringPaidCallAnswering is siblingFailsDuringPaidCall with the
// paid call ending in answer (nil: the provider's own answer) and its audit
// row expected to end as wantCall.
func siblingFailsDuringPaidCallAnswering(t *testing.T, id, op string, scene0 pipeline.Scene, answer error, wantCall string) *harness {
	t.Helper()
	inCall := make(chan struct{})
	failed := make(chan struct{})
	var sawCancel, rateLimited atomic.Bool
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers {
		return &hookProviders{before: func(ctx context.Context, callOp, unit string) error {
			switch {
			case callOp == op && strings.HasSuffix(unit, "/0"):
				if rateLimited.Load() {
					return nil // a later attempt; callers check the ledger
				}
				close(inCall)
				select {
				case <-failed:
				case <-time.After(10 * time.Second):
					return errors.New("the sibling never failed")
				}
				// The sibling's error cancels the stage within a few
				// milliseconds; a call still bound to it would see that.
				select {
				case <-ctx.Done():
					sawCancel.Store(true)
					return ctx.Err()
				case <-time.After(500 * time.Millisecond):
					return answer
				}
			case callOp == pipeline.OpImage && strings.HasSuffix(unit, "/1") && !rateLimited.Load():
				select {
				case <-inCall:
				case <-time.After(10 * time.Second):
					return errors.New("the paid call never started")
				}
				rateLimited.Store(true)
				close(failed)
				return &pipeline.CallError{Op: callOp, Outcome: pipeline.OutcomeRateLimited, HTTPStatus: 429, Code: "provider_rate_limited", RetryAfter: time.Second}
			}
			return nil
		}}
	}))
	h.submit(id, board(scene0, img("b", "", 600)))
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait {
		t.Fatalf("attempt 1: %+v %v (want retry_wait)", o, err)
	}
	if sawCancel.Load() {
		t.Fatal("the sibling's failure canceled a paid call in flight")
	}
	calls, err := h.store.ProviderCalls(context.Background(), id, 0, op)
	if err != nil || len(calls) != 1 || calls[0].Status != wantCall {
		t.Fatalf("%s calls after attempt 1: %+v %v; want one %s", op, calls, err, wantCall)
	}
	return h
}

// A sibling's failure does not tear down a paid call that cannot be repeated
// safely (a sync speech call, a video submission): the request in flight
// completes and is recorded, the job waits to retry (not needs_review), and
// the next attempt uses that result (the spooled speech, the video's id)
// instead of paying again.
func TestSiblingFailureLetsPaidCallFinish(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		op     string
		scene0 pipeline.Scene
		billed func(fake.LedgerSnapshot) int64
	}{
		{pipeline.OpSpeech, img("a", "narration for a", 600), func(l fake.LedgerSnapshot) int64 { return l.Billed.Speech }},
		{pipeline.OpVideoSubmit, vid("a", "", 600), func(l fake.LedgerSnapshot) int64 { return l.Billed.Video }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			t.Parallel()
			h := siblingFailsDuringPaidCall(t, "v1-inflight", tc.op, tc.scene0)
			h.drain(5)
			if j := h.job("v1-inflight"); j.Status != pipeline.StatusSucceeded {
				t.Fatalf("job ended %s (%s)", j.Status, j.LastErrorCode)
			}
			if n := tc.billed(h.fake.Ledger()); n != 1 {
				t.Fatalf("%s billed %d times, want 1", tc.op, n)
			}
		})
	}
}

// Losing this worker's disk (the spool directory) does not lose a paid
// answer: it was staged in the object store the moment it arrived, and the
// next attempt — on any machine — stores it instead of paying again.
func TestWipedSpoolDoesNotLoseStagedAnswer(t *testing.T) {
	t.Parallel()
	h := siblingFailsDuringPaidCall(t, "v1-wiped", pipeline.OpSpeech, img("a", "narration for a", 600))
	if err := os.RemoveAll(h.cfg.SpoolDir); err != nil {
		t.Fatal(err)
	}
	h.drain(5)
	if j := h.job("v1-wiped"); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("job %s (%s), want succeeded from the staged answer", j.Status, j.LastErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Fatalf("speech billed %d times, want 1", n)
	}
	calls, err := h.store.ProviderCalls(context.Background(), "v1-wiped", 0, pipeline.OpSpeech)
	if err != nil || len(calls) != 1 || calls[0].StagedKey == "" {
		t.Fatalf("speech calls %+v %v; want one, pointing at its staged answer", calls, err)
	}
	// The asset made from it exists, so the staged copy is gone.
	if _, err := h.store.GetAsset(context.Background(), calls[0].StagedKey); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("staged answer after its asset was made: %v, want it released", err)
	}
	if _, err := h.objs.Head(context.Background(), calls[0].StagedKey); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("staged object after its asset was made: %v, want it deleted", err)
	}
}

// If every copy of such an answer is lost before the next attempt (the
// spool directory and the staged object both gone), that attempt stops for
// review — it cannot know the answer is not somewhere — and an operator's
// retry then moves the job on: the answered-but-never-stored call is waived
// and bought once more.
func TestOperatorRetryWaivesAnsweredButLostCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := siblingFailsDuringPaidCall(t, "v1-lost", pipeline.OpSpeech, img("a", "narration for a", 600))
	if err := os.RemoveAll(filepath.Join(h.cfg.SpoolDir, "v1-lost")); err != nil {
		t.Fatal(err)
	}
	calls, err := h.store.ProviderCalls(ctx, "v1-lost", 0, pipeline.OpSpeech)
	if err != nil || len(calls) != 1 || calls[0].StagedKey == "" {
		t.Fatalf("speech calls %+v %v", calls, err)
	}
	if err := h.store.ExecForTest(ctx, "DELETE FROM assets WHERE kind = 'staged'"); err != nil {
		t.Fatal(err)
	}
	if err := h.objs.Delete(ctx, calls[0].StagedKey); err != nil {
		t.Fatal(err)
	}
	h.drain(5)
	j := h.job("v1-lost")
	if j.Status != pipeline.StatusNeedsReview || j.LastErrorCode != "provider_outcome_unknown" {
		t.Fatalf("job %s (%s), want needs_review provider_outcome_unknown", j.Status, j.LastErrorCode)
	}
	if _, err := h.store.Decide(ctx, &pipeline.DecideParams{JobID: "v1-lost", Decision: pipeline.DecisionRetry, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	h.drain(5)
	if j := h.job("v1-lost"); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("after the operator's retry the job ended %s (%s)", j.Status, j.LastErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 2 {
		t.Fatalf("speech billed %d times, want 2 (the lost answer, then the waived repeat)", n)
	}
}

// A stage that fails while a paid call's intent is being written stops that
// call before it is sent: the intent is closed as not_sent, nothing is
// billed, and the next attempt makes the call without asking a human.
func TestStageFailureStopsCallBeforeSend(t *testing.T) {
	t.Parallel()
	const id = "v1-beforesend"
	s1Entered := make(chan struct{})
	blocked := make(chan struct{})
	var once sync.Once
	var failedOnce atomic.Bool
	h := newHarness(t, withProviders(func(pipeline.Providers) pipeline.Providers {
		return &hookProviders{before: func(ctx context.Context, op, unit string) error {
			if op != pipeline.OpImage || failedOnce.Load() {
				return nil
			}
			switch {
			case strings.HasSuffix(unit, "/0"): // scene 0's image waits for scene 1 to be inside its call
				select {
				case <-s1Entered:
				case <-time.After(10 * time.Second):
				}
			case strings.HasSuffix(unit, "/1"): // then fails once scene 0 sits between intent and send
				close(s1Entered)
				select {
				case <-blocked:
				case <-time.After(10 * time.Second):
					return errors.New("scene 0 never reached its speech intent")
				}
				failedOnce.Store(true)
				return &pipeline.CallError{Op: op, Outcome: pipeline.OutcomeRateLimited, HTTPStatus: 429, Code: "provider_rate_limited"}
			}
			return nil
		}}
	}))
	h.fp.set("after_provider_intent", func(ctx context.Context) error {
		calls, err := h.store.ProviderCalls(context.Background(), id, 0, pipeline.OpSpeech)
		if err != nil || len(calls) == 0 || failedOnce.Load() {
			return err
		}
		first := false
		once.Do(func() { first = true })
		if first { // scene 0's speech intent is written: hold it until the stage fails
			close(blocked)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
		return nil
	})
	h.submit(id, board(img("a", "narration for a", 600), img("b", "", 600)))
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait {
		t.Fatalf("attempt 1: %+v %v (want retry_wait)", o, err)
	}
	calls, err := h.store.ProviderCalls(context.Background(), id, 0, pipeline.OpSpeech)
	if err != nil || len(calls) != 1 || calls[0].Status != pipeline.CallNotSent {
		t.Fatalf("speech calls after attempt 1: %+v %v, want one not_sent", calls, err)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 0 {
		t.Fatalf("speech billed %d times after the stage failed before sending", n)
	}
	h.drain(5)
	if j := h.job(id); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("job ended %s (%s)", j.Status, j.LastErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Fatalf("speech billed %d times, want 1", n)
	}
}

// A paid call that outlives its failed stage and is then refused by the
// provider on its own is recorded as that refusal (not billed), not as an
// interrupted call of unknown outcome.
func TestPaidCallOutlivingItsStageRecordsItsOwnOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		op     string
		scene0 pipeline.Scene
	}{
		{pipeline.OpSpeech, img("a", "narration for a", 600)},
		{pipeline.OpVideoSubmit, vid("a", "", 600)},
	} {
		t.Run(tc.op, func(t *testing.T) {
			t.Parallel()
			refused := &pipeline.CallError{Op: tc.op, Outcome: pipeline.OutcomeRejected, HTTPStatus: 400, Code: "provider_rejected_input"}
			siblingFailsDuringPaidCallAnswering(t, "v1-refused", tc.op, tc.scene0, refused, pipeline.CallFailed)
		})
	}
}

// An operator's retry does not waive an answered call whose answer is
// staged: the next attempt stores that answer rather than paying again.
func TestRetryDoesNotWaiveStagedAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := siblingFailsDuringPaidCall(t, "v1-waivedspool", pipeline.OpSpeech, img("a", "narration for a", 600))
	// The job lands under review for some other reason before it runs again.
	h.clock.Advance(time.Minute)
	cs, _, err := h.store.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: "w", Max: 1, LeaseFor: time.Minute})
	if err != nil || len(cs) != 1 {
		t.Fatalf("fetch: %v", err)
	}
	if err := h.store.Finish(ctx, cs[0].Lease, pipeline.Outcome{Status: pipeline.StatusNeedsReview, RequiresAction: true,
		ErrorClass: pipeline.ClassAmbiguous, ErrorCode: "provider_outcome_unknown"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Decide(ctx, &pipeline.DecideParams{JobID: "v1-waivedspool", Decision: pipeline.DecisionRetry, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	if calls, err := h.store.ProviderCalls(ctx, "v1-waivedspool", 0, pipeline.OpSpeech); err != nil || len(calls) != 1 || calls[0].Status != pipeline.CallSucceeded {
		t.Fatalf("speech calls after the retry decision: %+v %v; want one succeeded (staged, not waived)", calls, err)
	}
	h.drain(5)
	if j := h.job("v1-waivedspool"); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("job ended %s (%s)", j.Status, j.LastErrorCode)
	}
	if n := h.fake.Ledger().Billed.Speech; n != 1 {
		t.Fatalf("speech billed %d times, want 1 (the staged answer)", n)
	}
}

// A job of a version this build has no workflow for is never run as
// another version: the attempt parks it as a permanent, operator-facing
// dead letter before touching anything.
func TestEngineUnboundVersionIsDeadLettered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if _, _, err := h.store.CreateJob(context.Background(), pipeline.NewJob{ID: "v9-nowhere", Tenant: "acme", Operation: pipeline.OperationRenderVideo,
		IdempotencyKey: "k-v9", RequestFingerprint: "f", Input: []byte(`{}`), Version: "v9", Queue: "render-v9"}); err != nil {
		t.Fatal(err)
	}
	_, o, err := h.attempt("render-v9", false)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusDeadLettered || o.Reason != pipeline.ReasonUnboundVersion || o.ErrorClass != pipeline.ClassPermanent ||
		o.ErrorCode != pipeline.ReasonUnboundVersion || !o.RequiresAction {
		t.Fatalf("outcome %+v", o)
	}
	if ev := unitEvents(t, h, "v9-nowhere", pipeline.EventStageStarted); len(ev) != 0 {
		t.Fatalf("an unbound job started stages: %v", ev)
	}
}

// Scratch space is made under the configured TempDir: when it cannot be
// made there the attempt fails as a transient local-disk error instead of
// silently using another disk.
func TestEngineTempDirHonoured(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no", "such", "dir")
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.TempDir = missing }))
	h.submit("v1-tmp", board(img("a lighthouse", "", 600)))
	_, o, err := h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "local_disk_error" {
		t.Fatalf("outcome %+v, want retry_wait local_disk_error", o)
	}
}

// Every stage an attempt enters is recorded with the workflow that ran it,
// in order: `edgepipe check` holds the workflow against the id prefix.
func TestEngineStageStartedNamesWorkflow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, id := range []string{"v1-stages", "v2-stages"} {
		h.submit(id, board(img("a lighthouse", "", 600)))
	}
	h.drain(5)
	for _, id := range []string{"v1-stages", "v2-stages"} {
		var got []string
		for _, d := range unitEvents(t, h, id, pipeline.EventStageStarted) {
			got = append(got, fmt.Sprint(d["stage"], "@", d["workflow"]))
		}
		v := id[:2]
		want := []string{pipeline.StagePrepare + "@" + v, pipeline.StageExecute + "@" + v, pipeline.StageApply + "@" + v, pipeline.StageFinalize + "@" + v}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s stage_started %v, want %v", id, got, want)
		}
	}
}

// A transient failure is rescheduled by the configured policy, on the
// configured clock: attempt 1 with Base 1 s and a jitter draw of 0.5 waits
// exactly 500 ms from the manual clock's now.
func TestEngineUsesConfiguredRetryPolicyAndClock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) {
		ec.Retry = pipeline.RetryPolicy{Base: time.Second, Cap: 10 * time.Second, MaxAttempts: 2, Rand: func() float64 { return 0.5 }}
	}))
	h.submit("v1-retry", board(img("a lighthouse", "", 600)))
	h.fp.set("after_claim", func(context.Context) error { return errTransientFP })
	_, o, err := h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "test_transient" {
		t.Fatalf("outcome %+v, want retry_wait test_transient", o)
	}
	if want := t0.Add(500 * time.Millisecond); !o.NextRunAt.Equal(want) {
		t.Fatalf("NextRunAt = %s, want %s (policy Base 1s, jitter 0.5, manual clock)", o.NextRunAt, want)
	}
	// MaxAttempts 2: the second transient failure dead-letters the job.
	h.clock.Advance(time.Second)
	_, o, err = h.attempt("render-v1", true)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != pipeline.StatusDeadLettered || o.Reason != pipeline.ReasonRetriesExhausted {
		t.Fatalf("second outcome %+v, want dead_lettered retries_exhausted", o)
	}
}

// A zero RetryPolicy means the default one (5 attempts), not "never retry".
func TestEngineZeroRetryPolicyIsDefault(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.Retry = pipeline.RetryPolicy{} }))
	h.submit("v1-zero", board(img("a lighthouse", "", 600)))
	h.fp.set("after_claim", func(context.Context) error { return errTransientFP })
	for attempt := 1; attempt <= 4; attempt++ {
		c, o := runOnce(t, h)
		if o.Status != pipeline.StatusRetryWait {
			t.Fatalf("attempt %d: %+v, want retry_wait (default policy retries 5 times)", attempt, o)
		}
		d := o.NextRunAt.Sub(h.clock.Now())
		if ceiling := pipeline.DefaultRetryPolicy().Ceiling(attempt); d < 0 || d > ceiling {
			t.Fatalf("attempt %d: backoff %s outside the default policy's [0, %s]", attempt, d, ceiling)
		}
		if err := h.store.Finish(context.Background(), c.Lease, o); err != nil {
			t.Fatalf("finish: %v", err)
		}
		h.clock.Set(o.NextRunAt.Add(time.Millisecond))
	}
	if _, o := runOnce(t, h); o.Status != pipeline.StatusDeadLettered {
		t.Fatalf("attempt 5: %+v, want dead_lettered", o)
	}
}

// retryMetrics records RetryScheduled calls.
type retryMetrics struct {
	mu    sync.Mutex
	codes []string
}

func (m *retryMetrics) ProviderCall(string, string)                            {}
func (m *retryMetrics) BytesUploaded(string, int64)                            {}
func (m *retryMetrics) StageDuration(string, time.Duration)                    {}
func (m *retryMetrics) UnitReused(string)                                      {}
func (m *retryMetrics) ProviderLatency(string, string, time.Duration)          {}
func (m *retryMetrics) JobSettled(string, pipeline.Status, time.Duration, int) {}
func (m *retryMetrics) RetryScheduled(code string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.codes = append(m.codes, code)
}

// A retry is counted when an attempt is rescheduled, and only then.
func TestEngineRetryMetric(t *testing.T) {
	t.Parallel()
	m := &retryMetrics{}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.Metrics = m }))
	h.submit("v1-retrymetric", board(img("a lighthouse", "", 600)))
	h.submit("v2-failmetric", board(img("a lighthouse", "", 600)))
	h.fp.set("after_claim", func(context.Context) error { return errTransientFP })
	if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait {
		t.Fatalf("transient attempt: %+v, %v", o, err)
	}
	h.fp.set("after_claim", func(context.Context) error {
		return &pipeline.ClassifiedError{Class: pipeline.ClassPermanent, Code: "test_permanent", Message: "injected"}
	})
	if _, o, err := h.attempt("render-v2", true); err != nil || o.Status != pipeline.StatusFailed {
		t.Fatalf("permanent attempt: %+v, %v", o, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.codes) != 1 || m.codes[0] != "test_transient" {
		t.Fatalf("RetryScheduled calls %v, want exactly [test_transient]", m.codes)
	}
}

// syncBuffer is an io.Writer safe for the engine's concurrent logging.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The configured logger receives the engine's records; none configured
// means a discarding one, never a nil-pointer panic.
func TestEngineLogger(t *testing.T) {
	t.Parallel()
	t.Run("configured", func(t *testing.T) {
		t.Parallel()
		var buf syncBuffer
		h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) {
			ec.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}))
		h.submit("v1-logged", board(img("a lighthouse", "", 600)))
		h.fp.set("after_claim", func(context.Context) error { return errTransientFP })
		if _, _, err := h.attempt("render-v1", true); err != nil {
			t.Fatal(err)
		}
		if out := buf.String(); !strings.Contains(out, "attempt failed") || !strings.Contains(out, "v1-logged") {
			t.Fatalf("log output %q lacks the failed attempt of v1-logged", out)
		}
	})
	t.Run("nil", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.Logger = nil }))
		h.submit("v1-quiet", board(img("a lighthouse", "", 600)))
		h.fp.set("after_claim", once(errTransientFP))
		if _, o, err := h.attempt("render-v1", true); err != nil || o.Status != pipeline.StatusRetryWait {
			t.Fatalf("failing attempt: %+v, %v", o, err)
		}
		h.drain(5)
		if st := h.job("v1-quiet").Status; st != pipeline.StatusSucceeded {
			t.Fatalf("job ended %s, want succeeded", st)
		}
	})
}

// Forget removes a final job's spooled results, and only that job's; a job
// that may resume (dead_lettered, needs_review) keeps them: a redrive must
// use a paid answer rather than pay again (issue 11, finding 1).
func TestEngineForgetRemovesSpool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	mine := filepath.Join(h.cfg.SpoolDir, "v1-forget")
	other := filepath.Join(h.cfg.SpoolDir, "v1-keep")
	for _, dir := range []string{mine, other} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "call-1"), []byte("paid"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []pipeline.Status{pipeline.StatusDeadLettered, pipeline.StatusNeedsReview, pipeline.StatusRetryWait} {
		if err := h.engine.Forget(context.Background(), "v1-forget", st); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(mine, "call-1")); err != nil {
			t.Fatalf("spool after Forget(%s): %v, want it kept", st, err)
		}
	}
	if err := h.engine.Forget(context.Background(), "v1-forget", pipeline.StatusFailed); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spool of the forgotten job: %v, want it gone", err)
	}
	if _, err := os.Stat(filepath.Join(other, "call-1")); err != nil {
		t.Fatalf("another job's spool: %v, want it kept", err)
	}
}

// bytesMetrics records BytesUploaded per kind.
type bytesMetrics struct {
	retryMetrics
	bytes map[string]int64
}

func (m *bytesMetrics) BytesUploaded(kind string, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bytes[kind] += n
}

func (m *bytesMetrics) uploaded() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.bytes)
}

// Bytes written to the object store are counted by kind when written, and
// not again when a second job of the same scene reuses the artifacts.
func TestBytesUploadedCountsWrittenObjectsOnly(t *testing.T) {
	t.Parallel()
	m := &bytesMetrics{bytes: map[string]int64{}}
	h := newHarness(t, withConfig(func(ec *pipeline.EngineConfig) { ec.Metrics = m }))
	sb := board(img("a quarry", "stone on stone", 600))
	h.submit("v1-bytes-a", sb)
	h.drain(5)
	first := m.uploaded()
	for _, kind := range []string{pipeline.ArtifactImage, pipeline.ArtifactSpeech, pipeline.KindStaged} {
		if first[kind] <= 0 {
			t.Errorf("after the first job, %s bytes uploaded = %d; want the written objects' size", kind, first[kind])
		}
	}
	h.submit("v1-bytes-b", sb)
	h.drain(5)
	again := m.uploaded()
	for _, kind := range []string{pipeline.ArtifactImage, pipeline.ArtifactSpeech, pipeline.KindStaged} {
		if again[kind] != first[kind] {
			t.Errorf("%s bytes went from %d to %d for a job that reused every artifact", kind, first[kind], again[kind])
		}
	}
	if j := h.job("v1-bytes-b"); j.Status != pipeline.StatusSucceeded {
		t.Fatalf("second job %s (%s)", j.Status, j.LastErrorCode)
	}
}

// failStageRecordOnce fails the first StageFinished of one stage with the
// driver's plain error (a busy or unreachable database).
type failStageRecordOnce struct {
	pipeline.Store
	stage  string
	failed atomic.Bool
}

func (s *failStageRecordOnce) StageFinished(ctx context.Context, lease pipeline.Lease, stage string, unitsDone int, detail map[string]any) error {
	if stage == s.stage && s.failed.CompareAndSwap(false, true) {
		return errors.New("database is locked")
	}
	return s.Store.StageFinished(ctx, lease, stage, unitsDone, detail)
}

// A stage whose progress could not be recorded has not finished: the
// attempt stops there with an infrastructure failure of the store (not a
// silent success the events would contradict), no later stage starts, and
// the next attempt completes the job.
func TestUnrecordedStageEndsTheAttempt(t *testing.T) {
	t.Parallel()
	stages := []string{pipeline.StagePrepare, pipeline.StageExecute, pipeline.StageApply, pipeline.StageFinalize}
	for i, stage := range stages {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			st := &failStageRecordOnce{stage: stage}
			h := newHarness(t, withRenderers(stubRenderers), withConfig(func(ec *pipeline.EngineConfig) { st.Store = ec.Store; ec.Store = st }))
			id := "v1-unrecorded-" + stage
			h.submit(id, board(img("a harbour", "gulls over the harbour", 600)))
			_, o, err := h.attempt("render-v1", true)
			if err != nil {
				t.Fatal(err)
			}
			if o.Status != pipeline.StatusRetryWait || o.ErrorCode != "store_unavailable" || !o.Infra {
				t.Fatalf("outcome %+v, want an infrastructure retry_wait with store_unavailable", o)
			}
			var started []string
			for _, d := range unitEvents(t, h, id, pipeline.EventStageStarted) {
				started = append(started, fmt.Sprint(d["stage"]))
			}
			if want := stages[:i+1]; !reflect.DeepEqual(started, want) {
				t.Fatalf("stages started in the failed attempt %v, want %v", started, want)
			}
			h.drain(5)
			if j := h.job(id); j.Status != pipeline.StatusSucceeded || j.Attempts != 2 {
				t.Fatalf("job %s after attempt %d, want succeeded on the second", j.Status, j.Attempts)
			}
		})
	}
}
