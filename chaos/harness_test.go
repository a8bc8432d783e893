//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"edgepipe/client"
	"edgepipe/pipeline"
)

// Settings of the suites (see the package documentation).
var (
	fullMode  = os.Getenv("CHAOS_FULL") != ""
	raceBuild = os.Getenv("CHAOS_RACE") != ""
	logRoot   = os.Getenv("CHAOS_LOG_DIR")
	// storeKind is the job store every cluster runs on: "sqlite" (the
	// embedded file in the data directory) or "postgres" (CHAOS_STORE=postgres:
	// a fresh database per cluster on the server of
	// EDGEPIPE_TEST_DATABASE_URL, which scripts/postgres.sh starts).
	storeKind = or(os.Getenv("CHAOS_STORE"), "sqlite")
	binPath   string // the edgepipe binary under test
)

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

const (
	tenantToken = "chaos-tenant-token-0001"
	// chaosTenant is the one tenant the token above maps to.
	chaosTenant = "chaos"
	adminToken  = "chaos-admin-token-00001"
	// Settled statuses: terminal ones and needs_review.
	unsettled = "pending,running,retry_wait"
)

func TestMain(m *testing.M) {
	code, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	if code >= 0 {
		os.Exit(code)
	}
	code = m.Run()
	fmt.Fprintf(os.Stderr, "chaos totals: %d SIGKILLs of edgepipe, %d jobs run to a settled status\n", totals.kills.Load(), totals.jobs.Load())
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// builtDir holds the binary setup built, removed at the end.
var builtDir string

// setup builds the binary (unless CHAOS_BIN names one) and makes sure
// ffmpeg is there. A negative code means "run the tests".
func setup() (int, error) {
	if storeKind != "sqlite" && storeKind != "postgres" {
		return 1, fmt.Errorf("CHAOS_STORE: must be sqlite or postgres, got %q", storeKind)
	}
	if storeKind == "postgres" && os.Getenv("EDGEPIPE_TEST_DATABASE_URL") == "" {
		return 1, fmt.Errorf("CHAOS_STORE=postgres needs EDGEPIPE_TEST_DATABASE_URL (eval \"$(scripts/postgres.sh start)\")")
	}
	for _, tool := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				return 1, fmt.Errorf("%s is missing and CI is set, so the chaos suite may not be skipped", tool)
			}
			fmt.Fprintf(os.Stderr, "chaos: SKIPPING every test: %s is not installed (apt-get install -y ffmpeg)\n", tool)
			return 0, nil
		}
	}
	if p := os.Getenv("CHAOS_BIN"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return 1, err
		}
		binPath = abs
		return -1, nil
	}
	dir, err := os.MkdirTemp("", "edgepipe-chaos-bin-")
	if err != nil {
		return 1, err
	}
	builtDir, binPath = dir, filepath.Join(dir, "edgepipe")
	args := []string{"build", "-o", binPath}
	if raceBuild {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "edgepipe/cmd/edgepipe")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 1, fmt.Errorf("go build edgepipe: %w", err)
	}
	fmt.Fprintf(os.Stderr, "chaos: built %s in %s (race=%v)\n", binPath, time.Since(start).Round(time.Millisecond), raceBuild)
	return -1, nil
}

// ---------------------------------------------------------------- processes

// proc is one edgepipe (or MinIO) process started by a test.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// logStart is where this process's output begins in logPath: a log
	// directory kept across runs (CHAOS_LOG_DIR) appends every run of a
	// test to the same files.
	logStart int64
	done     chan struct{}
	waitErr  error
}

// startProc starts bin with args and env, its output going to a log file in
// logDir. The process gets SIGKILL if the test binary dies, and the test's
// cleanup kills it if it is still running.
func startProc(t testing.TB, logDir, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "==== %s start %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	logStart, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, logStart: logStart, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		fmt.Fprintf(f, "==== %s exit %v (cpu user %s sys %s, children included)\n", time.Now().Format(time.RFC3339Nano),
			cmd.ProcessState, cmd.ProcessState.UserTime(), cmd.ProcessState.SystemTime())
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill(); <-p.done })
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to this process (not its children: a crashed process
// leaves its ffmpeg children to die of a broken pipe, as in production).
func (p *proc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
}

// killWait kills and waits for the exit.
func (p *proc) killWait() {
	p.kill()
	<-p.done
}

// stop sends SIGTERM and waits up to timeout, then kills. It reports
// whether the process exited by itself with status 0.
func (p *proc) stop(timeout time.Duration) error {
	if p.exited() {
		return fmt.Errorf("%s had already exited: %v", p.name, p.cmd.ProcessState)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("%s exited badly after SIGTERM: %v", p.name, p.waitErr)
		}
		return nil
	case <-time.After(timeout):
		p.killWait()
		return fmt.Errorf("%s did not stop within %s of SIGTERM", p.name, timeout)
	}
}

// signaled reports whether the process died of sig.
func (p *proc) signaled(sig syscall.Signal) bool {
	if !p.exited() || p.cmd.ProcessState == nil {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func (p *proc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// ownLog is this process's part of its log file.
func (p *proc) ownLog() string {
	l := p.log()
	if int64(len(l)) < p.logStart {
		return ""
	}
	return l[p.logStart:]
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// logDir is where a test's process logs go: CHAOS_LOG_DIR/<test> when set
// (kept), else a temporary directory.
func logDir(t testing.TB) string {
	t.Helper()
	if logRoot == "" {
		return t.TempDir()
	}
	d := filepath.Join(logRoot, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// baseEnv is this process's environment without any EDGEPIPE_* or
// WORKFLOW_* setting (edgepipe refuses unknown ones, and a stray setting
// from the caller's shell must not change the run), plus kv.
func baseEnv(kv ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if strings.HasPrefix(e, "EDGEPIPE_") || strings.HasPrefix(e, "WORKFLOW_") {
			continue
		}
		env = append(env, e)
	}
	return append(env, kv...)
}

// ---------------------------------------------------------------- cluster

// cluster is one edgepipe deployment under test: a data directory shared by
// every process and restart (on Postgres it holds no job store, only a
// worker's spool), a fake provider process whose ledger survives edgepipe's
// deaths, and the edgepipe processes.
type cluster struct {
	t       testing.TB
	name    string
	dataDir string
	// dbURL is the cluster's own Postgres database, "" on SQLite.
	dbURL   string
	logDir  string
	fake    *proc
	fakeURL string
	apiAddr string
	api     *apiClient
	// env is added to every edgepipe process's environment (storage
	// settings and the like).
	env []string

	mu      sync.Mutex
	servers []*proc // every serve/worker process ever started
	starts  int
}

type clusterConfig struct {
	// Faults is the fake provider's fault spec.
	Faults string
	Seed   uint64
	// Env is added to every edgepipe process (e.g. the S3 settings).
	Env []string
	// DataDir, when set, is used instead of a new temporary directory.
	DataDir string
	// Postgres puts the job store on a fresh Postgres database whatever
	// CHAOS_STORE says.
	Postgres bool
	// NoFake starts no fake provider and leaves EDGEPIPE_PROVIDER_URL
	// unset: Env chooses the providers (the real-provider tests).
	NoFake bool
	// Unproven skips the probe of the fake's image key: images then run
	// as sync, as in a deployment nobody probed.
	Unproven bool
}

func newCluster(t testing.TB, cfg clusterConfig) *cluster {
	t.Helper()
	c := &cluster{t: t, name: t.Name(), logDir: logDir(t), env: cfg.Env, dataDir: cfg.DataDir}
	if c.dataDir == "" {
		c.dataDir = t.TempDir()
		if logRoot != "" {
			// Keep the data next to the logs for a post-mortem.
			c.dataDir = filepath.Join(c.logDir, "data")
			_ = os.RemoveAll(c.dataDir)
		}
	}
	if cfg.Postgres || storeKind == "postgres" {
		c.dbURL = freshDatabase(t)
		c.env = append(slices.Clone(c.env), "EDGEPIPE_DATABASE_URL="+c.dbURL)
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = 1
	}
	if !cfg.NoFake {
		c.startFake(cfg.Faults, seed)
		if !cfg.Unproven {
			c.proveImage()
		}
	}
	c.apiAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.api = newAPIClient(t, "http://"+c.apiAddr, tenantToken)
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
	})
	return c
}

func (c *cluster) startFake(faults string, seed uint64) {
	t := c.t
	for try := 0; ; try++ {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		args := []string{"fake-provider", "--addr", addr, "--seed", strconv.FormatUint(seed, 10)}
		if faults != "" {
			args = append(args, "--faults", faults)
		}
		p := startProc(t, c.logDir, "fake-provider", baseEnv("EDGEPIPE_FAKE_VIDEO_PROCESSING=150ms"), binPath, args...)
		if err := waitHTTP(p, "http://"+addr+"/ledger", 20*time.Second); err != nil {
			p.killWait()
			if try < 2 {
				continue
			}
			t.Fatalf("fake provider: %v\n%s", err, tail(p.log(), 30))
		}
		c.fake, c.fakeURL = p, "http://"+addr
		return
	}
}

// proveImage records the proof an idempotent_verified image needs, the way
// an operator does (`edgepipe provider probe image --yes`, against this
// cluster's fake provider): without it images run as sync. A probe that
// meets an injected fault proves nothing and is run again.
func (c *cluster) proveImage() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut string
	code := -1
	for try := 0; try < 5 && code != 0; try++ {
		out, errOut, code = c.run(ctx, nil, "provider", "probe", "image", "--yes", "--interval", "50ms")
	}
	if code != 0 {
		c.t.Fatalf("edgepipe provider probe image: exit %d\n%s\n%s", code, out, errOut)
	}
}

// edgepipeEnv is the environment of an edgepipe process of this cluster.
func (c *cluster) edgepipeEnv(extra ...string) []string {
	env := baseEnv(
		"EDGEPIPE_DATA_DIR="+c.dataDir,
		"EDGEPIPE_ADDR="+c.apiAddr,
		"EDGEPIPE_TOKENS="+tenantToken+":"+chaosTenant,
		"EDGEPIPE_ADMIN_TOKEN="+adminToken,
		"EDGEPIPE_LEASE=3s",
		"EDGEPIPE_RETRY_BASE=200ms",
		"EDGEPIPE_RETRY_CAP=2s",
		"EDGEPIPE_RETRY_MAX_ATTEMPTS=8",
		"EDGEPIPE_SWEEP_INTERVAL=5s",
		"EDGEPIPE_SWEEP_GRACE=30s",
		"EDGEPIPE_RENDER_PRESET=ultrafast",
		"EDGEPIPE_WEBHOOK_SECRET=chaos-webhook-secret-0001",
		"EDGEPIPE_ALLOW_PRIVATE_WEBHOOKS=true",
		"EDGEPIPE_LOG_LEVEL=info",
	)
	if c.fakeURL != "" {
		env = append(env, "EDGEPIPE_PROVIDER_URL="+c.fakeURL)
	}
	env = append(env, c.env...)
	return append(env, extra...)
}

// serve starts `edgepipe serve` with extra settings and waits until its API
// answers, or until it exits (a failpoint can kill it before that, which is
// not an error here).
func (c *cluster) serve(extra ...string) *proc {
	c.t.Helper()
	return c.start("serve", func(p *proc) error { return waitHTTP(p, c.api.base+"/healthz", 30*time.Second) }, extra...)
}

// worker starts `edgepipe worker` (no API) on the same database.
func (c *cluster) worker(extra ...string) *proc {
	c.t.Helper()
	// Started means running, as serve's health check means for the API: a
	// SIGTERM sent in the few milliseconds between exec and the program's
	// signal handler kills the process by the default action, which stop
	// would report as a bad exit of the worker rather than of the harness.
	return c.start("worker", func(p *proc) error { return waitLog(p, workerRunning, 30*time.Second) }, extra...)
}

// start starts `edgepipe <cmd> --grace 10s` as the cluster's next process
// and waits until ready says it is up. Dying of a crash failpoint (SIGKILL)
// before that is fine; anything else (a taken port, a refused setting)
// fails the test.
func (c *cluster) start(cmd string, ready func(*proc) error, extra ...string) *proc {
	c.t.Helper()
	c.mu.Lock()
	c.starts++
	name := fmt.Sprintf("%s-%02d", cmd, c.starts)
	c.mu.Unlock()
	p := startProc(c.t, c.logDir, name, c.edgepipeEnv(extra...), binPath, cmd, "--grace", "10s")
	c.mu.Lock()
	c.servers = append(c.servers, p)
	c.mu.Unlock()
	if err := ready(p); err != nil {
		if !p.exited() || !p.signaled(syscall.SIGKILL) {
			c.t.Fatalf("%s: %v\n%s", name, err, tail(p.log(), 40))
		}
	}
	return p
}

// workerRunning is what `edgepipe worker` logs once it is running (after
// its signal handler is in place), at level info: edgepipeEnv sets
// EDGEPIPE_LOG_LEVEL=info, and a worker started at a higher level would
// never log it.
const workerRunning = "edgepipe worker running"

// waitLog waits until p's own output (not an earlier run's in the same
// file) holds line.
func waitLog(p *proc, line string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if strings.Contains(p.ownLog(), line) {
			return nil
		}
		if p.exited() {
			// It may have logged the line and exited since the read.
			if strings.Contains(p.ownLog(), line) {
				return nil
			}
			return fmt.Errorf("%s exited before it logged %q: %v", p.name, line, p.cmd.ProcessState)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not log %q within %s", p.name, line, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run runs a one-shot edgepipe command (sweep, check) and returns its
// stdout, stderr and exit code.
func (c *cluster) run(ctx context.Context, extraEnv []string, args ...string) (stdout, stderr string, code int) {
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = c.edgepipeEnv(extraEnv...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if err != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
	}
	return o.String(), e.String(), code
}

// checkReport is `edgepipe check --json`'s output.
type checkReport struct {
	Assets     int  `json:"assets"`
	Objects    int  `json:"objects"`
	Jobs       int  `json:"jobs"`
	Events     int  `json:"events"`
	Ledger     bool `json:"ledger_checked"`
	Violations []struct {
		Invariant int    `json:"invariant"`
		Kind      string `json:"kind"`
		JobID     string `json:"job_id"`
		Key       string `json:"key"`
		Detail    string `json:"detail"`
	} `json:"violations"`
}

// finish is the end of every scenario: every edgepipe process is stopped,
// the sweeper runs with no grace, and `edgepipe check --require-settled`
// with the provider's ledger must report zero violations. extraEnv
// overrides settings for the two commands (e.g. the S3 endpoint, to bypass
// the fault proxy).
func (c *cluster) finish(extraEnv ...string) checkReport {
	c.t.Helper()
	return c.finishCheck(c.fakeURL+"/ledger", extraEnv...)
}

// finishCheck is finish with the provider ledger to cross-check ("" = none:
// a provider without one).
func (c *cluster) finishCheck(ledgerURL string, extraEnv ...string) checkReport {
	c.t.Helper()
	c.stopAll()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, errOut, code := c.run(ctx, extraEnv, "sweep", "--grace", "0s", "--json")
	if code != 0 {
		c.t.Fatalf("edgepipe sweep exited %d: %s%s", code, out, errOut)
	}
	c.t.Logf("sweep: %s", strings.TrimSpace(out))
	args := []string{"check", "--json", "--require-settled"}
	if ledgerURL != "" {
		args = append(args, "--ledger", ledgerURL)
	}
	out, errOut, code = c.run(ctx, extraEnv, args...)
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		c.t.Fatalf("edgepipe check exited %d with unreadable output: %v\n%s%s", code, err, out, errOut)
	}
	for _, v := range rep.Violations {
		c.t.Errorf("VIOLATION invariant %d %s job=%s key=%s: %s", v.Invariant, v.Kind, v.JobID, v.Key, v.Detail)
	}
	if ledgerURL != "" && !rep.Ledger {
		c.t.Errorf("edgepipe check did not cross-check the provider ledger")
	}
	if code != 0 && len(rep.Violations) == 0 {
		c.t.Errorf("edgepipe check exited %d without violations: %s", code, errOut)
	}
	if code == 0 && len(rep.Violations) > 0 {
		c.t.Errorf("edgepipe check exited 0 with %d violations", len(rep.Violations))
	}
	c.t.Logf("check: %d jobs, %d events, %d assets, %d objects, ledger=%v, %d violations",
		rep.Jobs, rep.Events, rep.Assets, rep.Objects, rep.Ledger, len(rep.Violations))
	return rep
}

// stopAll stops every running edgepipe process with SIGTERM.
func (c *cluster) stopAll() {
	c.mu.Lock()
	ps := slices.Clone(c.servers)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		if p.exited() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.stop(30 * time.Second); err != nil {
				c.t.Errorf("stop: %v", err)
			}
		}()
	}
	wg.Wait()
}

// scanLogs fails the test on reports in any process log that must never
// happen: data races (CHAOS_RACE), panics, and database corruption.
func (c *cluster) scanLogs() {
	c.mu.Lock()
	ps := append(slices.Clone(c.servers), c.fake)
	c.mu.Unlock()
	for _, p := range ps {
		if p == nil {
			continue
		}
		l := p.log()
		for _, bad := range []string{"WARNING: DATA RACE", "panic:", "database disk image is malformed", "fatal error:"} {
			if strings.Contains(l, bad) {
				c.t.Errorf("%s log contains %q:\n%s", p.name, bad, excerpt(l, bad, 30))
			}
		}
	}
}

func excerpt(s, needle string, lines int) string {
	i := strings.Index(s, needle)
	if i < 0 {
		return ""
	}
	return tail(s[i:], lines)
}

func (c *cluster) dumpLogs() {
	c.mu.Lock()
	ps := append(slices.Clone(c.servers), c.fake)
	c.mu.Unlock()
	for _, p := range ps {
		if p == nil {
			continue
		}
		c.t.Logf("---- %s (%s), last lines:\n%s", p.name, p.logPath, tail(p.log(), 25))
	}
}

// waitHTTP polls url until it answers 200, p exits, or timeout.
func waitHTTP(p *proc, u string, timeout time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := hc.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.exited() {
			return fmt.Errorf("%s exited before %s answered: %v", p.name, u, p.cmd.ProcessState)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s (last error %v)", u, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---------------------------------------------------------------- API client

// apiClient is the suites' client of the API under test: the public
// client package, plus the base URL for the health check.
type apiClient struct {
	*client.Client
	base string
}

func newAPIClient(t testing.TB, base, token string) *apiClient {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: base, Token: token, UserAgent: "edgepipe-chaos", RequestTimeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &apiClient{Client: c, base: base}
}

// job is the job resource.
type job = client.Job

func settled(status pipeline.Status) bool { return !strings.Contains(unsettled, string(status)) }

// submitReq is one job to submit.
type submitReq struct {
	Key  string
	Body map[string]any
}

// submit posts a job once and returns the id, whether the answer was an
// idempotent replay, and the HTTP status (0 for a transport error).
func (c *apiClient) submit(ctx context.Context, r submitReq) (string, bool, int, error) {
	s, err := c.Submit(ctx, r.Key, r.Body)
	var ae *client.APIError
	switch {
	case err == nil:
		return s.Job.ID, s.Replayed, http.StatusAccepted, nil
	case errors.As(err, &ae):
		return "", false, ae.Status, fmt.Errorf("submit %s: %w", r.Key, err)
	}
	return "", false, 0, fmt.Errorf("submit %s: %w", r.Key, err)
}

// submitRetrying submits r until it is accepted, riding out a server that
// is down or restarting (transport errors, 5xx): every retry carries the
// same Idempotency-Key, so the job is created once however often the
// request is repeated. A 4xx answer is returned at once.
func (c *apiClient) submitRetrying(ctx context.Context, r submitReq) (id string, replayed bool, err error) {
	for {
		var status int
		id, replayed, status, err = c.submit(ctx, r)
		if err == nil || status >= 400 && status < 500 {
			return id, replayed, err
		}
		select {
		case <-ctx.Done():
			return "", false, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// jobs lists every job of the tenant with one of statuses ("" = all).
func (c *apiClient) jobs(ctx context.Context, statuses string) ([]job, error) {
	o := client.ListOptions{Limit: 500}
	if statuses != "" {
		for s := range strings.SplitSeq(statuses, ",") {
			o.Statuses = append(o.Statuses, pipeline.Status(s))
		}
	}
	var all []job
	for {
		page, err := c.List(ctx, o)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Jobs...)
		if page.NextCursor == nil || *page.NextCursor == "" {
			return all, nil
		}
		o.Cursor = *page.NextCursor
	}
}

// waitSettled polls until the tenant has at least want jobs and none of
// them is pending, running or in retry_wait, tolerating an API that is
// briefly down.
func (c *apiClient) waitSettled(ctx context.Context, want int) ([]job, error) {
	var last error
	for {
		wait := 300 * time.Millisecond
		open, err := c.jobs(ctx, unsettled)
		switch {
		case err != nil:
			last = err
		case len(open) > 0:
			last = fmt.Errorf("%d jobs not settled yet", len(open))
			if len(open) > 50 {
				wait = 2 * time.Second // listing hundreds of jobs is not free
			}
		default:
			all, err := c.jobs(ctx, "")
			if err != nil {
				last = err
				break
			}
			if len(all) >= want && !slices.ContainsFunc(all, func(j job) bool { return !settled(j.Status) }) {
				return all, nil
			}
			last = fmt.Errorf("%d jobs, %d expected", len(all), want)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("jobs did not settle: %w (last: %v)", ctx.Err(), last)
		case <-time.After(wait):
		}
	}
}

// ---------------------------------------------------------------- storyboards

// storyboard builds a small job body: 640x360, 2–3 scenes of 500–800 ms.
// Prompts carry uniq, so jobs do not share unit objects, except that every
// job with shared=true also has one scene common to all such jobs (the
// claim protocol of docs/design.md §7 under concurrency and crashes).
func storyboard(uniq string, i int, shared bool) map[string]any {
	scene := func(kind, prompt, narration string, ms int) map[string]any {
		s := map[string]any{"narration": narration, "duration_ms": ms}
		s[kind+"_prompt"] = prompt
		return s
	}
	var scenes []map[string]any
	switch i % 3 {
	case 0:
		scenes = append(scenes,
			scene("image", "a lighthouse at dusk "+uniq, "the keeper climbs "+uniq, 500+(i%4)*100),
			scene("video", "waves on rocks "+uniq, "the sea answers "+uniq, 600))
	case 1:
		scenes = append(scenes,
			scene("video", "gulls over a harbour "+uniq, "morning comes "+uniq, 700),
			scene("image", "a red boat "+uniq, "the boat leaves "+uniq, 500))
	default:
		scenes = append(scenes,
			scene("image", "a map on a table "+uniq, "plans are made "+uniq, 500),
			scene("image", "rain on glass "+uniq, "it rains "+uniq, 600),
			scene("video", "fog over water "+uniq, "the fog lifts "+uniq, 800))
	}
	if shared {
		scenes = append(scenes, scene("image", "the shared harbour at night", "the same words every time", 500))
	}
	return map[string]any{
		"operation": "render_video",
		"title":     "chaos " + uniq,
		"scenes":    scenes,
		"options":   map[string]any{"resolution": "640x360", "fps": 24},
	}
}

// jobBody is one submission: version "v1" or "v2" pins the id (and so the
// workflow), webhook a receiver URL or "".
func jobBody(run string, i int, version, webhook string, shared bool) submitReq {
	uniq := fmt.Sprintf("%s-%04d", run, i)
	b := storyboard(uniq, i, shared)
	if version != "" {
		b["instance_id"] = fmt.Sprintf("%s-%s", version, strings.ReplaceAll(uniq, ".", "_"))
	}
	if webhook != "" {
		b["webhook_url"] = webhook
	}
	return submitReq{Key: "chaos-" + uniq, Body: b}
}

// ---------------------------------------------------------------- outcomes

// outcome summarizes a run's jobs.
type outcome struct {
	byStatus map[string]int
	retries  int
	ttt      []time.Duration // time to settled, created → status_changed
}

func summarize(js []job) outcome {
	o := outcome{byStatus: map[string]int{}}
	for _, j := range js {
		o.byStatus[string(j.Status)]++
		if j.Attempts > 1 {
			o.retries += j.Attempts - 1
		}
		if settled(j.Status) {
			o.ttt = append(o.ttt, j.StatusChangedAt.Sub(j.CreatedAt))
		}
	}
	sort.Slice(o.ttt, func(a, b int) bool { return o.ttt[a] < o.ttt[b] })
	return o
}

func (o outcome) pct(p float64) time.Duration {
	if len(o.ttt) == 0 {
		return 0
	}
	i := int(float64(len(o.ttt)-1) * p)
	return o.ttt[i]
}

// problems lists the jobs that did not succeed, with their error codes.
func problems(js []job) string {
	var b strings.Builder
	for _, j := range js {
		if j.Status == "succeeded" {
			continue
		}
		code := ""
		if j.Error != nil {
			code = string(j.Error.Class) + "/" + j.Error.Code
		}
		fmt.Fprintf(&b, " %s:%s(%s)", j.ID, j.Status, code)
	}
	return b.String()
}

func (o outcome) String() string {
	keys := make([]string, 0, len(o.byStatus))
	for k := range o.byStatus {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, o.byStatus[k])
	}
	fmt.Fprintf(&b, "retries=%d", o.retries)
	return b.String()
}

// expectAll checks that every submitted id exists and is settled, and that
// the tenant has no job the test did not submit.
func expectAll(t testing.TB, ids map[string]bool, js []job) {
	t.Helper()
	seen := map[string]bool{}
	for _, j := range js {
		seen[j.ID] = true
		if !ids[j.ID] {
			t.Errorf("job %s exists but was never submitted (a submission created two jobs?)", j.ID)
		}
		if !settled(j.Status) {
			t.Errorf("job %s is %s, not settled", j.ID, j.Status)
		}
	}
	for id := range ids {
		if !seen[id] {
			t.Errorf("job %s was accepted (202) and is gone", id)
		}
	}
	// An error nobody classified reaches a job as ambiguous internal_error
	// and parks it for a human (pipeline.Classify). Under these faults every
	// failure has a known class (a crash, a busy or full disk, a storage or
	// provider fault), so an unclassified one is a bug in the error paths.
	for _, j := range js {
		if j.Error != nil && j.Error.Code == "internal_error" {
			t.Errorf("job %s ended %s with an unclassified error (internal_error): a store or local error escaped classification; see the process logs for its text", j.ID, j.Status)
		}
	}
}

// webhookReceiver counts webhook deliveries (the crash matrix gives every
// job a webhook_url, so the dispatcher has work and webhook_dispatch can
// be reached).
type webhookReceiver struct {
	n   atomic.Int64
	url string
}

func newWebhookReceiver(t testing.TB) *webhookReceiver {
	t.Helper()
	w := &webhookReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.url = "http://" + ln.Addr().String() + "/hook"
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.n.Add(1)
		rw.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return w
}

func (w *webhookReceiver) total() int64 { return w.n.Load() }

// probeResult downloads a succeeded job's MP4 through the API and checks
// with ffprobe that it is playable media made by the job's own version:
// H.264 video and AAC audio, plus a mov_text caption track exactly when the
// version is v2 (docs/design.md §4: the versions differ observably). This is
// invariant 5 seen from the output, which the database cannot show.
func (c *apiClient) probeResult(ctx context.Context, j job, dir string) error {
	path := filepath.Join(dir, j.ID+".mp4")
	sum := "" // listings leave the hash out; a full resource has it
	if j.Result != nil {
		sum = j.Result.SHA256
	}
	// Follows a redirect to a presigned URL.
	if err := c.SaveResult(ctx, j.ID, path, sum); err != nil {
		return fmt.Errorf("result of %s: %w", j.ID, err)
	}
	defer os.Remove(path)
	out, err := exec.CommandContext(ctx, "ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name", "-of", "json", path).Output()
	if err != nil {
		return fmt.Errorf("ffprobe %s: %w", j.ID, err)
	}
	var pr struct {
		Streams []struct {
			CodecType string `json:"codec_type"`
			CodecName string `json:"codec_name"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &pr); err != nil {
		return fmt.Errorf("ffprobe %s: %w", j.ID, err)
	}
	var layout []string
	for _, s := range pr.Streams {
		layout = append(layout, s.CodecType+":"+s.CodecName)
	}
	want := []string{"video:h264", "audio:aac"}
	if j.Version == "v2" {
		want = append(want, "subtitle:mov_text")
	}
	got := slices.Clone(layout)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("job %s (%s) produced streams %v, want %v", j.ID, j.Version, layout, want)
	}
	return nil
}

// probeAll probes every succeeded job's result.
func (c *cluster) probeAll(ctx context.Context, js []job) int {
	c.t.Helper()
	dir := c.t.TempDir()
	n := 0
	for _, j := range js {
		if j.Status != "succeeded" {
			continue
		}
		if err := c.api.probeResult(ctx, j, dir); err != nil {
			c.t.Errorf("result: %v", err)
			continue
		}
		n++
	}
	return n
}
