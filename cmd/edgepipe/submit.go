package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"edgepipe/api"
	"edgepipe/client"
	"edgepipe/pipeline"
	"edgepipe/render"
)

func init() {
	register("submit", "submit a storyboard JSON file as a job; --wait follows it to the end and checks the MP4",
		func(ctx context.Context, args []string) error { return osEnv().submit(ctx, args) })
}

const submitHelp = `
Submits FILE (a storyboard: the body of POST /v1/jobs; "-" reads stdin) and
prints the job id on stdout.

The Idempotency-Key is --key, or else derived from the request's content, so
running the same submit again returns the same job ("replayed") instead of
rendering it twice. Pass a new --key to render the same storyboard again.

--id sets the job's instance_id, whose prefix picks the workflow version
(v2-my-job runs on v2; no prefix runs on v1).

With --wait, follows the job's event stream from its first event (a
progress bar on a terminal, plain lines otherwise; reconnecting if the
connection drops) until it succeeds, fails or needs an operator. Times are
the job's own, taken from its events and counted from its creation, so
waiting on a job that finished long ago replays its real history. On
success it prints the result, and when ffprobe is installed (or --out is
given) downloads the MP4 (default ./<id>.mp4), checks its SHA-256 and prints
what ffprobe sees.

Exit status:
  0  submitted (without --wait), or the job succeeded (with --wait)
  1  any other error: server unreachable, download or ffprobe failed,
     interrupted
  2  usage error
  3  the job failed
  4  the job needs review: an operator must retry or fail it (edgepipe review)
  5  the job was dead-lettered (edgepipe dlq list)
  6  the job was canceled
  7  timeout: --timeout passed first; the job keeps running
  8  refused: the server refused the submission (invalid storyboard or id,
     Idempotency-Key reused for another request, bad token: a 4xx answer)`

// maxStoryboardFile bounds what submit reads; the server's default limit
// is 1 MiB, so anything larger is refused there anyway.
const maxStoryboardFile = 4 << 20

// idempotencyKeyPrefix starts the keys submit derives, so they are told
// apart from keys people choose.
const idempotencyKeyPrefix = "edgepipe-cli-sha256:"

type submitOpts struct {
	file    string
	wait    bool
	key     string
	id      string
	out     string
	json    bool
	timeout time.Duration
}

func (e *cliEnv) submit(ctx context.Context, args []string) error {
	o, cf, err := e.parseSubmit(args)
	if err != nil {
		return err
	}
	body, scenes, err := e.readStoryboard(o.file, o.id)
	if err != nil {
		return err
	}
	if o.key == "" {
		o.key = derivedKey(body)
	} else if len(o.key) > api.MaxIdempotencyKeyLen || strings.IndexFunc(o.key, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		// The server's rule; checked here because net/http would refuse a
		// control character with a confusing error of its own.
		return fmt.Errorf("%w: --key must be 1 to %d printable ASCII characters", errUsage, api.MaxIdempotencyKeyLen)
	}
	c, err := e.newClient(cf, false)
	if err != nil {
		return err
	}
	sub, err := c.Submit(ctx, o.key, body)
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status < 500 {
			return &codedError{code: exitRefused, err: err}
		}
		return err
	}
	job, replayed := sub.Job, sub.Replayed
	if !o.json {
		id, st := clean(job.ID, 64), clean(string(job.Status), 32)
		fmt.Fprintln(e.stdout, id)
		if replayed {
			fmt.Fprintf(e.stderr, "replayed: job %s was already submitted with this key; it is %s\n", id, st)
		} else {
			fmt.Fprintf(e.stderr, "submitted: job %s on %s, %s\n", id, firstNonEmpty(clean(job.Version, 16), "no version"), st)
		}
	}
	out := submitOutput{Job: job, Replayed: replayed}
	if !o.wait {
		if o.json {
			return writeJSON(e.stdout, out)
		}
		return nil
	}
	return e.waitSubmitted(ctx, c, o, out, scenes)
}

// parseSubmit reads submit's flags and FILE.
func (e *cliEnv) parseSubmit(args []string) (submitOpts, clientFlags, error) {
	fs := newFlags("submit", "FILE [--wait] [--key KEY] [--id INSTANCE_ID] [--out FILE.mp4] [--json]", submitHelp)
	fs.SetOutput(e.stderr)
	cf := addClientFlags(fs, false)
	var o submitOpts
	fs.BoolVar(&o.wait, "wait", false, "follow the job until it settles; exit 0 only if it succeeded")
	fs.StringVar(&o.key, "key", "", "Idempotency-Key (default: derived from the request's content)")
	fs.StringVar(&o.id, "id", "", "instance_id of the job; its prefix (v1-, v2-) picks the workflow version")
	fs.StringVar(&o.out, "out", "", "with --wait: where to save the MP4 (default ./<id>.mp4 when ffprobe is installed)")
	fs.BoolVar(&o.json, "json", false, "print the job (and, with --wait, the download and ffprobe result) as JSON")
	fs.DurationVar(&o.timeout, "timeout", 0, "with --wait: give up waiting after this long (0 waits forever; the job keeps running)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return o, cf, err
	}
	if err := wantArgs(fs, pos, "FILE"); err != nil {
		return o, cf, err
	}
	o.file = pos[0]
	if o.out != "" && !o.wait {
		return o, cf, fmt.Errorf("%w: --out needs --wait", errUsage)
	}
	return o, cf, nil
}

// waitSubmitted follows the submitted job (submit --wait) until it settles
// or --timeout, downloads a success and prints the outcome.
func (e *cliEnv) waitSubmitted(ctx context.Context, c *apiClient, o submitOpts, out submitOutput, scenes int) error {
	job := out.Job
	wctx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	// The stream starts at the job's first event, so the tracker starts
	// from nothing and draws the job's real history, with the times its
	// events carry, whether the job is live or long finished.
	tr := newTracker(e.stderr, e.tty, job, scenes)
	final, err := c.Follow(wctx, job.ID, client.FollowOptions{
		OnEvent:     tr.event,
		OnJob:       tr.observe,
		OnReconnect: func(error) { tr.note("reconnecting") },
	})
	tr.finish()
	if err != nil {
		id := clean(job.ID, 64)
		if ctx.Err() == nil && wctx.Err() != nil {
			return &codedError{code: exitTimeout, err: fmt.Errorf("gave up waiting after %s; job %s keeps running (edgepipe status %s)", o.timeout, id, id)}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted; job %s keeps running (edgepipe status %s)", id, id)
		}
		return err
	}
	job = final
	out.Job = job
	if job.Status == pipeline.StatusSucceeded {
		if err := c.fetchResult(ctx, &out, o.out); err != nil {
			return err
		}
	}
	if o.json {
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		printOutcome(e.stdout, out)
	}
	return settledError(job)
}

// submitOutput is what submit --json prints.
type submitOutput struct {
	Job      api.JobResource `json:"job"`
	Replayed bool            `json:"replayed"`
	// File is where the MP4 was saved (--wait, succeeded, downloaded).
	File  string        `json:"file,omitempty"`
	Probe *probeSummary `json:"probe,omitempty"`
	Notes []string      `json:"notes,omitempty"`
}

// readStoryboard reads FILE (or stdin), checks that it is one JSON object
// and sets instance_id when --id is given. The body sent is the object
// re-encoded canonically (keys sorted at every level, no white space,
// numbers as written), so the derived key ignores formatting. It also
// returns the number of scenes, the progress bar's total until the server
// reports one.
func (e *cliEnv) readStoryboard(file, id string) ([]byte, int, error) {
	var r io.Reader
	name := file
	if file == "-" {
		r, name = e.stdin, "stdin"
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, 0, err
		}
		defer f.Close()
		r = f
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxStoryboardFile+1))
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", name, err)
	}
	if len(raw) > maxStoryboardFile {
		return nil, 0, fmt.Errorf("%s: larger than %d bytes", name, maxStoryboardFile)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	err = dec.Decode(&obj)
	if err == nil && obj == nil {
		err = errors.New("null")
	}
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("data after the object")
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s: not a JSON object: %w", name, err)
	}
	if id != "" {
		obj["instance_id"] = id
	}
	scenes, _ := obj["scenes"].([]any) // the server judges the content
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", name, err)
	}
	return body, len(scenes), nil
}

// derivedKey is the Idempotency-Key of a submit without --key: the same
// request always gets the same key, so a repeated submit is a replay.
func derivedKey(body []byte) string {
	sum := sha256.Sum256(body)
	return idempotencyKeyPrefix + hex.EncodeToString(sum[:])
}

// fetchResult downloads the MP4 and probes it. Without ffprobe the download
// happens only when --out asked for it.
func (c *apiClient) fetchResult(ctx context.Context, out *submitOutput, dest string) error {
	res := out.Job.Result
	if res == nil {
		return fmt.Errorf("job %s succeeded but has no result", out.Job.ID)
	}
	ffprobe, lookErr := exec.LookPath(c.ffprobe)
	if lookErr != nil && dest == "" {
		out.Notes = append(out.Notes, "ffprobe not found ("+c.ffprobe+"); not downloading (pass --out to save the MP4)")
		return nil
	}
	if dest == "" {
		dest = safeFileName(out.Job.ID) + ".mp4"
	}
	if err := c.SaveResult(ctx, out.Job.ID, dest, res.SHA256); err != nil {
		return fmt.Errorf("download result: %w", err)
	}
	out.File = dest
	if lookErr != nil {
		out.Notes = append(out.Notes, "ffprobe not found ("+c.ffprobe+"); not probing")
		return nil
	}
	p, err := render.Probe(ctx, ffprobe, dest)
	if err != nil {
		return fmt.Errorf("ffprobe %s: %w", dest, err)
	}
	out.Probe = summarize(p)
	return nil
}

// safeFileName keeps an id from the server usable as a file name in the
// current directory.
func safeFileName(id string) string {
	ok := id != "" && len(id) <= 64 && strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) < 0 && id[0] != '-'
	if !ok {
		return "result"
	}
	return id
}

// probeSummary is the part of an ffprobe result submit shows.
type probeSummary struct {
	Format     string          `json:"format"`
	DurationMS int64           `json:"duration_ms"`
	Bytes      int64           `json:"bytes"`
	BitRate    int64           `json:"bit_rate"`
	Streams    []streamSummary `json:"streams"`
}

type streamSummary struct {
	Index      int    `json:"index"`
	Type       string `json:"type"`
	Codec      string `json:"codec"`
	Profile    string `json:"profile,omitempty"`
	Width      int    `json:"width,omitempty"`
	Height     int    `json:"height,omitempty"`
	PixFmt     string `json:"pix_fmt,omitempty"`
	FrameRate  string `json:"frame_rate,omitempty"`
	SampleRate int    `json:"sample_rate,omitempty"`
	Channels   int    `json:"channels,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Frames     int64  `json:"frames"`
}

func summarize(p render.ProbeResult) *probeSummary {
	s := &probeSummary{Format: p.FormatName, DurationMS: p.Duration.Milliseconds(), Bytes: p.Size, BitRate: p.BitRate}
	for _, st := range p.Streams {
		ss := streamSummary{Index: st.Index, Type: st.CodecType, Codec: st.CodecName, DurationMS: st.Duration.Milliseconds(), Frames: st.Frames}
		switch st.CodecType {
		case "video":
			ss.Profile, ss.Width, ss.Height, ss.PixFmt, ss.FrameRate = st.Profile, st.Width, st.Height, st.PixFmt, st.FrameRate
		case "audio":
			ss.Profile, ss.SampleRate, ss.Channels = st.Profile, st.SampleRate, st.Channels
		}
		s.Streams = append(s.Streams, ss)
	}
	return s
}

// printOutcome prints a settled job's result for people. The time is the
// job's own, from its creation to the status it settled in, not how long
// this command waited: a replay of a finished job reports when it really
// ran.
func printOutcome(w io.Writer, out submitOutput) {
	j := out.Job
	took := max(j.StatusChangedAt.Sub(j.CreatedAt), 0)
	fmt.Fprintf(w, "%s %s after %s (attempts %d)\n", clean(j.ID, 64), clean(string(j.Status), 32), took.Round(100*time.Millisecond), j.Attempts)
	if j.Status != pipeline.StatusSucceeded || j.Result == nil {
		return
	}
	r := j.Result
	fmt.Fprintf(w, "  result    %s\n", clean(r.Key, 300))
	fmt.Fprintf(w, "  bytes     %d\n", r.Bytes)
	fmt.Fprintf(w, "  sha256    %s\n", clean(r.SHA256, 64))
	fmt.Fprintf(w, "  duration  %s\n", msString(int64(r.DurationMS)))
	if out.File != "" {
		fmt.Fprintf(w, "  saved     %s\n", out.File)
	}
	for _, n := range out.Notes {
		fmt.Fprintf(w, "  note      %s\n", n)
	}
	if out.Probe != nil {
		writeProbe(w, *out.Probe)
	}
}

// writeProbe prints an ffprobe summary:
//
//	ffprobe   mov,mp4,m4a,3gp,3g2,mj2, 5.040s, 108553 bytes, 172 kb/s
//	  #0 video    h264 (High) 640x360 yuv420p 25/1 fps, 5.000s, 125 frames
//	  #1 audio    aac (LC) 24000 Hz 1 ch, 5.040s, 238 frames
func writeProbe(w io.Writer, p probeSummary) {
	fmt.Fprintf(w, "  ffprobe   %s, %s, %d bytes, %d kb/s\n", clean(p.Format, 100), msString(p.DurationMS), p.Bytes, p.BitRate/1000)
	for _, s := range p.Streams {
		var b strings.Builder
		fmt.Fprintf(&b, "    #%d %-8s %s", s.Index, clean(s.Type, 20), clean(s.Codec, 40))
		if s.Profile != "" {
			fmt.Fprintf(&b, " (%s)", clean(s.Profile, 40))
		}
		switch s.Type {
		case "video":
			fmt.Fprintf(&b, " %dx%d %s %s fps", s.Width, s.Height, clean(s.PixFmt, 20), clean(s.FrameRate, 20))
		case "audio":
			fmt.Fprintf(&b, " %d Hz %d ch", s.SampleRate, s.Channels)
		}
		fmt.Fprintf(&b, ", %s", msString(s.DurationMS))
		if s.Frames >= 0 {
			fmt.Fprintf(&b, ", %d frames", s.Frames)
		}
		fmt.Fprintln(w, b.String())
	}
}

func msString(ms int64) string { return fmt.Sprintf("%.3fs", float64(ms)/1000) }

// settledError is nil for a succeeded job and says why otherwise.
func settledError(j api.JobResource) error {
	if j.Status == pipeline.StatusSucceeded {
		return nil
	}
	return &jobError{ID: j.ID, Status: j.Status, Err: j.Error}
}

// jobError is a job that settled without succeeding.
type jobError struct {
	ID     string
	Status pipeline.Status
	Err    *api.JobError
}

// ExitCode is the exit status of submit --wait for the job's status.
func (e *jobError) ExitCode() int {
	switch e.Status {
	case pipeline.StatusFailed:
		return exitFailed
	case pipeline.StatusNeedsReview:
		return exitNeedsReview
	case pipeline.StatusDeadLettered:
		return exitDeadLettered
	case pipeline.StatusCanceled:
		return exitCanceled
	}
	return exitError
}

func (e *jobError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s %s", clean(e.ID, 64), clean(strings.ReplaceAll(string(e.Status), "_", "-"), 32))
	if e.Err != nil && (e.Err.Code != "" || e.Err.Message != "") {
		b.WriteString(": ")
		b.WriteString(clean(firstNonEmpty(e.Err.Message, e.Err.Code), maxPartLen))
		if e.Err.Code != "" && e.Err.Message != "" {
			fmt.Fprintf(&b, " (%s)", clean(e.Err.Code, 64))
		}
	}
	switch e.Status {
	case pipeline.StatusNeedsReview:
		b.WriteString("; an operator must retry or fail it (edgepipe review)")
	case pipeline.StatusDeadLettered:
		b.WriteString("; see edgepipe dlq list")
	}
	return b.String()
}
