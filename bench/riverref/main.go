// Command riverref measures River's job burn-down throughput on its SQLite
// driver (riversqlite), to serve as a reference number next to edgepipe's own
// SQLite queue benchmark on the same machine and in the same run.
//
// It lives in its own Go module so that the edgepipe module never depends on
// River; for that reason `go run ./bench/riverref` from the repository root
// cannot work (the root module does not contain it). Use either
//
//	go run -C bench/riverref . -jobs 20000 -workers 100   # from the root
//	go run . -jobs 20000 -workers 100                     # from this directory
//
// The method mirrors River's own `river bench` burn-down mode (cmd/river/
// riverbench): insert N no-op jobs with InsertMany before the client starts,
// start the client, and count completions on a subscription channel, because
// a completed event is only emitted after the completer has persisted the
// job's final state, whereas counting in the worker would stop the clock
// before completions are written.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

// Config is one benchmark run's settings.
type Config struct {
	Jobs    int    // jobs to insert and burn down
	Workers int    // River QueueConfig.MaxWorkers for the default queue
	DBPath  string // SQLite file; must not exist yet ("" means a fresh temp file)

	// InsertBatch is how many jobs go into one InsertMany call (riverbench
	// uses 5,000).
	InsertBatch int

	// FetchCooldown and FetchPollInterval are River's two knobs with the most
	// effect on throughput. The defaults (2ms/20ms) are the values riverbench
	// settled on; River's own defaults (100ms/1s) would make this a strawman.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration

	// Work is how long each job takes, waiting as a job waits on a
	// provider (Postgres mode, both sides; 0 = a no-op). With it the
	// workers, not the machine's cores, bound a process's rate, and the
	// matrix shows whether throughput grows with worker processes.
	Work time.Duration
	// CountInDB makes the Postgres parent find the end of a burn-down by
	// counting completed jobs in the database every 10 ms, as it did until
	// session 22. By default each worker process reports the jobs it has
	// completed (after their commit) on stdout, and the database is
	// counted once, after the clock stops, to check them: the 10 ms
	// count(*) over a table filling with completed jobs cost the database
	// 10-18 µs a job, more on edgepipe's wider jobs table than on
	// river_job, and took it from the queues being measured.
	CountInDB bool

	// PollOnly disables riversqlite's emulated LISTEN (which polls a
	// notification table on the one shared connection every 50ms).
	PollOnly bool

	// StmtCache is mattn/go-sqlite3's per-connection prepared-statement cache
	// size (_stmt_cache_size; 0 = off, the driver's default). riversqlite
	// v0.51.2 completes jobs one row at a time with a large UPDATE ...
	// RETURNING, and without the cache SQLite re-parses it for every job:
	// on this machine that alone caps burn-down near 2,500-2,700 jobs/s
	// instead of 11,000-15,000, so the default is on to keep the reference
	// strong.
	StmtCache int

	// WaitQuiet, when positive, delays the run (up to this long) until a
	// one-second window in which other processes use under quietCores, so
	// repeated runs on a shared machine measure River rather than neighbours.
	WaitQuiet time.Duration

	// Timeout bounds the whole run so a stalled client cannot hang CI.
	Timeout time.Duration

	Logger *slog.Logger
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	switch {
	case c.Jobs < 1:
		return errors.New("jobs must be at least 1")
	case c.Workers < 1 || c.Workers > 10_000:
		return errors.New("workers must be between 1 and 10000 (River's MaxWorkers limit)")
	case c.InsertBatch < 1:
		return errors.New("insert batch must be at least 1")
	case c.FetchCooldown < river.FetchCooldownMin:
		return fmt.Errorf("fetch cooldown must be at least %s", river.FetchCooldownMin)
	case c.FetchPollInterval < river.FetchPollIntervalMin:
		return fmt.Errorf("fetch poll interval must be at least %s", river.FetchPollIntervalMin)
	case c.StmtCache < 0:
		return errors.New("stmt cache must not be negative")
	case c.WaitQuiet < 0:
		return errors.New("wait-quiet must not be negative")
	case c.Timeout <= 0:
		return errors.New("timeout must be positive")
	case c.Logger == nil:
		return errors.New("logger is required")
	}
	return nil
}

// Result holds the two measured phases.
type Result struct {
	Jobs        int
	Insert      time.Duration // all InsertMany calls, client not yet started
	BurnDown    time.Duration // client.Start returned -> last completed event
	Observed    int           // distinct jobs seen completing on the subscription
	Completed   int           // rows in state=completed afterwards (sanity check)
	OthersCores float64       // cores other processes used during burn-down (-1: unknown)
	JournalMode string
	Synchronous int
}

func main() {
	var cfg Config
	flag.IntVar(&cfg.Jobs, "jobs", 20_000, "number of no-op jobs to insert and burn down")
	flag.IntVar(&cfg.Workers, "workers", 100, "River MaxWorkers for the default queue")
	flag.StringVar(&cfg.DBPath, "db", "", "SQLite file to create (must not exist); default: a fresh temp file, removed afterwards")
	flag.IntVar(&cfg.InsertBatch, "insert-batch", 5_000, "jobs per InsertMany call")
	flag.DurationVar(&cfg.FetchCooldown, "fetch-cooldown", 2*time.Millisecond, "River FetchCooldown")
	flag.DurationVar(&cfg.FetchPollInterval, "fetch-poll-interval", 20*time.Millisecond, "River FetchPollInterval")
	flag.DurationVar(&cfg.Work, "work", 0, "Postgres mode: how long each job waits before it completes, on both sides (0 = no-op jobs)")
	flag.BoolVar(&cfg.PollOnly, "poll-only", false, "River PollOnly (skip riversqlite's emulated LISTEN)")
	flag.IntVar(&cfg.StmtCache, "stmt-cache", 64, "mattn/go-sqlite3 _stmt_cache_size (prepared statements kept per connection; 0 = off, the driver's default)")
	flag.DurationVar(&cfg.WaitQuiet, "wait-quiet", 0, "before running, wait up to this long for a 1s window where other processes use < 0.15 cores (0 = don't wait)")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "abort the run after this long")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	verbose := flag.Bool("v", false, "log River at info level and print the pragmas in force to stderr")
	pgURL := flag.String("pg", "", "Postgres mode: a postgres:// URL of a database on a server where run databases may be created; compares edgepipe with River (riverpgxv5)")
	procs := flag.String("procs", "1,2,4", "Postgres mode: worker process counts")
	runs := flag.Int("runs", 1, "Postgres mode: alternating runs per process count")
	childSide := flag.String("child", "", "internal: run as a Postgres worker process of this side (edgepipe|river)")
	childURL := flag.String("child-url", "", "internal: the child's database URL")
	childProfile := flag.String("child-cpuprofile", "", "Postgres mode: every worker process writes a CPU profile to FILE.<side>.<pid>")
	flag.BoolVar(&cfg.CountInDB, "count-in-db", false, "Postgres mode: find the end of a burn-down by counting completed jobs in the database every 10ms (the method until session 22), instead of the workers' reports")
	analyze := flag.Bool("pg-analyze", false, "Postgres mode: ANALYZE each side's fresh database after the insert, before the clock starts (planner statistics, as a database in service has)")
	flag.Parse()

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "riverref:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "riverref:", err)
			os.Exit(1)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}

	if *childSide != "" || *pgURL != "" {
		if err := runPG(ctx, &cfg, *pgURL, *procs, *runs, *childSide, *childURL, *childProfile, *analyze); err != nil {
			fmt.Fprintln(os.Stderr, "riverref:", err)
			pprof.StopCPUProfile()
			os.Exit(1)
		}
		return
	}
	res, err := Run(ctx, &cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "riverref:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	if *verbose {
		fmt.Fprintf(os.Stderr, "pragmas: journal_mode=%s synchronous=%d; workers=%d fetch_cooldown=%s fetch_poll_interval=%s poll_only=%t stmt_cache=%d; completed rows=%d; other processes used %.2f cores during burn-down\n",
			res.JournalMode, res.Synchronous, cfg.Workers, cfg.FetchCooldown, cfg.FetchPollInterval, cfg.PollOnly, cfg.StmtCache, res.Completed, res.OthersCores)
	}
	printResult(os.Stdout, res)
}

func printResult(w io.Writer, r *Result) {
	fmt.Fprintf(w, "river insert: %d jobs in %.3fs = %.0f jobs/s\n", r.Jobs, r.Insert.Seconds(), float64(r.Jobs)/r.Insert.Seconds())
	fmt.Fprintf(w, "river burn-down: %d jobs in %.3fs = %.0f jobs/s\n", r.Jobs, r.BurnDown.Seconds(), float64(r.Jobs)/r.BurnDown.Seconds())
}

// openDB opens the SQLite file the way River's own test helpers do (WAL,
// one connection) plus synchronous=NORMAL.
//
// Pragmas, set per connection through mattn/go-sqlite3 DSN parameters:
//   - journal_mode=WAL: River's helpers call this essential to avoid
//     intermittent SQLITE_BUSY, and it is the fast mode anyway.
//   - synchronous=NORMAL: in WAL this fsyncs only at checkpoints, not on every
//     commit; it matches what edgepipe's own queue uses, so the comparison is
//     about queue design, not durability settings.
//   - busy_timeout=5000: only a safety net; with one connection nothing in
//     this process contends for the lock.
//   - _stmt_cache_size (driver-side, not a pragma): see Config.StmtCache.
//
// SetMaxOpenConns(1) follows riversqlite's package doc: River runs many
// internal operations concurrently, and with more connections SQLite answers
// "database is locked (SQLITE_BUSY)".
func openDB(path string, stmtCache int) (*sql.DB, error) {
	dsn := fmt.Sprintf("file:%s?_journal_mode=WAL&_synchronous=NORMAL&_busy_timeout=5000&_stmt_cache_size=%d", path, stmtCache)
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	db.SetMaxOpenConns(1)
	// Keep the one connection forever: reopening would re-run the pragmas and
	// drop SQLite's page cache mid-run.
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}

type noopArgs struct {
	Num int `json:"num"`
}

func (noopArgs) Kind() string { return "riverref_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	work time.Duration // how long a job waits (Config.Work)
}

func (w *noopWorker) Work(ctx context.Context, _ *river.Job[noopArgs]) error {
	return wait(ctx, w.work)
}

// wait returns after d, or with ctx's error when it ends first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run performs one insert + burn-down measurement on a fresh database.
func Run(ctx context.Context, cfg *Config) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	if cfg.WaitQuiet > 0 {
		if err := waitQuiet(ctx, cfg.WaitQuiet); err != nil {
			cfg.Logger.WarnContext(ctx, "machine never went quiet; measuring anyway", "err", err)
		}
	}

	path, removeDir, err := benchDBPath(cfg.DBPath)
	if err != nil {
		return nil, err
	}
	defer removeDir()

	db, err := openDB(path, cfg.StmtCache)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close db: %w", cerr)
		}
	}()

	res = &Result{Jobs: cfg.Jobs}
	if res.JournalMode, res.Synchronous, err = checkPragmas(ctx, db); err != nil {
		return nil, err
	}
	client, err := newRiverClient(ctx, db, cfg)
	if err != nil {
		return nil, err
	}

	// Subscribe before Start so no completion can be missed; the channel holds
	// every job so a slow reader can never make River drop events.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: cfg.Jobs + 1,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()

	if res.Insert, err = insertJobs(ctx, client, cfg.Jobs, cfg.InsertBatch); err != nil {
		return nil, err
	}

	if err := client.Start(ctx); err != nil {
		return nil, fmt.Errorf("start client: %w", err)
	}
	snapBefore, errBefore := takeCPUSnapshot()
	burnStart := time.Now() // after Start returns, as riverbench does
	defer func() {
		stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer stopCancel()
		if serr := client.Stop(stopCtx); serr != nil && err == nil {
			err = fmt.Errorf("stop client: %w", serr)
		}
	}()
	observed, err := awaitCompleted(ctx, events, cfg.Jobs)
	if err != nil {
		return nil, err
	}
	res.BurnDown = time.Since(burnStart)
	snapAfter, errAfter := takeCPUSnapshot()
	res.OthersCores = othersCores(snapBefore, snapAfter, errBefore, errAfter)
	res.Observed = observed

	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&n); err != nil {
		return nil, fmt.Errorf("count completed: %w", err)
	}
	res.Completed = n
	if n != cfg.Jobs {
		return nil, fmt.Errorf("%d jobs completed in the database, want %d", n, cfg.Jobs)
	}
	return res, nil
}

// benchDBPath is the database file of a run: path when given (it must not
// exist), else a file in a new temporary directory that remove deletes.
func benchDBPath(path string) (string, func(), error) {
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			// A reused file would carry old jobs and a grown WAL, so the numbers
			// would not be comparable; refuse rather than delete someone's file.
			return "", nil, fmt.Errorf("db %s already exists; give a new path", path)
		}
		return path, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "riverref-*")
	if err != nil {
		return "", nil, fmt.Errorf("temp dir: %w", err)
	}
	return filepath.Join(dir, "river.sqlite3"), func() { os.RemoveAll(dir) }, nil
}

// checkPragmas reads back the pragmas openDB asked for and refuses a
// connection without them.
func checkPragmas(ctx context.Context, db *sql.DB) (journalMode string, synchronous int, err error) {
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&journalMode); err != nil {
		return "", 0, fmt.Errorf("read journal_mode: %w", err)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&synchronous); err != nil {
		return "", 0, fmt.Errorf("read synchronous: %w", err)
	}
	if journalMode != "wal" || synchronous != 1 {
		return "", 0, fmt.Errorf("pragmas not applied: journal_mode=%s synchronous=%d", journalMode, synchronous)
	}
	return journalMode, synchronous, nil
}

// newRiverClient migrates River's schema into db and makes a client with
// the no-op worker.
func newRiverClient(ctx context.Context, db *sql.DB, cfg *Config) (*river.Client[*sql.Tx], error) {
	driver := riversqlite.New(db)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("new migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPollInterval,
		Logger:            cfg.Logger,
		PollOnly:          cfg.PollOnly,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers:           workers,
	})
	if err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	return client, nil
}

// insertJobs inserts jobs no-op jobs in batches of batch and returns how
// long that took.
func insertJobs(ctx context.Context, client *river.Client[*sql.Tx], jobs, batch int) (time.Duration, error) {
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

// awaitCompleted waits for jobs distinct jobs to complete. Distinct IDs
// rather than a counter, so a duplicated event could never stop the clock
// early.
func awaitCompleted(ctx context.Context, events <-chan *river.Event, jobs int) (int, error) {
	seen := make(map[int64]struct{}, jobs)
	for len(seen) < jobs {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("burn-down stalled after %d of %d jobs: %w", len(seen), jobs, ctx.Err())
		case ev, ok := <-events:
			if !ok {
				return 0, fmt.Errorf("subscription closed after %d of %d jobs", len(seen), jobs)
			}
			if ev.Kind != river.EventKindJobCompleted {
				return 0, fmt.Errorf("job %d ended as %s, want completed", ev.Job.ID, ev.Kind)
			}
			seen[ev.Job.ID] = struct{}{}
		}
	}
	return len(seen), nil
}
