package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"edgepipe/internal/app"
	"edgepipe/storage/s3"
)

func init() {
	register("bench", "benchmarks: upload (S3 streaming vs minio-go), api (durable submissions vs bare echo, with wrk), render (end to end vs the same ffmpeg work by hand)", bench)
}

func bench(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Println(`Usage: edgepipe bench upload [--mib 1024] [--compare=true]
       edgepipe bench api [--duration 10s] [--connections 64] [--threads 2] [--cpuprofile FILE] [--memprofile FILE]
       edgepipe bench render [N] [--workers 2] [--scenes 4] [--stages] [--cpuprofile FILE]

upload  streams --mib MiB of unknown length, generated on the fly, through
        the S3 driver (EDGEPIPE_S3_* settings) and prints MiB/s and peak RSS.
        With --compare (default) it also runs the reference — minio-go
        PutObject with size -1 and 16 MiB parts — each in its own process,
        and prints the ratio.

api     runs wrk (Debian package wrk) against the real API (a fresh SQLite
        database in a temporary directory, or the Postgres database of
        EDGEPIPE_DATABASE_URL when set; API only, no workers): every
        request a POST /v1/jobs with its own Idempotency-Key, so every 202 is a
        committed job. Then the same load against a bare echo handler that
        answers 202 without doing anything, in the same run. Prints both
        rates, p50/p99 latency, the ratio, and checks the database gained
        exactly as many jobs as 202s were answered.

render  runs N (default 1) distinct storyboards end to end through a real
        deployment in this process (HTTP API, --workers workers, SQLite and
        a local object store in a temporary directory, in-process fake
        providers, real ffmpeg), from the first submission to the last job
        succeeded. Then the same ffmpeg work by hand in the same run: each
        job's stored scene media made into clips by the same renderer (the
        same ffmpeg commands), clips in parallel up to the cores, joined
        into a file, --workers jobs at once. Prints both times, the CPU
        each side used (ffmpeg's, and this process's own: the deployment,
        with the fake providers, or the by-hand loop) and the ratio (goal:
        1.15x for one job, 1.1x for 20 jobs on 2 workers).
        With --stages it also prints where the attempts' time went: the
        count and summed time of their OpenTelemetry spans per name
        (attempt, stages, units, provider calls, uploads, ffmpeg
        processes), recorded in memory. --cpuprofile writes a CPU profile
        of this process from the deployment's start-up to the last
        success (api: of the durable run). --memprofile (api) writes the
        process's allocation profile after the durable run.

The queue burn-down benchmark is a Go benchmark:
  go test ./storage/sqlite -run '^$' -bench BurnDown -benchtime 20000x`)
		if len(args) == 0 {
			return errExit
		}
		return nil
	}
	switch args[0] {
	case "upload":
		return benchUpload(ctx, args[1:])
	case "api":
		return benchAPI(ctx, args[1:])
	case "render":
		return benchRender(ctx, args[1:])
	}
	return fmt.Errorf("unknown benchmark %q (edgepipe bench --help)", args[0])
}

type uploadResult struct {
	Client  string  `json:"client"`
	MiB     int     `json:"mib"`
	MiBps   float64 `json:"mib_per_s"`
	PeakRSS int64   `json:"peak_rss_bytes"`
	// PeakAnon is the high-water mark of the anonymous resident memory
	// (RssAnon) sampled during the run: what the upload holds, apart from
	// the executable's mapped pages.
	PeakAnon int64 `json:"peak_anon_bytes"`
	// BaseRSS is the resident set just before the upload started.
	BaseRSS int64 `json:"base_rss_bytes"`
}

func benchUpload(ctx context.Context, args []string) error {
	fs := newFlags("bench upload", "[--mib 1024] [--compare=true]", "Streams generated data through the S3 driver; see edgepipe bench --help.")
	mib := fs.Int("mib", 1024, "MiB to stream")
	compare := fs.Bool("compare", true, "also run the minio-go reference, each client in its own process")
	only := fs.String("only", "", "internal: run one client (edgepipe | minio-go) in this process and print JSON")
	memlimit := fs.Int("memlimit-mib", 0, "soft Go memory limit for the edgepipe run only (like GOMEMLIMIT; 0 = runtime default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	if cfg.Store != "s3" {
		return fmt.Errorf("EDGEPIPE_STORE: bench upload needs s3 (with EDGEPIPE_S3_ENDPOINT, _BUCKET, _ACCESS_KEY, _SECRET_KEY)")
	}
	if *only != "" {
		var r s3.BenchResult
		base := procStatus("VmRSS")
		stopSampling := sampleAnon()
		key := fmt.Sprintf("bench/%s-%d-%d.bin", *only, *mib, os.Getpid())
		switch *only {
		case "edgepipe":
			if *memlimit > 0 {
				debug.SetMemoryLimit(int64(*memlimit) << 20)
			}
			// Only the object store: the benchmark measures the upload path.
			objs, err := app.OpenObjects(ctx, cfg, log)
			if err != nil {
				return err
			}
			st := objs.(*s3.Store)
			if r, err = s3.BenchUpload(ctx, st, key, *mib); err != nil {
				return err
			}
			_ = st.Delete(ctx, key)
		case "minio-go":
			sc, err := cfg.S3Settings(log)
			if err != nil {
				return err
			}
			if r, err = s3.BenchMinioGo(ctx, sc.Endpoint, sc.AccessKey, sc.SecretKey, sc.Bucket, key, *mib, 16); err != nil {
				return err
			}
		default:
			return fmt.Errorf("--only must be edgepipe or minio-go")
		}
		return json.NewEncoder(os.Stdout).Encode(uploadResult{Client: *only, MiB: *mib, MiBps: r.MiBps,
			PeakRSS: procStatus("VmHWM"), PeakAnon: stopSampling(), BaseRSS: base})
	}
	clients := []string{"edgepipe"}
	if *compare {
		clients = append(clients, "minio-go")
	}
	res := map[string]uploadResult{}
	for _, c := range clients {
		out, err := exec.CommandContext(ctx, os.Args[0], "bench", "upload", "--mib", strconv.Itoa(*mib), "--only", c,
			"--memlimit-mib", strconv.Itoa(*memlimit)).Output()
		if err != nil {
			return fmt.Errorf("%s run: %w", c, err)
		}
		var r uploadResult
		if err := json.Unmarshal(out, &r); err != nil {
			return fmt.Errorf("%s run printed %q: %w", c, out, err)
		}
		res[c] = r
		fmt.Printf("%-9s %d MiB: %.1f MiB/s, peak RSS %.1f MiB (anonymous %.1f MiB; %.1f MiB before the upload)\n",
			c, r.MiB, r.MiBps, mibOf(r.PeakRSS), mibOf(r.PeakAnon), mibOf(r.BaseRSS))
	}
	if *compare {
		fmt.Printf("edgepipe / minio-go throughput: %.2f\n", res["edgepipe"].MiBps/res["minio-go"].MiBps)
	}
	return nil
}

func mibOf(b int64) float64 { return float64(b) / (1 << 20) }

// procStatus reads one "kB" field of /proc/self/status (VmHWM: the peak
// resident set; VmRSS; RssAnon: its anonymous part, the heap and stacks,
// without the executable's mapped pages), in bytes; 0 where there is none.
func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// sampleAnon samples RssAnon every 5 ms until the returned function is
// called, which returns the highest sample. The kernel keeps no
// high-water mark of it (VmHWM includes the executable's mapped pages,
// which depend on the binary's size and the page cache, not on the
// upload).
func sampleAnon() (stop func() int64) {
	done := make(chan struct{})
	peak := make(chan int64)
	go func() {
		var hi int64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			hi = max(hi, procStatus("RssAnon"))
			select {
			case <-done:
				peak <- max(hi, procStatus("RssAnon"))
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 { close(done); return <-peak }
}

// startCPUProfile starts a CPU profile of this process into path (none
// when path is empty); stop ends it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// writeAllocProfile writes the allocs profile (every sampled allocation
// since the process started) to path; an empty path writes nothing.
func writeAllocProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
