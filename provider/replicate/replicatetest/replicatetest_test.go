package replicatetest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"edgepipe/provider/replicate/replicatetest"
)

const token = "r8_emulatortoken01"

func do(t *testing.T, ctx context.Context, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// TestPredictionsAreDistinctAndScripted: each create makes its own
// prediction, whose polls follow the script and end with an output URL on
// the emulator.
func TestPredictionsAreDistinctAndScripted(t *testing.T) {
	t.Parallel()
	s := replicatetest.New(token)
	t.Cleanup(s.Close)
	s.Script = []string{"starting", "processing", "succeeded"}
	created := make(chan string, 2)
	s.OnCreate = func(id string) { created <- id }
	ctx := context.Background()
	var ids []string
	for range 2 {
		st, p := do(t, ctx, http.MethodPost, s.URL+"/v1/models/minimax/video-01/predictions", `{"input":{"prompt":"waves"}}`)
		if st != 201 || p["status"] != "starting" || p["model"] != "minimax/video-01" {
			t.Fatalf("create: %d %v", st, p)
		}
		ids = append(ids, p["id"].(string))
	}
	// OnCreate runs after each answer is flushed, so in either order.
	seen := map[string]bool{<-created: true, <-created: true}
	if ids[0] != replicatetest.ExampleID || ids[1] == ids[0] || !seen[ids[0]] || !seen[ids[1]] {
		t.Fatalf("ids %v, OnCreate saw %v", ids, seen)
	}
	var statuses []string
	var last map[string]any
	for range 4 {
		_, last = do(t, ctx, http.MethodGet, s.URL+"/v1/predictions/"+ids[1], "")
		statuses = append(statuses, last["status"].(string))
	}
	if strings.Join(statuses, ",") != "starting,processing,succeeded,succeeded" {
		t.Errorf("statuses %v", statuses)
	}
	if want := s.URL + "/delivery/" + ids[1] + "/out"; last["output"] != want {
		t.Errorf("output %v, want %s", last["output"], want)
	}
	if s.PollsOf(ids[1]) != 4 || s.PollsOf(ids[0]) != 0 || s.CreateCount() != 2 {
		t.Errorf("polls %d/%d, creates %d", s.PollsOf(ids[1]), s.PollsOf(ids[0]), s.CreateCount())
	}
	if st, _ := do(t, ctx, http.MethodGet, s.URL+"/v1/predictions/nope", ""); st != 404 {
		t.Errorf("unknown prediction: %d", st)
	}
}

// TestHeldPollsAnswerOnlyOnRelease: a held poll whose client goes away is
// received but never answered; after ReleasePolls polls are answered.
func TestHeldPollsAnswerOnlyOnRelease(t *testing.T) {
	t.Parallel()
	s := replicatetest.New(token)
	t.Cleanup(s.Close)
	s.HoldPolls()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if st, _ := do(t, ctx, http.MethodGet, s.URL+"/v1/predictions/"+replicatetest.ExampleID, ""); st != 0 {
		t.Fatalf("a held poll was answered %d", st)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.PollsAbandoned() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.PollsReceived() != 1 || s.PollsAbandoned() != 1 || s.Polls() != 0 {
		t.Fatalf("received %d abandoned %d answered %d, want 1, 1 and 0", s.PollsReceived(), s.PollsAbandoned(), s.Polls())
	}
	s.ReleasePolls()
	if st, p := do(t, context.Background(), http.MethodGet, s.URL+"/v1/predictions/"+replicatetest.ExampleID, ""); st != 200 || p["status"] != "succeeded" {
		t.Fatalf("after release: %d %v", st, p)
	}
	if s.Polls() != 1 {
		t.Errorf("answered %d polls, want 1", s.Polls())
	}
}
