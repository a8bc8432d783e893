//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"edgepipe/api"
	"edgepipe/client"
	"edgepipe/pipeline"
)

// putFaults replaces the fake provider's faults (PUT /faults).
func (c *cluster) putFaults(ctx context.Context, spec string) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.fakeURL+"/faults", bytes.NewReader(fmt.Appendf(nil, `{"spec":%q}`, spec)))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("PUT /faults %q: %s", spec, resp.Status)
	}
}

// imageCalls are the image audit rows of a job's scene 0.
func imageCalls(ctx context.Context, t *testing.T, adm *apiClient, key string) []api.StoryCall {
	t.Helper()
	st, err := adm.JobStory(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var out []api.StoryCall
	for _, k := range st.Calls {
		if k.Op == pipeline.OpImage && k.Scene == 0 {
			out = append(out, k)
		}
	}
	return out
}

// TestUnprovenImageKey runs a deployment nobody probed, with the real
// binary. The fake provider honours its image key, but edgepipe may not
// rely on it before a probe proved it: an image call that the provider
// billed and then failed (after_commit) stops the job in needs_review, its
// audit row saying sync. The operator probes (`edgepipe provider probe
// image --yes`) and retries the job: the retry is idempotent_verified,
// sends the same key, and the provider answers it from its idempotency
// store, so the scene's image is billed once in all.
func TestUnprovenImageKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newCluster(t, clusterConfig{Unproven: true, Faults: "image:after_commit=1", Seed: 14})
	sp := c.serve()
	uniq := randHex(4)
	body := map[string]any{"operation": "render_video", "title": "unproven " + uniq, "instance_id": "v1-unproven-" + uniq,
		"scenes":  []map[string]any{{"image_prompt": "a key nobody checked " + uniq, "narration": "the lock waits " + uniq, "duration_ms": 500}},
		"options": map[string]any{"resolution": "640x360", "fps": 24}}
	id, _, err := c.api.submitRetrying(ctx, submitReq{Key: "unproven-" + uniq, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	js, err := c.api.waitSettled(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if j := js[0]; j.Status != "needs_review" || j.Error == nil || j.Error.Code != "provider_server_error" {
		t.Fatalf("job %s is %s, want needs_review provider_server_error (an unproven key is not retried):%s", j.ID, j.Status, problems(js))
	}
	if !strings.Contains(sp.log(), "is not proven") {
		t.Errorf("start-up did not warn that the image key is unproven:\n%s", tail(sp.log(), 20))
	}
	key := pipeline.JobKey(chaosTenant, id)
	adm := newAPIClient(t, c.api.base, adminToken)
	calls := imageCalls(ctx, t, adm, key)
	if len(calls) != 1 || calls[0].Contract != pipeline.ContractSync || calls[0].Status != "ambiguous" {
		t.Fatalf("image audit rows %+v; want one ambiguous sync call", calls)
	}
	c.putFaults(ctx, "")
	out, errOut, code := c.run(ctx, nil, "provider", "probe", "image", "--yes", "--interval", "50ms")
	if code != 0 || !strings.Contains(out, string(pipeline.ProofIdempotent)) {
		t.Fatalf("provider probe image: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := adm.Decide(ctx, key, client.DecisionRetry, "image key proven by a probe"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	var j job
	for {
		if j, err = c.api.Get(ctx, id); err != nil {
			t.Fatal(err)
		}
		if j.Status == "succeeded" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if j.Status != "succeeded" {
		t.Fatalf("after the probe and a retry the job is %s, want succeeded:%s", j.Status, problems([]job{j}))
	}
	calls = imageCalls(ctx, t, adm, key)
	if n := len(calls); n != 2 || calls[1].Contract != pipeline.ContractIdempotentVerified || calls[1].Status != "succeeded" {
		t.Errorf("image audit rows after the retry %+v; want the first and one succeeded idempotent_verified call", calls)
	}
	l, err := c.ledgerCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := l[key+"/0"]["image"]; n != 1 {
		t.Errorf("the provider billed scene 0's image %d times, want 1 (the retry's key is answered from the provider's idempotency store)", n)
	}
	c.finish()
	c.scanLogs()
}
