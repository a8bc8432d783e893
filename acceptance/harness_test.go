//go:build acceptance

package acceptance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	edgeclient "edgepipe/client"
)

// Names shared with docker/images.sh and docker-compose.yml.
var (
	appImage   = envOr("EDGEPIPE_IMAGE", "edgepipe:dev")
	minioImage = envOr("EDGEPIPE_MINIO_IMAGE", "edgepipe-minio:local")
	baseImage  = envOr("EDGEPIPE_BASE_IMAGE", "edgepipe-base:bookworm")
)

const (
	minioUser   = "minioadmin"
	minioSecret = "minioadmin"
	tenantToken = "acceptance-token-0001"
	adminToken  = "acceptance-admin-token-0001"

	// Poll intervals: fast enough that the SIGKILL test sees the window it
	// aims at, slow enough not to load two cores.
	pollEvery = 100 * time.Millisecond
)

// docker is the engine client for what testcontainers does not wrap
// (SIGKILL, named volumes). Nil when Docker is unavailable.
var (
	docker     *testcontainers.DockerClient
	skipReason string
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	// Ryuk's image cannot be pulled on an air-gapped engine; containers are
	// removed by CleanupContainer instead.
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	// Published ports are reached on loopback. Left alone, testcontainers
	// guesses "the host" from the default gateway when it believes it runs
	// in a container, which sends test traffic off this machine.
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	// testcontainers narrates every container it starts; keep the test
	// output to what the tests say unless asked.
	if os.Getenv("EDGEPIPE_TEST_DEBUG") == "" {
		tclog.SetDefault(tclog.NewNoopLogger())
	}
	if err := setup(); err != nil {
		skipReason = err.Error()
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "acceptance: FAIL: %s (CI is set, so the acceptance suite may not be skipped)\n", skipReason)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "acceptance: every test skips: %s\n", skipReason)
	}
	code := m.Run()
	if docker != nil {
		docker.Close()
	}
	os.Exit(code)
}

// setup connects to Docker and makes sure the images exist, building what
// is missing or stale with docker/images.sh.
func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("no Docker engine: %v", err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		cli.Close()
		return fmt.Errorf("no Docker engine: %v", err)
	}
	docker = cli
	if os.Getenv("ACCEPTANCE_NO_BUILD") == "" {
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "docker", "images.sh")
		cmd := exec.Command("bash", script)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("docker/images.sh failed (%v); run `make images` and read its output", err)
		}
	}
	ictx, icancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer icancel()
	for _, img := range []string{appImage, minioImage, baseImage, pgImage} {
		if _, err := docker.ImageInspect(ictx, img); err != nil {
			return fmt.Errorf("image %s is missing (run `make images`): %v", img, err)
		}
	}
	return nil
}

// requireDocker skips (or, in CI, has already failed the run) without an engine.
func requireDocker(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip("acceptance: " + skipReason)
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// stack is one test's world: a private network with MinIO, a standalone
// fake provider and (started separately, possibly several times on the
// same volume) edgepipe.
type stack struct {
	t        *testing.T
	name     string
	net      *testcontainers.DockerNetwork
	minio    *testcontainers.DockerContainer
	provider *testcontainers.DockerContainer
	s3       *minio.Client
	bucket   string
	volume   string
	provURL  string // from the test process
	app      *testcontainers.DockerContainer
	api      string // from the test process
	baseEnv  map[string]string
	http     *http.Client
}

type stackOptions struct {
	// providerEnv is added to the fake provider's environment (faults,
	// video processing time).
	providerEnv map[string]string
}

func newStack(ctx context.Context, t *testing.T, opts stackOptions) *stack {
	t.Helper()
	requireDocker(t)
	s := &stack{t: t, name: strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-" + randomSuffix(), http: &http.Client{Timeout: 30 * time.Second}}
	s.bucket = "acc-" + randomSuffix()

	nw, err := network.New(ctx)
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	testcontainers.CleanupNetwork(t, nw)
	s.net = nw

	// The volume outlives the edgepipe containers of a test (restart, SIGKILL),
	// so it is created here and removed last.
	vol := "edgepipe-acc-" + randomSuffix()
	if _, err := docker.VolumeCreate(ctx, client.VolumeCreateOptions{Name: vol, Labels: testcontainers.GenericLabels()}); err != nil {
		t.Fatalf("create volume: %v", err)
	}
	t.Cleanup(func() {
		if _, err := docker.VolumeRemove(context.Background(), vol, client.VolumeRemoveOptions{Force: true}); err != nil {
			t.Logf("remove volume %s: %v", vol, err)
		}
	})
	s.volume = vol

	var wg sync.WaitGroup
	var minioErr, provErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.minio, minioErr = testcontainers.Run(ctx, minioImage,
			testcontainers.WithCmd("server", "/data", "--address", ":9000"),
			testcontainers.WithEnv(map[string]string{"MINIO_ROOT_USER": minioUser, "MINIO_ROOT_PASSWORD": minioSecret}),
			testcontainers.WithExposedPorts("9000/tcp"),
			network.WithNetwork([]string{"minio"}, nw),
			testcontainers.WithWaitStrategy(wait.ForHTTP("/minio/health/live").WithPort("9000/tcp").WithStartupTimeout(60*time.Second)),
		)
	}()
	go func() {
		defer wg.Done()
		env := map[string]string{"EDGEPIPE_FAKE_SEED": "7"}
		for k, v := range opts.providerEnv {
			env[k] = v
		}
		s.provider, provErr = testcontainers.Run(ctx, appImage,
			testcontainers.WithCmd("fake-provider", "--addr", "0.0.0.0:9090"),
			testcontainers.WithEnv(env),
			testcontainers.WithExposedPorts("9090/tcp"),
			network.WithNetwork([]string{"provider"}, nw),
			testcontainers.WithWaitStrategy(wait.ForHTTP("/healthz").WithPort("9090/tcp").WithStartupTimeout(60*time.Second)),
		)
	}()
	wg.Wait()
	// Register cleanup even for a half-started container (CleanupContainer
	// accepts nil).
	testcontainers.CleanupContainer(t, s.minio)
	testcontainers.CleanupContainer(t, s.provider)
	s.dumpLogsOnFailure("minio", s.minio)
	s.dumpLogsOnFailure("provider", s.provider)
	if err := errors.Join(minioErr, provErr); err != nil {
		t.Fatalf("start MinIO and provider: %v", err)
	}

	s3Host, err := s.minio.PortEndpoint(ctx, "9000/tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	s.s3, err = minio.New(s3Host, &minio.Options{Creds: credentials.NewStaticV4(minioUser, minioSecret, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	if s.provURL, err = s.provider.PortEndpoint(ctx, "9090/tcp", "http"); err != nil {
		t.Fatal(err)
	}
	s.baseEnv = map[string]string{
		"EDGEPIPE_ADDR":               "0.0.0.0:8080",
		"EDGEPIPE_DATA_DIR":           "/data",
		"EDGEPIPE_STORE":              "s3",
		"EDGEPIPE_S3_ENDPOINT":        "http://minio:9000",
		"EDGEPIPE_S3_BUCKET":          s.bucket,
		"EDGEPIPE_S3_ACCESS_KEY":      minioUser,
		"EDGEPIPE_S3_SECRET_KEY":      minioSecret,
		"EDGEPIPE_S3_REGION":          "us-east-1",
		"EDGEPIPE_S3_CREATE_BUCKET":   "true",
		"EDGEPIPE_BINDINGS":           "v1,v2",
		"WORKFLOW_V2_ROLLOUT_PERCENT": "0",
		"EDGEPIPE_TOKENS":             tenantToken + ":acme",
		"EDGEPIPE_ADMIN_TOKEN":        adminToken,
		"EDGEPIPE_WEBHOOK_SECRET":     "acceptance-webhook-secret",
		"EDGEPIPE_PROVIDER_URL":       "http://provider:9090",
		"EDGEPIPE_WORKERS":            "2",
		// A short lease so a job held by a killed worker is taken over
		// within seconds, not the default 30 s.
		"EDGEPIPE_LEASE":      "3s",
		"EDGEPIPE_RETRY_BASE": "200ms",
		"EDGEPIPE_RETRY_CAP":  "2s",
	}
	return s
}

// dumpLogsOnFailure prints the tail of a container's log if the test failed.
func (s *stack) dumpLogsOnFailure(name string, c *testcontainers.DockerContainer) {
	if c == nil {
		return
	}
	t := s.t
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("EDGEPIPE_TEST_DEBUG") == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rc, err := c.Logs(ctx)
		if err != nil {
			t.Logf("%s logs: %v", name, err)
			return
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		t.Logf("--- last %d log lines of %s (%s) ---\n%s", len(lines), name, c.GetContainerID()[:12], strings.Join(lines, "\n"))
	})
}

// startEdgepipe starts an edgepipe server on the stack's volume; env
// overrides the base settings. It replaces s.app and s.api.
func (s *stack) startEdgepipe(ctx context.Context, label string, env map[string]string) *testcontainers.DockerContainer {
	t := s.t
	t.Helper()
	full := map[string]string{}
	for k, v := range s.baseEnv {
		full[k] = v
	}
	for k, v := range env {
		full[k] = v
	}
	c, err := testcontainers.Run(ctx, appImage,
		testcontainers.WithCmd("serve", "--grace", "5s"),
		testcontainers.WithEnv(full),
		testcontainers.WithExposedPorts("8080/tcp"),
		testcontainers.WithMounts(testcontainers.VolumeMount(s.volume, "/data")),
		network.WithNetwork([]string{"edgepipe"}, s.net),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/healthz").WithPort("8080/tcp").WithStartupTimeout(60*time.Second)),
	)
	testcontainers.CleanupContainer(t, c)
	if c != nil {
		s.dumpLogsOnFailure("edgepipe "+label, c)
	}
	if err != nil {
		t.Fatalf("start edgepipe (%s): %v", label, err)
	}
	api, err := c.PortEndpoint(ctx, "8080/tcp", "http")
	if err != nil {
		t.Fatal(err)
	}
	s.app, s.api = c, api
	return c
}

// stopEdgepipe stops the current server gracefully (SIGTERM).
func (s *stack) stopEdgepipe(ctx context.Context) {
	s.t.Helper()
	d := 15 * time.Second
	if err := s.app.Stop(ctx, &d); err != nil {
		s.t.Fatalf("stop edgepipe: %v", err)
	}
}

// killEdgepipe sends SIGKILL to the current server: no deferred code, no
// lease release, no graceful shutdown.
func (s *stack) killEdgepipe(ctx context.Context) {
	s.t.Helper()
	id := s.app.GetContainerID()
	if _, err := docker.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		s.t.Fatalf("SIGKILL edgepipe: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := s.app.State(ctx)
		if err != nil {
			s.t.Fatalf("inspect killed container: %v", err)
		}
		if !st.Running {
			if st.ExitCode != 137 {
				s.t.Fatalf("killed container exited %d, want 137 (SIGKILL)", st.ExitCode)
			}
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatal("container still running 20s after SIGKILL")
		}
		time.Sleep(pollEvery)
	}
}

// execApp runs an edgepipe subcommand inside the current server's container
// (same environment, same database and bucket) and returns its exit code and
// combined output.
func (s *stack) execApp(ctx context.Context, args ...string) (int, string) {
	s.t.Helper()
	code, r, err := s.app.Exec(ctx, append([]string{"edgepipe"}, args...), tcexec.Multiplexed())
	if err != nil {
		s.t.Fatalf("exec edgepipe %v: %v", args, err)
	}
	out, _ := io.ReadAll(r)
	return code, string(out)
}

// ---- HTTP API ----

type scene struct {
	ImagePrompt string `json:"image_prompt,omitempty"`
	VideoPrompt string `json:"video_prompt,omitempty"`
	Narration   string `json:"narration"`
	DurationMS  int    `json:"duration_ms"`
}

type storyboard struct {
	Operation  string         `json:"operation"`
	Title      string         `json:"title,omitempty"`
	Scenes     []scene        `json:"scenes"`
	Options    map[string]any `json:"options,omitempty"`
	InstanceID string         `json:"instance_id,omitempty"`
}

func (b storyboard) totalMS() int {
	n := 0
	for _, s := range b.Scenes {
		n += s.DurationMS
	}
	return n
}

// job is the job resource as the client package reads it.
type job struct{ edgeclient.Job }

func (j job) String() string {
	e := ""
	if j.Error != nil {
		e = fmt.Sprintf(" error=%s/%s %q", j.Error.Class, j.Error.Code, j.Error.Message)
	}
	return fmt.Sprintf("%s version=%s status=%s attempts=%d units=%d/%d stage=%s%s",
		j.ID, j.Version, j.Status, j.Attempts, j.Progress.UnitsDone, j.Progress.UnitsTotal, j.Progress.Stage, e)
}

// apiClient is a client of the service under test with token; the
// service's address changes with every container, so it is made per use.
func (s *stack) apiClient(token string) *edgeclient.Client {
	s.t.Helper()
	c, err := edgeclient.New(edgeclient.Config{BaseURL: s.api, Token: token, UserAgent: "edgepipe-acceptance", RequestTimeout: 30 * time.Second})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

func (s *stack) submit(ctx context.Context, key string, b storyboard) job {
	s.t.Helper()
	sub, err := s.apiClient(tenantToken).Submit(ctx, key, b)
	if err != nil {
		s.t.Fatalf("POST /v1/jobs: %v, want 202", err)
	}
	return job{sub.Job}
}

func (s *stack) getJob(ctx context.Context, id string) job {
	s.t.Helper()
	j, err := s.apiClient(tenantToken).Get(ctx, id)
	if err != nil {
		s.t.Fatalf("GET /v1/jobs/%s: %v", id, err)
	}
	return job{j}
}

var settled = []string{"succeeded", "failed", "canceled", "dead_lettered", "needs_review"}

// waitSettled polls a job until it settles (terminal or needs_review) and
// fails the test unless it settled as want.
func (s *stack) waitSettled(ctx context.Context, id, want string, timeout time.Duration) job {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := s.getJob(ctx, id)
		if slices.Contains(settled, string(j.Status)) {
			if string(j.Status) != want {
				s.t.Fatalf("job settled as %s, want %s: %s", j.Status, want, j)
			}
			return j
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job not settled after %s: %s", timeout, j)
		}
		time.Sleep(pollEvery)
	}
}

// ---- fake provider ledger ----

type counts struct {
	Image  int64 `json:"image"`
	Speech int64 `json:"speech"`
	Video  int64 `json:"video"`
}

type ledger struct {
	Billed   counts            `json:"billed"`
	ByUnit   map[string]counts `json:"by_unit"`
	Calls    int64             `json:"calls"`
	Replayed int64             `json:"replayed"`
	Injected map[string]int64  `json:"injected"`
}

func (s *stack) ledger(ctx context.Context) ledger {
	s.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.provURL+"/ledger", nil)
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatalf("GET /ledger: %v", err)
	}
	defer resp.Body.Close()
	var l ledger
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		s.t.Fatalf("decode ledger: %v", err)
	}
	return l
}

// ---- objects ----

// listKeys lists the bucket's keys under prefix.
func (s *stack) listKeys(ctx context.Context, prefix string) []string {
	s.t.Helper()
	var keys []string
	for o := range s.s3.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			s.t.Fatalf("list %s: %v", prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// fetch downloads an object with minio-go.
func (s *stack) fetch(ctx context.Context, key string) []byte {
	s.t.Helper()
	o, err := s.s3.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		s.t.Fatalf("get %s: %v", key, err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		s.t.Fatalf("read %s: %v", key, err)
	}
	return b
}
