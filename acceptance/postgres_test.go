//go:build acceptance

package acceptance

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"edgepipe/pipeline"
)

// pgImage is built by docker/images.sh from docker/postgres.Dockerfile.
var pgImage = envOr("EDGEPIPE_POSTGRES_IMAGE", "edgepipe-postgres:local")

const (
	pgUser     = "edgepipe"
	pgPassword = "acceptance-pg-secret"
	pgDB       = "edgepipe"
)

// startPostgres starts the local Postgres image on the stack's network as
// "postgres" and waits for the image's own healthcheck (pg_isready), which
// only passes once the role and database exist.
func (s *stack) startPostgres(ctx context.Context) {
	t := s.t
	t.Helper()
	c, err := testcontainers.Run(ctx, pgImage,
		testcontainers.WithEnv(map[string]string{"POSTGRES_USER": pgUser, "POSTGRES_PASSWORD": pgPassword, "POSTGRES_DB": pgDB}),
		network.WithNetwork([]string{"postgres"}, s.net),
		testcontainers.WithWaitStrategy(wait.ForHealthCheck().WithStartupTimeout(90*time.Second)),
	)
	testcontainers.CleanupContainer(t, c)
	s.dumpLogsOnFailure("postgres", c)
	if err != nil {
		t.Fatalf("start postgres: %v", err)
	}
}

// runOnce runs one edgepipe command in a fresh container to completion and
// returns its exit code and output.
func (s *stack) runOnce(ctx context.Context, env map[string]string, cmd ...string) (int, string) {
	t := s.t
	t.Helper()
	c, err := testcontainers.Run(ctx, appImage,
		testcontainers.WithCmd(cmd...),
		testcontainers.WithEnv(env),
		network.WithNetwork(nil, s.net),
		testcontainers.WithWaitStrategy(wait.ForExit().WithExitTimeout(60*time.Second)),
	)
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("edgepipe %v: %v", cmd, err)
	}
	st, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.Logs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out, _ := io.ReadAll(rc)
	return st.ExitCode, string(out)
}

// startWorker starts an `edgepipe worker` process in its own container
// (its own anonymous /data volume: nothing shared with the API or the other
// worker but Postgres and the bucket) and returns its hostname, which is
// the worker name an attempt records.
func (s *stack) startWorker(ctx context.Context, name string, env map[string]string) string {
	t := s.t
	t.Helper()
	c, err := testcontainers.Run(ctx, appImage,
		testcontainers.WithCmd("worker", "--grace", "5s"),
		testcontainers.WithEnv(env),
		network.WithNetwork([]string{name}, s.net),
		testcontainers.WithWaitStrategy(wait.ForLog("edgepipe worker running").WithStartupTimeout(60*time.Second)),
	)
	testcontainers.CleanupContainer(t, c)
	s.dumpLogsOnFailure(name, c)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	inspect, err := c.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return inspect.Config.Hostname
}

// TestPostgresTopology runs the scale-out topology of
// docker-compose.postgres.yml as containers: Postgres (the local image),
// MinIO, the fake provider, `edgepipe migrate` once, an API process with no
// workers and two `edgepipe worker` processes, each with its own empty data
// directory. A v1 and a v2 job submitted through the API must succeed, each
// run by a different worker process (one slot each), and the MP4s downloaded
// through the API must play (ffprobe in a container) for the storyboard's
// duration with H.264 + AAC.
func TestPostgresTopology(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := newStack(ctx, t, stackOptions{})
	p := newProber(ctx, t)
	s.startPostgres(ctx)

	env := maps.Clone(s.baseEnv)
	env["EDGEPIPE_DATABASE_URL"] = fmt.Sprintf("postgres://%s:%s@postgres:5432/%s?sslmode=disable", pgUser, pgPassword, pgDB)
	// Presigned result URLs must work from the test process.
	s3Host, err := s.minio.PortEndpoint(ctx, "9000/tcp", "http")
	if err != nil {
		t.Fatal(err)
	}
	env["EDGEPIPE_S3_PUBLIC_ENDPOINT"] = s3Host

	// The schema, once, before anything starts.
	code, out := s.runOnce(ctx, env, "migrate")
	if code != 0 || !strings.Contains(out, "postgres job store at schema version") {
		t.Fatalf("edgepipe migrate exited %d: %s", code, out)
	}
	t.Logf("edgepipe migrate: %s", strings.TrimSpace(lastLine(out)))

	// The API alone (no workers), then two worker processes with one slot
	// each, so two jobs in flight at once must be spread over both.
	apiEnv := maps.Clone(env)
	apiEnv["EDGEPIPE_WORKERS"] = "0"
	s.startEdgepipe(ctx, "api", apiEnv)
	workerEnv := maps.Clone(env)
	workerEnv["EDGEPIPE_WORKERS"] = "1"
	workers := []string{s.startWorker(ctx, "worker-1", workerEnv), s.startWorker(ctx, "worker-2", workerEnv)}

	sfx := randomSuffix()
	boards := map[string]storyboard{
		"v1": mixedBoard("postgres v1", ""),
		"v2": mixedBoard("postgres v2", "v2-pg-"+sfx),
	}
	ids := map[string]string{}
	submitted := time.Now()
	for _, v := range []string{"v1", "v2"} {
		j := s.submit(ctx, "pg-"+v+"-"+sfx, boards[v])
		if j.Version != v {
			t.Fatalf("submitted %s job is %s", v, j)
		}
		ids[v] = j.ID
	}

	ranOn := map[string]string{}
	for _, v := range []string{"v1", "v2"} {
		j := s.waitSettled(ctx, ids[v], "succeeded", 4*time.Minute)
		settledAfter := time.Since(submitted).Round(100 * time.Millisecond)
		// The operator API addresses jobs by their internal key (the
		// tenant of tenantToken is acme).
		story, err := s.apiClient(adminToken).JobStory(ctx, pipeline.JobKey("acme", j.ID))
		if err != nil {
			t.Fatalf("GET /v1/admin/jobs/%s: %v", j.ID, err)
		}
		if len(story.Attempts) == 0 {
			t.Fatalf("job %s succeeded with no attempt in its story", j.ID)
		}
		last := story.Attempts[len(story.Attempts)-1]
		host, _, _ := strings.Cut(last.Worker, ":")
		if !slices.Contains(workers, host) {
			t.Errorf("job %s was run by %q, not by one of the worker containers %v", j.ID, last.Worker, workers)
		}
		ranOn[v] = host

		// Download through the API (a redirect to a presigned MinIO URL),
		// as a user would, and compare with what the job recorded.
		body, err := s.apiClient(tenantToken).Result(ctx, j.ID)
		if err != nil {
			t.Fatalf("GET /v1/jobs/%s/result: %v", j.ID, err)
		}
		mp4, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			t.Fatalf("read result of %s: %v", j.ID, err)
		}
		if got := sha256Hex(mp4); j.Result == nil || got != j.Result.SHA256 {
			t.Fatalf("downloaded result of %s has SHA-256 %s, job says %+v", j.ID, got, j.Result)
		}
		checkResult(ctx, t, s, j)
		r, _ := p.probe(ctx, "pg-"+v, mp4)
		verdict := checkPlayable(t, r, boards[v].totalMS(), fps, width, height)
		wantSubs := map[string]int{"v1": 0, "v2": 1}[v]
		if len(verdict.Subtitles) != wantSubs {
			t.Errorf("%s render has subtitle tracks %v, want %d", v, verdict.Subtitles, wantSubs)
		}
		t.Logf("%s job %s ran on worker %s (attempts %d), seen succeeded %s after submission: %s, %d bytes",
			v, j.ID, last.Worker, j.Attempts, settledAfter, verdict, len(mp4))
	}
	if ranOn["v1"] == ranOn["v2"] {
		t.Errorf("both jobs ran on worker %s; with one slot per worker process the second job belongs to the other (%v)", ranOn["v1"], workers)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
