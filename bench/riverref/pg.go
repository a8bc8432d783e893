package main

// Postgres mode: edgepipe's storage/postgres queue against River's
// riverpgxv5 driver on the same Postgres server, with 1, 2, 4… worker
// PROCESSES per side. Each side gets its own fresh database per run so the
// two never share tables, locks or autovacuum work. The parent inserts the
// jobs, starts the worker processes (this binary re-executed with -child),
// waits until every child has connected, then releases them all at once and
// polls the completed count until all jobs are done.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"edgepipe/pipeline"
	"edgepipe/storage/postgres"
)

// PGConfig is one Postgres matrix invocation.
type PGConfig struct {
	AdminURL string // a database on the server where run databases may be created
	Jobs     int
	Workers  int   // goroutines per process (River MaxWorkers) on both sides
	Procs    []int // worker process counts to measure
	Runs     int   // alternating runs per process count
	Config   *Config
	// ChildProfile, when set, makes every worker process write a CPU
	// profile to ChildProfile.<side>.<pid>.
	ChildProfile string
	// Analyze runs ANALYZE on each side's database after the insert and
	// before the clock. A fresh database has no planner statistics until
	// autovacuum gets to it (autovacuum_naptime, a minute by default), far
	// later than a burn-down of seconds; without them Postgres estimates a
	// handful of visible queue rows and plans a fetch as "read every
	// visible row, sort, lock the first N" instead of an ordered index scan.
	// A database in service has statistics. Both sides get the same.
	Analyze bool
}

// pgSide is one queue under test.
type pgSide struct {
	name      string
	insert    func(ctx context.Context, url string, jobs int) error
	doneQuery string // counts completed jobs
}

var pgSides = []pgSide{
	{name: "edgepipe", insert: insertEdgepipe, doneQuery: `SELECT count(*) FROM jobs WHERE status = 'succeeded'`},
	{name: "river", insert: insertRiver, doneQuery: `SELECT count(*) FROM river_job WHERE state = 'completed'`},
}

// RunPGMatrix measures every process count Runs times, alternating the two
// sides within each run, and prints the median table.
func RunPGMatrix(ctx context.Context, pc *PGConfig, w io.Writer) error {
	rates := map[string]map[int][]float64{"edgepipe": {}, "river": {}}
	dbCPU := map[string]map[int][]float64{"edgepipe": {}, "river": {}}
	workerCPU := map[string]map[int][]float64{"edgepipe": {}, "river": {}}
	for _, procs := range pc.Procs {
		for run := 1; run <= pc.Runs; run++ {
			order := pgSides
			if run%2 == 0 { // alternate who goes first
				order = []pgSide{pgSides[1], pgSides[0]}
			}
			for _, side := range order {
				res, err := pgBurnDown(ctx, pc, side, procs)
				if err != nil {
					return fmt.Errorf("%s, %d processes, run %d: %w", side.name, procs, run, err)
				}
				rate := float64(pc.Jobs) / res.d.Seconds()
				rates[side.name][procs] = append(rates[side.name][procs], rate)
				if res.dbCPUok {
					dbCPU[side.name][procs] = append(dbCPU[side.name][procs], float64(res.dbCPU.Microseconds())/float64(pc.Jobs))
				}
				if res.workersOK {
					workerCPU[side.name][procs] = append(workerCPU[side.name][procs], float64(res.workerCPU.Microseconds())/float64(pc.Jobs))
				}
				fmt.Fprintf(os.Stderr, "%s procs=%d run=%d: %d jobs in %.3fs = %.0f jobs/s, CPU µs/job database %s workers %s (load %s)\n",
					side.name, procs, run, pc.Jobs, res.d.Seconds(), rate,
					perJob(res.dbCPU, res.dbCPUok, pc.Jobs), perJob(res.workerCPU, res.workersOK, pc.Jobs), loadAvg())
			}
		}
	}
	stats := "no planner statistics (fresh databases)"
	if pc.Analyze {
		stats = "ANALYZE after the insert"
	}
	kind := "no-op jobs"
	if pc.Config.Work > 0 {
		kind = fmt.Sprintf("jobs of %v each", pc.Config.Work)
	}
	fmt.Fprintf(w, "postgres burn-down: %d %s, %d workers per process, median of %d run(s), %s, load average %s\n",
		pc.Jobs, kind, pc.Workers, pc.Runs, stats, loadAvg())
	fmt.Fprintln(w, "| processes | edgepipe jobs/s | River jobs/s | ratio | database CPU µs/job (edgepipe / River) | worker CPU µs/job (edgepipe / River) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, procs := range pc.Procs {
		e, r := median(rates["edgepipe"][procs]), median(rates["river"][procs])
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %.2f× | %s / %s | %s / %s |\n", procs, e, r, e/r,
			medianOrUnknown(dbCPU["edgepipe"][procs]), medianOrUnknown(dbCPU["river"][procs]),
			medianOrUnknown(workerCPU["edgepipe"][procs]), medianOrUnknown(workerCPU["river"][procs]))
	}
	return nil
}

// medianOrUnknown is the median of xs rounded, or "?" when nothing was
// measured.
func medianOrUnknown(xs []float64) string {
	if len(xs) == 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f", median(xs))
}

// burnResult is one side's run: the time from releasing the workers to the
// last completed job, and the CPU time the database's backends and the
// worker processes spent (cpu.go; ok false when it could not be read).
type burnResult struct {
	d                  time.Duration
	dbCPU, workerCPU   time.Duration
	dbCPUok, workersOK bool
}

// pgBurnDown runs one side once on a fresh database.
func pgBurnDown(ctx context.Context, pc *PGConfig, side pgSide, procs int) (burnResult, error) {
	var res burnResult
	url, drop, err := createDatabase(ctx, pc.AdminURL, side.name)
	if err != nil {
		return res, err
	}
	defer drop()
	if err := side.insert(ctx, url, pc.Jobs); err != nil {
		return res, err
	}
	if pc.Analyze {
		if err := analyzeDatabase(ctx, url); err != nil {
			return res, err
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return res, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	server := startServerCPU(ctx, conn)
	children, err := startChildren(ctx, side.name, url, pc, procs)
	stopped := false
	defer func() {
		if !stopped {
			stopChildren(children)
		}
	}()
	if err != nil {
		return res, err
	}
	// The workers' start-up (connecting, migrating) is not the burn-down's.
	// (The database side's is: a backend's time is counted when it exits.)
	precise := preciseCPU(children)
	startCPU, startOK := workersCPU(children, precise)
	start := time.Now()
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return res, fmt.Errorf("release child: %w", err)
		}
	}
	// How far the burn-down is: the database's count every 10 ms
	// (Config.CountInDB), or the sum of the children's reports every
	// millisecond (reportDone).
	progress, every := func() (int, error) {
		n := 0
		for _, c := range children {
			n += int(c.done.Load())
		}
		return n, nil
	}, time.Millisecond
	if pc.Config.CountInDB {
		progress, every = func() (int, error) { return countDone(ctx, conn, side) }, 10*time.Millisecond
	}
	if err := awaitAll(ctx, progress, every, pc.Jobs); err != nil {
		return res, err
	}
	res.d = time.Since(start)
	res.workerCPU, res.workersOK = workersCPU(children, precise)
	res.workerCPU -= startCPU
	// A thread that exited in between takes its time with it (rare in Go).
	res.workersOK = res.workersOK && startOK && res.workerCPU >= 0
	// The reports are checked against the database, off the clock but
	// before the workers stop (stopping flushes their last completions):
	// a worker that reported a job before its completion committed very
	// likely fails here (the check follows the last report by a millisecond or two).
	n, err := countDone(ctx, conn, side)
	if err != nil {
		return res, err
	}
	if n != pc.Jobs {
		return res, fmt.Errorf("the workers reported every job completed, the database holds %d of %d", n, pc.Jobs)
	}
	stopChildren(children)
	stopped = true
	res.dbCPU, res.dbCPUok = server.used(ctx)
	return res, nil
}

// countDone is how many jobs the database holds completed.
func countDone(ctx context.Context, conn *pgx.Conn, side pgSide) (int, error) {
	var n int
	if err := conn.QueryRow(ctx, side.doneQuery).Scan(&n); err != nil {
		return 0, fmt.Errorf("count completed: %w", err)
	}
	return n, nil
}

// awaitAll polls progress every interval until it reaches jobs.
func awaitAll(ctx context.Context, progress func() (int, error), every time.Duration, jobs int) error {
	for {
		n, err := progress()
		if err != nil {
			return err
		}
		if n >= jobs {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stalled at %d of %d: %w", n, jobs, ctx.Err())
		case <-time.After(every):
		}
	}
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  atomic.Int64 // the jobs it reported completed ("done N" lines)
}

// readReports follows a child's "done N" lines (reportDone).
func (c *child) readReports(out *bufio.Reader) {
	for {
		line, err := out.ReadString('\n')
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "done "); ok {
			if v, err := strconv.ParseInt(n, 10, 64); err == nil {
				c.done.Store(v)
			}
		}
		if err != nil {
			return
		}
	}
}

// startChildren starts procs worker processes and waits until each says it
// is connected and ready.
func startChildren(ctx context.Context, side, url string, pc *PGConfig, procs int) ([]*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var children []*child
	for range procs {
		cmd := exec.CommandContext(ctx, self, "-child", side, "-child-url", url,
			"-workers", strconv.Itoa(pc.Workers),
			"-fetch-cooldown", pc.Config.FetchCooldown.String(),
			"-fetch-poll-interval", pc.Config.FetchPollInterval.String(),
			"-work", pc.Config.Work.String())
		if pc.ChildProfile != "" {
			cmd.Args = append(cmd.Args, "-child-cpuprofile", pc.ChildProfile+"."+side)
		}
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return children, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return children, err
		}
		if err := cmd.Start(); err != nil {
			return children, fmt.Errorf("start child: %w", err)
		}
		c := &child{cmd: cmd, stdin: stdin}
		children = append(children, c)
		out := bufio.NewReader(stdout)
		line, err := out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			return children, fmt.Errorf("child did not get ready: %q %v", line, err)
		}
		go c.readReports(out)
	}
	return children, nil
}

// stopChildren closes every child's stdin (its signal to stop) and waits.
func stopChildren(children []*child) {
	for _, c := range children {
		c.stdin.Close()
	}
	for _, c := range children {
		if err := c.cmd.Wait(); err != nil {
			fmt.Fprintln(os.Stderr, "riverref: child:", err)
		}
	}
}

var dbSeq int

// createDatabase creates a fresh database next to adminURL and returns its
// URL and a function that drops it.
func createDatabase(ctx context.Context, adminURL, side string) (string, func(), error) {
	dbSeq++
	name := fmt.Sprintf("riverref_%s_%d_%d", side, os.Getpid(), dbSeq)
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect admin: %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	cfg := admin.Config()
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	if cfg.Password != "" {
		url = fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Password, cfg.Host, cfg.Port, name)
	}
	drop := func() {
		bg := context.WithoutCancel(ctx)
		if _, err := admin.Exec(bg, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			fmt.Fprintln(os.Stderr, "riverref: drop database:", err)
		}
		admin.Close(bg)
	}
	return url, drop, nil
}

// analyzeDatabase collects planner statistics for every table of the
// database at url (PGConfig.Analyze).
func analyzeDatabase(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

func insertEdgepipe(ctx context.Context, url string, jobs int) error {
	s, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		return err
	}
	defer s.Close() //nolint:contextcheck // Store.Close takes no context; it waits for its last group commit
	batch := make([]pipeline.NewJob, 0, 1000)
	for i := range jobs {
		id := fmt.Sprintf("v1-%09d", i)
		batch = append(batch, pipeline.NewJob{ID: id, Tenant: "bench", Operation: "noop", IdempotencyKey: id,
			RequestFingerprint: id, Version: "v1", Queue: "render-v1"})
		if len(batch) == cap(batch) || i == jobs-1 {
			if err := s.CreateJobs(ctx, batch); err != nil {
				return fmt.Errorf("create jobs: %w", err)
			}
			batch = batch[:0]
		}
	}
	return nil
}

func insertRiver(ctx context.Context, url string, jobs int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return fmt.Errorf("new migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	client, err := river.NewClient(driver, &river.Config{}) // insert-only
	if err != nil {
		return err
	}
	_, err = insertJobsPG(ctx, client, jobs, 5000)
	return err
}

func insertJobsPG(ctx context.Context, client *river.Client[pgx.Tx], jobs, batch int) (time.Duration, error) {
	params := make([]river.InsertManyParams, 0, batch)
	start := time.Now()
	for inserted := 0; inserted < jobs; {
		params = params[:0]
		for i := 0; i < batch && inserted+i < jobs; i++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{Num: inserted + i}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return 0, fmt.Errorf("insert many: %w", err)
		}
		inserted += len(params)
	}
	return time.Since(start), nil
}

// awaitRelease says ready on stdout, waits for the parent's "go" line, and
// returns a context cancelled when the parent closes stdin.
func awaitRelease(ctx context.Context) (context.Context, context.CancelFunc, error) {
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return nil, nil, fmt.Errorf("no go from parent: %q %v", line, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	return ctx, cancel, nil
}

// reportDone prints "done N" on stdout whenever the count of completed
// jobs changed, checking every millisecond, until ctx ends (then once
// more). The count must only cover jobs whose completion has committed.
func reportDone(ctx context.Context, done *atomic.Int64) {
	last := int64(0)
	report := func() {
		if n := done.Load(); n != last {
			fmt.Printf("done %d\n", n)
			last = n
		}
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			report()
			return
		case <-t.C:
			report()
		}
	}
}

// runChild is a worker process of one side.
func runChild(ctx context.Context, side, url string, cfg *Config) error {
	switch side {
	case "river":
		return riverChild(ctx, url, cfg)
	case "edgepipe":
		return edgepipeChild(ctx, url, cfg)
	}
	return fmt.Errorf("unknown child side %q", side)
}

func riverChild(ctx context.Context, url string, cfg *Config) error {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	pc.MaxConns = 16 // edgepipe's default pool size; pgxpool's would be 4 here
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{work: cfg.Work})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPollInterval,
		Logger:            cfg.Logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers:           workers,
	})
	if err != nil {
		return err
	}
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	// River sends a job's completed event after its completer's batch has
	// been written. It drops events a full channel cannot take (and logs
	// a warning), so the channel holds a whole run.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: 1 << 20})
	defer unsubscribe()
	runCtx, cancel, err := awaitRelease(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	var done atomic.Int64
	go func() {
		for range events {
			done.Add(1)
		}
	}()
	go reportDone(runCtx, &done)
	if err := client.Start(runCtx); err != nil {
		return err
	}
	<-runCtx.Done()
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	return client.Stop(stopCtx)
}

// edgepipeChild claims through storage/postgres Fetch, runs no-op workers
// and completes in batches with FinishMany, as storage/postgres's
// BenchmarkBurnDown does, until the parent closes stdin. It claims only
// for idle workers, as River's producer does and as edgepipe's worker
// (pipeline.Worker) does: a process holding claimed jobs its workers
// cannot start would have them ready the moment a worker frees, which
// River's do not, and would leave other processes nothing to claim.
func edgepipeChild(ctx context.Context, url string, cfg *Config) error {
	s, err := postgres.Open(ctx, postgres.Config{URL: url, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	defer s.Close() //nolint:contextcheck // Store.Close takes no context; it waits for its last group commit
	runCtx, cancel, err := awaitRelease(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	const fetchBatch, completeBatch = 200, 500
	work := make(chan pipeline.Claimed, cfg.Workers)
	completions := make(chan pipeline.Finished, 2*fetchBatch)
	idle := &idleWorkers{n: cfg.Workers, freed: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			for c := range work {
				if err := wait(ctx, cfg.Work); err != nil {
					continue // stopping: the lease runs out, as a killed worker's would
				}
				completions <- pipeline.Finished{Lease: c.Lease, Outcome: pipeline.Outcome{Status: pipeline.StatusSucceeded}}
				idle.add(1)
			}
		})
	}
	var done atomic.Int64
	go reportDone(runCtx, &done)
	completerErr := make(chan error, 1)
	go func() { completerErr <- complete(ctx, s, completions, completeBatch, &done) }()
	fetchErr := fetchLoop(runCtx, s, work, idle, fetchBatch, cfg)
	close(work)
	wg.Wait()
	close(completions)
	return errors.Join(fetchErr, <-completerErr)
}

// idleWorkers counts the workers without a claimed job; freed wakes a
// fetcher waiting for one.
type idleWorkers struct {
	mu    sync.Mutex
	n     int
	freed chan struct{}
}

func (w *idleWorkers) add(d int) {
	w.mu.Lock()
	w.n += d
	w.mu.Unlock()
	if d > 0 {
		select {
		case w.freed <- struct{}{}:
		default:
		}
	}
}

func (w *idleWorkers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func fetchLoop(ctx context.Context, s *postgres.Store, work chan<- pipeline.Claimed, idle *idleWorkers, batch int, cfg *Config) error {
	owner := fmt.Sprintf("riverref-%d", os.Getpid())
	for ctx.Err() == nil {
		limit := min(idle.count(), batch)
		if limit == 0 {
			select {
			case <-ctx.Done():
			case <-idle.freed:
			}
			continue
		}
		cs, _, err := s.Fetch(ctx, &pipeline.FetchParams{Queue: "render-v1", Owner: owner, Max: limit, LeaseFor: time.Minute})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		idle.add(-len(cs))
		wait := cfg.FetchCooldown
		if len(cs) == 0 {
			wait = cfg.FetchPollInterval
		}
		for _, c := range cs {
			work <- c
		}
		if len(cs) < limit {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
	return nil
}

// complete finishes the workers' jobs in batches with FinishMany and adds
// the ones that committed to done.
func complete(ctx context.Context, s *postgres.Store, completions <-chan pipeline.Finished, max int, done *atomic.Int64) error {
	pending := make([]pipeline.Finished, 0, max)
	var errs []error
	flush := func() {
		if len(pending) == 0 {
			return
		}
		res, err := s.FinishMany(ctx, pending)
		errs = append(errs, err)
		errs = append(errs, res...)
		if err == nil {
			for _, e := range res {
				if e == nil {
					done.Add(1)
				}
			}
		}
		pending = pending[:0]
	}
	for f := range completions {
		pending = append(pending, f)
	drain:
		for len(pending) < max {
			select {
			case f, ok := <-completions:
				if !ok {
					break drain
				}
				pending = append(pending, f)
			default:
				break drain
			}
		}
		flush()
	}
	flush()
	return errors.Join(errs...)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// parseProcs parses "1,2,4".
func parseProcs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad process count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// runPG is main's Postgres mode: a child worker process, or the matrix.
func runPG(ctx context.Context, cfg *Config, url, procs string, runs int, childSide, childURL, childProfile string, analyze bool) error {
	if childSide != "" {
		if childProfile != "" {
			f, err := os.Create(fmt.Sprintf("%s.%d", childProfile, os.Getpid()))
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		return runChild(ctx, childSide, childURL, cfg)
	}
	ps, err := parseProcs(procs)
	if err != nil {
		return err
	}
	if runs < 1 {
		return errors.New("runs must be at least 1")
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	return RunPGMatrix(ctx, &PGConfig{AdminURL: url, Jobs: cfg.Jobs, Workers: cfg.Workers, Procs: ps, Runs: runs, Config: cfg, ChildProfile: childProfile, Analyze: analyze}, os.Stdout)
}
