//go:build chaos

package chaos

// End-to-end tests of the real-provider adapters (issue 14): the real
// edgepipe binary, configured as the README's "Real providers" section says,
// against local emulators of the providers' documented APIs (no test calls
// the internet or a paid provider):
//
//   - Cloudflare Workers AI: package provider/workersai/workersaitest, which
//     cites the REST API (POST {base}/accounts/{account}/ai/run/{model},
//     Bearer token, the API v4 envelope) and the model catalogue of
//     @cf/black-forest-labs/flux-1-schnell (result.image, base64 JPEG) and
//     @cf/myshell-ai/melotts (result.audio, base64 MP3):
//     https://developers.cloudflare.com/workers-ai/models/flux-1-schnell/,
//     https://developers.cloudflare.com/workers-ai/models/melotts/.
//   - Replicate: package provider/replicate/replicatetest, which cites the
//     predictions API (POST /v1/models/{owner}/{name}/predictions, GET
//     /v1/predictions/{id}, statuses starting → processing → succeeded,
//     output URLs): https://replicate.com/docs/reference/http.
//
// The emulators answer with real media made here: a JPEG (image/jpeg), an
// MP3 and an MP4 encoded by ffmpeg, so the renders are real.
//
// Every test ends with `edgepipe sweep` and `edgepipe check
// --require-settled --ledger`, the ledger being what the emulators
// themselves received, attributed to scenes by prompt (emulatorLedger): a
// resend the audit trail does not show is still a violation.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider/replicate/replicatetest"
	"edgepipe/provider/workersai/workersaitest"
)

const (
	cfAccount      = "023e105f4ecef8ad9ca31a8372d0c353"
	cfToken        = "cf-e2e-token-0000001"
	replicateToken = "r8_e2etoken00000001"
	// The models the README names (the adapters' defaults).
	modelFlux    = "@cf/black-forest-labs/flux-1-schnell"
	modelMelo    = "@cf/myshell-ai/melotts"
	modelMinimax = "minimax/video-01"
)

// ffmpegMedia encodes a short piece of media with ffmpeg and returns it.
func ffmpegMedia(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("ffmpeg", append(append([]string{"-nostdin", "-v", "error"}, args...), "-y", out)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %s: %v\n%s", name, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil || len(b) == 0 {
		t.Fatalf("ffmpeg %s: %v (%d bytes)", name, err, len(b))
	}
	return b
}

// mp3 is a real 1.2 s MP3, what melotts answers with.
func mp3(t *testing.T) []byte {
	return ffmpegMedia(t, "speech.mp3", "-f", "lavfi", "-i", "sine=frequency=440:duration=1.2",
		"-ac", "1", "-ar", "44100", "-c:a", "libmp3lame", "-b:a", "64k")
}

// mp4 is a real 2 s H.264 MP4, what a Replicate video model's output is.
func mp4(t *testing.T) []byte {
	return ffmpegMedia(t, "video.mp4", "-f", "lavfi", "-i", "testsrc=size=640x360:rate=25:duration=2",
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-movflags", "+faststart")
}

// newWorkersAI starts the Workers AI emulator answering with real media and
// returns it with the settings that point edgepipe at it for every
// operation (EDGEPIPE_PROVIDER=workers-ai).
func newWorkersAI(t *testing.T) (*workersaitest.Server, []string) {
	t.Helper()
	s := workersaitest.New(cfAccount, cfToken)
	t.Cleanup(s.Close)
	s.Image = workersaitest.JPEG(640, 360)
	s.Audio = mp3(t)
	return s, []string{
		"EDGEPIPE_PROVIDER=workers-ai",
		"EDGEPIPE_CF_ACCOUNT_ID=" + cfAccount,
		"EDGEPIPE_CF_API_TOKEN=" + cfToken,
		"EDGEPIPE_CF_API_BASE=" + s.BaseURL(),
	}
}

// newReplicate starts the Replicate emulator whose predictions succeed
// after script's polls with a real MP4, and returns it with the settings
// that route video to it (EDGEPIPE_PROVIDER_VIDEO=replicate).
func newReplicate(t *testing.T, script ...string) (*replicatetest.Server, []string) {
	t.Helper()
	s := replicatetest.New(replicateToken)
	t.Cleanup(s.Close)
	s.Script = script
	s.File = mp4(t)
	return s, []string{
		"EDGEPIPE_PROVIDER_VIDEO=replicate",
		"EDGEPIPE_REPLICATE_API_TOKEN=" + replicateToken,
		"EDGEPIPE_REPLICATE_API_BASE=" + s.URL,
	}
}

// readmeFirstJob is the README's first job (testdata/storyboards/demo.json,
// which "A first job" submits). imageOnly turns its video scene into an
// image scene with the same prompt: Workers AI has no video model.
func readmeFirstJob(t *testing.T, imageOnly bool) map[string]any {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil || !strings.Contains(string(readme), "--data @testdata/storyboards/demo.json") {
		t.Fatalf("the README's first job is no longer testdata/storyboards/demo.json (%v)", err)
	}
	b, err := os.ReadFile(filepath.Join("..", "testdata", "storyboards", "demo.json"))
	if err != nil {
		t.Fatal(err)
	}
	var board map[string]any
	if err := json.Unmarshal(b, &board); err != nil {
		t.Fatal(err)
	}
	for _, s := range board["scenes"].([]any) {
		sc := s.(map[string]any)
		if vp, ok := sc["video_prompt"]; ok && imageOnly {
			delete(sc, "video_prompt")
			sc["image_prompt"] = vp
		}
	}
	return board
}

// scenes lists a board's scenes as (kind, prompt, narration).
func scenes(board map[string]any) [][3]string {
	var out [][3]string
	for _, s := range board["scenes"].([]any) {
		sc := s.(map[string]any)
		kind, prompt := "image", sc["image_prompt"]
		if vp, ok := sc["video_prompt"]; ok {
			kind, prompt = "video", vp
		}
		narration, _ := sc["narration"].(string)
		out = append(out, [3]string{kind, prompt.(string), narration})
	}
	return out
}

// runOne submits board and waits until the job settled; it returns the job,
// its provider-call audit rows read through the admin API, and the URL of
// the emulators' ledger of it (emulatorLedger; rep may be nil).
func runOne(ctx context.Context, t *testing.T, c *cluster, key string, board map[string]any,
	cf *workersaitest.Server, rep *replicatetest.Server) (job, []storyCall, string) {
	t.Helper()
	ledger, setJob := emulatorLedger(t, board, cf, rep)
	id, _, err := c.api.submitRetrying(ctx, submitReq{Key: key, Body: board})
	if err != nil {
		t.Fatal(err)
	}
	setJob(id)
	if _, err := c.api.waitSettled(ctx, 1); err != nil {
		t.Fatal(err)
	}
	j, err := c.api.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return j, jobCalls(ctx, t, c, id), ledger
}

// storyCall is the part of an audit row these tests read.
type storyCall struct {
	Scene                         int
	Op, Provider, Model, Status   string
	ExternalJobID, Billing, Error string
}

func jobCalls(ctx context.Context, t *testing.T, c *cluster, id string) []storyCall {
	t.Helper()
	st, err := newAPIClient(t, c.api.base, adminToken).JobStory(ctx, pipeline.JobKey(chaosTenant, id))
	if err != nil {
		t.Fatalf("job story: %v", err)
	}
	var out []storyCall
	for _, k := range st.Calls {
		out = append(out, storyCall{Scene: k.Scene, Op: k.Op, Provider: k.Provider, Model: k.Model, Status: k.Status,
			ExternalJobID: k.ExternalJobID, Billing: k.Billing, Error: k.ErrorCode})
	}
	return out
}

// probeMP4 downloads a succeeded job's result and checks with ffprobe that
// it has a video stream and a positive duration, which it returns, and, when
// narrated, an audio stream.
func probeMP4(ctx context.Context, t *testing.T, c *cluster, j job, narrated bool) float64 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "result.mp4")
	sum := ""
	if j.Result != nil {
		sum = j.Result.SHA256
	}
	if err := c.api.SaveResult(ctx, j.ID, path, sum); err != nil {
		t.Fatalf("result: %v", err)
	}
	out, err := exec.CommandContext(ctx, "ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name:format=duration",
		"-of", "json", path).Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	var pr struct {
		Streams []struct {
			CodecType string `json:"codec_type"`
		} `json:"streams"`
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
	}
	if err := json.Unmarshal(out, &pr); err != nil {
		t.Fatalf("ffprobe: %v: %s", err, out)
	}
	video, audio := false, false
	for _, s := range pr.Streams {
		video = video || s.CodecType == "video"
		audio = audio || s.CodecType == "audio"
	}
	if narrated && !audio {
		t.Errorf("result has no audio stream, but the board is narrated (%s)", out)
	}
	d, _ := strconv.ParseFloat(pr.Format.Duration, 64)
	if !video || d <= 0 {
		t.Errorf("result: video stream %v, duration %q; want a video stream and a duration > 0 (%s)", video, pr.Format.Duration, out)
	}
	return d
}

// wantCalls requires the audit rows to be exactly one succeeded call per
// scene and operation the board needs, each naming its provider and model.
func wantCalls(t *testing.T, calls []storyCall, board map[string]any, providerOf map[string]string) {
	t.Helper()
	model := map[string]string{pipeline.OpImage: modelFlux, pipeline.OpSpeech: modelMelo, pipeline.OpVideoSubmit: modelMinimax}
	want := map[string]int{}
	for i, sc := range scenes(board) {
		op := pipeline.OpImage
		if sc[0] == "video" {
			op = pipeline.OpVideoSubmit
		}
		want[fmt.Sprintf("%d/%s", i, op)]++
		if sc[2] != "" {
			want[fmt.Sprintf("%d/%s", i, pipeline.OpSpeech)]++
		}
	}
	got := map[string]int{}
	for _, k := range calls {
		got[fmt.Sprintf("%d/%s", k.Scene, k.Op)]++
		if k.Model != model[k.Op] || k.Provider != providerOf[k.Op] || k.Status != "succeeded" {
			t.Errorf("audit row scene %d %s: provider %q model %q status %q; want %q %q succeeded",
				k.Scene, k.Op, k.Provider, k.Model, k.Status, providerOf[k.Op], model[k.Op])
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit rows per scene/op %v, want %v", got, want)
	}
}

// wantOnePerPrompt requires the Workers AI emulator to have received
// exactly one call per scene and operation: nothing was sent twice.
func wantOnePerPrompt(t *testing.T, cf *workersaitest.Server, board map[string]any) {
	t.Helper()
	for _, sc := range scenes(board) {
		if sc[0] == "image" {
			if n := cf.Received(modelFlux, sc[1]); n != 1 {
				t.Errorf("Workers AI received %d image calls for %q, want 1", n, sc[1])
			}
		}
		if sc[2] != "" {
			if n := cf.Received(modelMelo, sc[2]); n != 1 {
				t.Errorf("Workers AI received %d speech calls for %q, want 1", n, sc[2])
			}
		}
	}
	for _, k := range cf.Calls() {
		if k.Header.Get("Authorization") != "Bearer "+cfToken || k.Header.Get("cf-aig-skip-cache") != "true" {
			t.Errorf("Workers AI call %s without the token or cf-aig-skip-cache", k.Path)
		}
	}
}

// emulatorLedger serves what the emulators received for one job in the
// format `edgepipe check --ledger` reads (the fake provider's GET /ledger:
// billed calls per unit and operation). The real APIs carry no unit id, so
// each call is attributed to its scene by its prompt, which the test knows
// from the board; the job key is known once the job was submitted.
func emulatorLedger(t *testing.T, board map[string]any, cf *workersaitest.Server, rep *replicatetest.Server) (url string, setJob func(id string)) {
	t.Helper()
	var jobKey atomic.Value
	jobKey.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		byUnit := map[string]map[string]int{}
		for i, sc := range scenes(board) {
			n := map[string]int{}
			if sc[0] == "image" {
				n["image"] = cf.Received(modelFlux, sc[1])
			} else if rep != nil {
				for _, c := range rep.Creates() {
					var body struct {
						Input struct {
							Prompt string `json:"prompt"`
						} `json:"input"`
					}
					if json.Unmarshal([]byte(c.Body), &body) == nil && body.Input.Prompt == sc[1] {
						n["video"]++
					}
				}
			}
			if sc[2] != "" {
				n["speech"] = cf.Received(modelMelo, sc[2])
			}
			byUnit[fmt.Sprintf("%s/%d", jobKey.Load(), i)] = n
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"by_unit": byUnit})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/ledger", func(id string) { jobKey.Store(pipeline.JobKey(chaosTenant, id)) }
}

// TestProviderWorkersAI: the README's first job (its video scene made an
// image scene) through the real binary with EDGEPIPE_PROVIDER=workers-ai:
// it succeeds, the MP4 plays, and the audit rows name the real models.
func TestProviderWorkersAI(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cf, env := newWorkersAI(t)
	c := newCluster(t, clusterConfig{NoFake: true, Env: env})
	c.serve()
	board := readmeFirstJob(t, true)
	j, calls, ledger := runOne(ctx, t, c, "e2e-workers-ai", board, cf, nil)
	if j.Status != "succeeded" {
		t.Fatalf("job %s is %s, want succeeded:%s", j.ID, j.Status, problems([]job{j}))
	}
	d := probeMP4(ctx, t, c, j, true)
	wantCalls(t, calls, board, map[string]string{pipeline.OpImage: "workers-ai", pipeline.OpSpeech: "workers-ai"})
	wantOnePerPrompt(t, cf, board)
	c.scanLogs()
	c.finishCheck(ledger)
	t.Logf("README first job on Workers AI: %d scenes, %d provider calls, %.2fs MP4, in %s",
		len(scenes(board)), cf.Count(), d, time.Since(start).Round(time.Millisecond))
}

// TestProviderWorkersAIDroppedSpeech: Workers AI reads a narration request
// whole and drops the connection without answering (it may have run and
// billed). The job must stop in needs_review, and the emulator must have
// received that call exactly once: a sync call with no idempotency key is
// never sent again.
func TestProviderWorkersAIDroppedSpeech(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cf, env := newWorkersAI(t)
	board := readmeFirstJob(t, true)
	dropped := scenes(board)[1][2] // "And every night the sea answered."
	cf.Drop = func(k workersaitest.Call) bool { return k.Model == modelMelo && k.Prompt == dropped }
	c := newCluster(t, clusterConfig{NoFake: true, Env: env})
	c.serve()
	j, calls, ledger := runOne(ctx, t, c, "e2e-workers-ai-drop", board, cf, nil)
	if j.Status != "needs_review" {
		t.Errorf("job %s is %s, want needs_review:%s", j.ID, j.Status, problems([]job{j}))
	}
	if n := cf.Received(modelMelo, dropped); n != 1 {
		t.Errorf("Workers AI received the dropped narration %d times, want exactly 1 (no resend)", n)
	}
	seen := map[[2]string]bool{}
	for _, k := range cf.Calls() {
		key := [2]string{k.Model, k.Prompt}
		if n := cf.Received(k.Model, k.Prompt); n > 1 && !seen[key] {
			t.Errorf("Workers AI received %s %q %d times, want at most 1", k.Model, k.Prompt, n)
		}
		seen[key] = true
	}
	ambiguous := 0
	for _, k := range calls {
		if k.Scene == 1 && k.Op == pipeline.OpSpeech {
			ambiguous++
			if k.Status != "ambiguous" || k.Billing != "maybe_billed" || k.Model != modelMelo {
				t.Errorf("audit row of the dropped call: status %q billing %q model %q, want ambiguous maybe_billed %s", k.Status, k.Billing, k.Model, modelMelo)
			}
		}
	}
	if ambiguous != 1 {
		t.Errorf("%d audit rows for scene 1 speech, want 1", ambiguous)
	}
	c.scanLogs()
	c.finishCheck(ledger)
	t.Logf("dropped narration: job %s (%s), %d calls received, in %s", j.Status, problems([]job{j}), cf.Count(), time.Since(start).Round(time.Millisecond))
}

// TestProviderReplicate: the README's first job as the README routes it
// (Workers AI for images and narration, here answered as audio/mpeg bodies,
// Replicate for the video scene):
// the prediction is created once without Prefer: wait, polled through
// starting and processing, its MP4 downloaded; the job succeeds, the MP4
// plays, and the audit rows name each operation's provider and model.
func TestProviderReplicate(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cf, env := newWorkersAI(t)
	cf.AudioBinary = true // melotts's other answer form: a binary audio/mpeg body
	rep, repEnv := newReplicate(t, "starting", "processing", "processing", "processing", "succeeded")
	c := newCluster(t, clusterConfig{NoFake: true, Env: append(env, repEnv...)})
	c.serve()
	board := readmeFirstJob(t, false)
	j, calls, ledger := runOne(ctx, t, c, "e2e-replicate", board, cf, rep)
	if j.Status != "succeeded" {
		t.Fatalf("job %s is %s, want succeeded:%s", j.ID, j.Status, problems([]job{j}))
	}
	d := probeMP4(ctx, t, c, j, true)
	wantCalls(t, calls, board, map[string]string{pipeline.OpImage: "workers-ai", pipeline.OpSpeech: "workers-ai", pipeline.OpVideoSubmit: "replicate"})
	wantOnePerPrompt(t, cf, board)
	creates := rep.Creates()
	if len(creates) != 1 {
		t.Fatalf("Replicate received %d creates, want 1", len(creates))
	}
	cr := creates[0]
	if cr.Path != "/v1/models/"+modelMinimax+"/predictions" || cr.Auth != "Bearer "+replicateToken ||
		cr.Body != `{"input":{"prompt":"Waves rolling against black rocks, slow motion"}}` {
		t.Errorf("create %s %q (auth ok %v)", cr.Path, cr.Body, cr.Auth == "Bearer "+replicateToken)
	}
	if cr.Prefer != "" {
		t.Errorf("the create carried Prefer: %q; a dropped wait would lose the prediction id", cr.Prefer)
	}
	if n := rep.PollsOf(cr.ID); n < 5 {
		t.Errorf("prediction %s answered %d polls, want at least 5 (starting, processing ×3, succeeded)", cr.ID, n)
	}
	if n, _ := rep.Deliveries(); n != 1 {
		t.Errorf("%d downloads of the output, want 1", n)
	}
	for _, k := range calls {
		if k.Op == pipeline.OpVideoSubmit && k.ExternalJobID != cr.ID {
			t.Errorf("video audit row holds external id %q, want the prediction %s", k.ExternalJobID, cr.ID)
		}
	}
	c.scanLogs()
	c.finishCheck(ledger)
	t.Logf("README first job, Workers AI + Replicate video: %d polls, %.2fs MP4, in %s", rep.Polls(), d, time.Since(start).Round(time.Millisecond))
}

// TestProviderReplicateKilledAfterCreate SIGKILLs the worker process after
// Replicate answered the create (the prediction exists and bills) and
// before any poll was answered, restarts a worker on the same database, and
// requires the job to succeed with exactly one create: the prediction id
// was recovered from the database and polled, never created again.
func TestProviderReplicateKilledAfterCreate(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cf, env := newWorkersAI(t)
	rep, repEnv := newReplicate(t, "starting", "processing", "processing", "succeeded")
	created, polled := make(chan string, 4), make(chan string, 16)
	notify := func(ch chan string) func(string) {
		return func(id string) {
			select {
			case ch <- id:
			default: // only the first ones matter
			}
		}
	}
	rep.OnCreate, rep.OnPoll = notify(created), notify(polled)
	rep.HoldPolls()
	c := newCluster(t, clusterConfig{NoFake: true, Env: append(env, repEnv...)})
	c.serve("EDGEPIPE_WORKERS=0")
	first := c.worker()
	board := map[string]any{"operation": "render_video", "title": "killed after create",
		"scenes":  []any{map[string]any{"video_prompt": "Waves rolling against black rocks, slow motion", "duration_ms": 1500}},
		"options": map[string]any{"resolution": "640x360", "fps": 25}}
	ledger, setJob := emulatorLedger(t, board, cf, rep)
	id, _, err := c.api.submitRetrying(ctx, submitReq{Key: "e2e-replicate-kill", Body: board})
	if err != nil {
		t.Fatal(err)
	}
	setJob(id)
	var pred string
	select {
	case pred = <-created:
	case <-ctx.Done():
		t.Fatalf("no create reached Replicate\n%s", tail(first.log(), 30))
	}
	// The engine polls only once the id is in the database; that poll is
	// held unanswered while the worker dies.
	select {
	case <-polled:
	case <-ctx.Done():
		t.Fatalf("no poll reached Replicate after the create\n%s", tail(first.log(), 30))
	}
	if err := syscall.Kill(first.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	if !first.signaled(syscall.SIGKILL) {
		t.Fatalf("worker %d was not killed by SIGKILL: %v", first.pid(), first.cmd.ProcessState)
	}
	// The held poll dies with its client, unanswered.
	for deadline := time.Now().Add(10 * time.Second); rep.PollsAbandoned() == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n, gone := rep.Polls(), rep.PollsAbandoned(); n != 0 || gone != 1 {
		t.Fatalf("%d polls answered and %d abandoned by the killed worker, want 0 and 1", n, gone)
	}
	rep.ReleasePolls()
	c.worker()
	js, err := c.api.waitSettled(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if js[0].Status != "succeeded" {
		t.Errorf("job %s is %s after the restart, want succeeded:%s", id, js[0].Status, problems(js))
	}
	if n := rep.CreateCount(); n != 1 {
		t.Errorf("Replicate received %d creates, want exactly 1 (the id is recovered from the database, never created again)", n)
	}
	if n := rep.PollsOf(pred); n < 4 {
		t.Errorf("prediction %s answered %d polls after the restart, want at least 4", pred, n)
	}
	calls := jobCalls(ctx, t, c, id)
	if len(calls) != 1 || calls[0].Op != pipeline.OpVideoSubmit || calls[0].Model != modelMinimax ||
		calls[0].Provider != "replicate" || calls[0].ExternalJobID != pred || calls[0].Status != "succeeded" {
		t.Errorf("audit rows %+v, want one succeeded video_submit of replicate %s with external id %s", calls, modelMinimax, pred)
	}
	j, err := c.api.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status == "succeeded" {
		probeMP4(ctx, t, c, j, false)
	}
	totals.kills.Add(1)
	c.scanLogs()
	c.finishCheck(ledger)
	t.Logf("worker SIGKILLed after the create of %s: job %s after %d attempts, %d create, %d polls, in %s",
		pred, j.Status, j.Attempts, rep.CreateCount(), rep.Polls(), time.Since(start).Round(time.Millisecond))
}
