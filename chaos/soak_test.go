//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// soakFaults injects about 10% provider faults per request, spread over every
// kind the fake provider has (FaultsHelp): 2% each of latency, rate limits,
// failures before the call is billed, failures after it is billed and
// dropped connections, plus 5% of video jobs that fail after being accepted.
const soakFaults = "*:latency=300ms@0.02,*:rate_limit=0.02,*:before_commit=0.02,*:after_commit=0.02,*:drop=0.02,video:async_fail=0.05"

// soakBoard is a small job: one 500 ms image scene, or (every fourth job)
// an image and a video scene; every scene is narrated.
func soakBoard(run string, i int) submitReq {
	uniq := fmt.Sprintf("%s-%05d", run, i)
	scenes := []map[string]any{{"image_prompt": "a quiet street " + uniq, "narration": "nothing happens " + uniq, "duration_ms": 500}}
	if i%4 == 0 {
		scenes = append(scenes, map[string]any{"video_prompt": "leaves falling " + uniq, "narration": "then leaves " + uniq, "duration_ms": 500})
	}
	body := map[string]any{"operation": "render_video", "scenes": scenes, "options": map[string]any{"resolution": "640x360", "fps": 24}}
	if i%2 == 1 {
		body["instance_id"] = "v2-" + uniq
	}
	return submitReq{Key: "soak-" + uniq, Body: body}
}

func soakSize() int {
	if v := os.Getenv("CHAOS_SOAK_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err == nil && n > 0 {
			return n
		}
	}
	return 2000
}

// TestSoak submits many small jobs at once to one API process and three
// worker processes sharing its database file, with provider faults of every
// kind, and reports throughput, time to a settled status, retries and
// needs_review. It is bounded in time (CHAOS_SOAK_TIMEOUT, default 45m).
func TestSoak(t *testing.T) {
	t.Parallel()
	n := soakSize()
	bound := 45 * time.Minute
	if v := os.Getenv("CHAOS_SOAK_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CHAOS_SOAK_TIMEOUT: %v", err)
		}
		bound = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	c := newCluster(t, clusterConfig{Faults: soakFaults, Seed: 2026})
	c.serve("EDGEPIPE_WORKERS=0") // the API, sweeper and webhook dispatcher
	for range 3 {
		c.worker("EDGEPIPE_WORKERS=2")
	}

	start := time.Now()
	run := "sk" + randHex(3)
	ids := make(map[string]bool, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id, _, err := c.api.submitRetrying(ctx, soakBoard(run, i))
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				ids[id] = true
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errc:
			t.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	submitted := time.Since(start)
	t.Logf("soak: %d jobs submitted in %s (%.0f/s)", n, submitted.Round(time.Millisecond), float64(n)/submitted.Seconds())

	// Progress every minute, so a long soak shows it is alive.
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Minute):
			}
			if open, err := c.api.jobs(ctx, unsettled); err == nil {
				t.Logf("soak: %s elapsed, %d of %d jobs still open", time.Since(start).Round(time.Second), len(open), n)
			}
		}
	}()
	js, err := c.api.waitSettled(ctx, n)
	if err != nil {
		t.Fatalf("soak not finished within %s: %v", bound, err)
	}
	elapsed := time.Since(start)
	cancel()
	expectAll(t, ids, js)
	o := summarize(js)
	first, last := js[0].CreatedAt, js[0].StatusChangedAt
	for _, j := range js {
		if j.CreatedAt.Before(first) {
			first = j.CreatedAt
		}
		if j.StatusChangedAt.After(last) {
			last = j.StatusChangedAt
		}
	}
	span := last.Sub(first)
	var ledger struct {
		Billed   map[string]int64 `json:"billed"`
		Calls    int64            `json:"calls"`
		Replayed int64            `json:"replayed"`
		Injected map[string]int64 `json:"injected"`
	}
	if err := getJSON(c.fakeURL+"/ledger", &ledger); err != nil {
		t.Errorf("ledger: %v", err)
	}
	for _, j := range js {
		switch j.Status {
		case "succeeded", "needs_review":
		case "failed":
			// A permanent provider error is not among the injected
			// faults, so a failed job means retries were exhausted.
			t.Errorf("job %s failed%s", j.ID, problems([]job{j}))
		default:
			t.Errorf("job %s ended %s%s", j.ID, j.Status, problems([]job{j}))
		}
	}
	c.finish()
	c.scanLogs()
	t.Logf("SOAK: %d jobs (1 API + 3 worker processes × 2, faults %s) settled in %s: throughput %.1f jobs/min; "+
		"time to settled p50 %s p99 %s max %s; %d retries; %s; provider calls %d, billed %v, image replays %d, injected faults %v",
		n, soakFaults, span.Round(time.Second), float64(n)/span.Minutes(),
		o.pct(.5).Round(time.Millisecond), o.pct(.99).Round(time.Millisecond), o.pct(1).Round(time.Millisecond),
		o.retries, o, ledger.Calls, ledger.Billed, ledger.Replayed, ledger.Injected)
	t.Logf("soak wall time including submission and check: %s", elapsed.Round(time.Second))
	totals.jobs.Add(int64(len(js)))
}

func getJSON(url string, out any) error {
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
