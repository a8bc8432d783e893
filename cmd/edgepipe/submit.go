package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"edgepipe/api"
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

With --wait, follows the job's event stream (a progress bar on a terminal,
plain lines otherwise; reconnecting if the connection drops) until it
succeeds, fails or needs an operator. On success it prints the result, and
when ffprobe is installed (or --out is given) downloads the MP4 (default
./<id>.mp4), checks its SHA-256 and prints what ffprobe sees. The exit status
is 0 only for a succeeded job.`

// maxStoryboardFile bounds what submit reads; the server's default limit
// is 1 MiB, so anything larger is refused there anyway.
const maxStoryboardFile = 4 << 20

// maxStreamFailures is how many connections in a row may end without an
// event before --wait gives up (about two minutes at the default pacing).
const maxStreamFailures = 20

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
		return err
	}
	if err := wantArgs(fs, pos, "FILE"); err != nil {
		return err
	}
	o.file = pos[0]
	if o.out != "" && !o.wait {
		return fmt.Errorf("%w: --out needs --wait", errUsage)
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
	hdr := http.Header{}
	hdr.Set(api.HeaderIdempotencyKey, o.key)
	var job api.JobResource
	resp, err := c.doJSON(ctx, http.MethodPost, c.endpoint("v1", "jobs"), hdr, body, &job)
	if err != nil {
		return err
	}
	replayed := resp.Header.Get(api.HeaderIdempotentReplayed) == "true"
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

	wctx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	started := e.now()
	tr := newTracker(e.stderr, e.tty, job, scenes, e.now)
	job, err = c.follow(wctx, job, tr)
	tr.finish()
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return fmt.Errorf("gave up waiting after %s; job %s keeps running (edgepipe status %s)", o.timeout, clean(job.ID, 64), clean(job.ID, 64))
		}
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted; job %s keeps running (edgepipe status %s)", clean(job.ID, 64), clean(job.ID, 64))
		}
		return err
	}
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
		printOutcome(e.stdout, out, e.now().Sub(started))
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

// follow reads the job's event stream until the job settles, reconnecting
// with Last-Event-ID whenever the stream ends early, and returns the job as
// it is then. The server closes the stream at a settled status; any other
// end is a drop.
func (c *client) follow(ctx context.Context, job api.JobResource, tr *tracker) (api.JobResource, error) {
	var last int64
	delay := c.env.reconnectDelay
	failures := 0
	for {
		settled, got, err := c.stream(ctx, job.ID, &last, tr)
		if ctx.Err() != nil {
			return job, ctx.Err()
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
			return job, err // 401, 404: reconnecting cannot help
		}
		// Whether the stream ended at a settled event or not (the server
		// restarted, a proxy cut it, or the job settled before we
		// connected and nothing was left after our cursor), the job
		// resource has the last word.
		j, gerr := c.getJob(ctx, job.ID)
		if gerr == nil {
			job = j
			if j.Status.Settled() {
				return j, nil
			}
			tr.observe(j)
		} else if settled || errors.As(gerr, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
			return job, gerr
		} else if err == nil {
			err = gerr
		}
		if got {
			failures, delay = 0, c.env.reconnectDelay
		} else {
			failures++
		}
		if failures >= maxStreamFailures {
			if err == nil {
				err = errors.New("the event stream keeps closing without news")
			}
			return job, fmt.Errorf("following job %s: %w", job.ID, err)
		}
		tr.note("reconnecting")
		select {
		case <-ctx.Done():
			return job, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, c.env.reconnectMax)
	}
}

// stream reads one connection of the event stream, resuming after *last.
// settled reports that an event moved the job to a settled status; got,
// that at least one event arrived.
func (c *client) stream(parent context.Context, id string, last *int64, tr *tracker) (settled, got bool, err error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	hdr := http.Header{}
	hdr.Set("Accept", "text/event-stream")
	if *last > 0 {
		hdr.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := c.request(ctx, http.MethodGet, c.endpoint("v1", "jobs", id, "events"), hdr, nil)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	// The server sends a comment at least every 15 s. A connection that
	// stays silent much longer died without a reset (a NAT or proxy lost
	// it): drop it and reconnect rather than wait forever.
	idle := time.AfterFunc(c.env.streamIdle, cancel)
	defer idle.Stop()
	sr := newSSEReader(&watchdogReader{r: resp.Body, idle: idle, d: c.env.streamIdle})
	for {
		ev, err := sr.next()
		if err != nil {
			switch {
			case errors.Is(err, io.EOF):
				err = nil
			case ctx.Err() != nil && parent.Err() == nil:
				err = errStreamSilent
			}
			return false, got, err
		}
		if n, perr := strconv.ParseInt(ev.id, 10, 64); perr == nil && n > *last {
			*last = n
		}
		if ev.data == "" {
			continue
		}
		var m api.EventMessage
		if json.Unmarshal([]byte(ev.data), &m) != nil {
			continue // not ours to judge; the job resource is the truth
		}
		got = true
		tr.event(m)
		if m.To.Settled() {
			return true, true, nil
		}
	}
}

// errStreamSilent: the event stream sent nothing, not even a keep-alive,
// for longer than the idle limit.
var errStreamSilent = errors.New("the event stream went silent")

// watchdogReader pushes the idle timer back whenever bytes arrive.
type watchdogReader struct {
	r    io.Reader
	idle *time.Timer
	d    time.Duration
}

func (w *watchdogReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.idle.Reset(w.d)
	}
	return n, err
}

// sseEvent is one dispatched Server-Sent Event.
type sseEvent struct {
	id, event, data string
}

// sseReader parses a text/event-stream (the WHATWG EventSource rules for
// the fields edgepipe sends: id, event, data, comments; retry is ignored
// because follow paces itself).
type sseReader struct {
	sc     *bufio.Scanner
	lastID string
}

// maxSSELine bounds one line of the stream; edgepipe's are far shorter.
const maxSSELine = 1 << 20

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxSSELine)
	return &sseReader{sc: sc}
}

// next returns the next event with data, or io.EOF when the stream ends.
// An event cut off by the end of the stream is dropped, as EventSource
// does: its id was never confirmed.
func (r *sseReader) next() (sseEvent, error) {
	var data strings.Builder
	var event string
	hasData := false
	id := r.lastID
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if !hasData {
				event = ""
				r.lastID = id
				continue
			}
			r.lastID = id
			return sseEvent{id: id, event: event, data: data.String()}, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := strings.Cut(line, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		switch field {
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "event":
			event = value
		case "id":
			if !strings.ContainsRune(value, 0) {
				id = value
			}
		}
	}
	if err := r.sc.Err(); err != nil {
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}

// fetchResult downloads the MP4 and probes it. Without ffprobe the download
// happens only when --out asked for it.
func (c *client) fetchResult(ctx context.Context, out *submitOutput, dest string) error {
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
	if err := c.download(ctx, out.Job.ID, res.SHA256, dest); err != nil {
		return err
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

// download saves GET /v1/jobs/{id}/result (following a redirect to a
// presigned URL) at dest, through a temporary file so dest is either the
// whole verified file or untouched.
func (c *client) download(ctx context.Context, id, wantSHA, dest string) error {
	resp, err := c.request(ctx, http.MethodGet, c.endpoint("v1", "jobs", id, "result"), nil, nil)
	if err != nil {
		return fmt.Errorf("download result: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download result: unexpected HTTP %d", resp.StatusCode)
	}
	dir := filepath.Dir(dest)
	tmp, err := os.CreateTemp(dir, ".edgepipe-download-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename this removes nothing
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), resp.Body); err != nil {
		tmp.Close()
		return fmt.Errorf("download result: %w", transportError(err))
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); wantSHA != "" && got != wantSHA {
		return fmt.Errorf("download result: SHA-256 %s does not match the job's %s", got, clean(wantSHA, 64))
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
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

// printOutcome prints a settled job's result for people.
func printOutcome(w io.Writer, out submitOutput, took time.Duration) {
	j := out.Job
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
		b.WriteString("; an operator must retry or fail it (/admin)")
	case pipeline.StatusDeadLettered:
		b.WriteString("; see edgepipe dlq list")
	}
	return b.String()
}

// tracker shows a job's progress from its events: a bar redrawn in place on
// a terminal, a line per change otherwise.
type tracker struct {
	w      io.Writer
	tty    bool
	now    func() time.Time
	start  time.Time
	id     string
	status pipeline.Status
	total  int
	done   int
	scenes map[int]bool
	stage  string // last finished stage of the current attempt
	extra  string // retry countdown, error code
	conn   string // connection trouble, until the next event
	last   string
	drawn  bool
}

func newTracker(w io.Writer, tty bool, j api.JobResource, scenes int, now func() time.Time) *tracker {
	t := &tracker{w: w, tty: tty, now: now, start: now(), id: clean(j.ID, 64), status: j.Status,
		total: scenes, done: j.Progress.UnitsDone, stage: j.Progress.Stage, scenes: map[int]bool{}}
	if j.Progress.UnitsTotal > 0 {
		t.total = j.Progress.UnitsTotal
	}
	return t
}

// detailInt reads a small non-negative number from an event's detail.
func detailInt(d map[string]any, k string) (int, bool) {
	var f float64
	switch v := d[k].(type) {
	case float64:
		f = v
	case int:
		f = float64(v)
	case json.Number:
		var err error
		if f, err = v.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if f < 0 || f > 1e6 || f != float64(int(f)) {
		return 0, false
	}
	return int(f), true
}

// event folds one event into the display.
func (t *tracker) event(m api.EventMessage) {
	t.conn = ""
	if n, ok := detailInt(m.Detail, "units_total"); ok && n > 0 {
		t.total = n
	}
	switch m.Kind {
	case pipeline.EventStatus, pipeline.EventCreated, pipeline.EventRedriven, pipeline.EventDecision:
		if m.To != "" {
			if m.To == pipeline.StatusRunning && t.status != pipeline.StatusRunning {
				t.stage, t.scenes = "", map[int]bool{} // a new attempt starts over
			}
			t.status = m.To
		}
		t.extra = ""
		if code, ok := m.Detail["error_code"].(string); ok && code != "" {
			t.extra = clean(code, 64)
		}
		if at, ok := m.Detail["next_run_at"].(string); ok && m.To == pipeline.StatusRetryWait {
			if ts, err := time.Parse(time.RFC3339Nano, at); err == nil {
				t.extra = strings.TrimSpace(fmt.Sprintf("%s, retry in %s", t.extra, ts.Sub(t.now()).Round(time.Second)))
			}
		}
	case pipeline.EventStageStarted:
		// The next stage is shown from the finished one already.
	case pipeline.EventStageFinished:
		if s, ok := m.Detail["stage"].(string); ok {
			t.stage = clean(s, 32)
		}
		if n, ok := detailInt(m.Detail, "units_done"); ok {
			t.done = n
		}
	case pipeline.EventUnitGenerated:
		if n, ok := detailInt(m.Detail, "scene"); ok {
			t.scenes[n] = true
			t.done = max(t.done, len(t.scenes))
		}
	}
	t.draw()
}

// observe folds a fresh job resource into the display.
func (t *tracker) observe(j api.JobResource) {
	t.status = j.Status
	if j.Progress.UnitsTotal > 0 {
		t.total = j.Progress.UnitsTotal
	}
	t.done = max(t.done, j.Progress.UnitsDone)
	t.draw()
}

// note shows connection trouble until the next event arrives.
func (t *tracker) note(s string) {
	t.conn = s
	t.draw()
}

// activity names what the job is doing now.
func (t *tracker) activity() string {
	switch t.status {
	case pipeline.StatusPending:
		return "queued"
	case pipeline.StatusRunning:
		switch t.stage {
		case "":
			return "preparing"
		case pipeline.StagePrepare:
			return "generating scenes"
		case pipeline.StageExecute:
			return "rendering clips"
		case pipeline.StageApply:
			return "joining and storing the MP4"
		default:
			return "finishing"
		}
	}
	return strings.ReplaceAll(string(t.status), "_", " ")
}

func (t *tracker) line() string {
	const width = 24
	done, total := t.done, t.total
	if t.status == pipeline.StatusSucceeded && total > 0 {
		done = total
	}
	filled := 0
	if total > 0 {
		filled = min(width, done*width/total)
	}
	s := fmt.Sprintf("[%s%s] %d/%d scenes · %s", strings.Repeat("#", filled), strings.Repeat("-", width-filled),
		done, total, t.activity())
	if !t.tty {
		// Lines in a log need the job they are about; the bar sits right
		// under the line that named it, and must fit on one screen line.
		s = t.id + " " + s
	}
	if t.extra != "" {
		s += " (" + t.extra + ")"
	}
	if t.conn != "" {
		s += " [" + t.conn + "]"
	}
	return s
}

func (t *tracker) draw() {
	l := t.line()
	if l == t.last {
		return
	}
	t.last = l
	if t.tty {
		// \r and "erase line": redraw in place.
		fmt.Fprintf(t.w, "\r\x1b[K%s %s", l, t.now().Sub(t.start).Round(100*time.Millisecond))
		t.drawn = true
		return
	}
	fmt.Fprintln(t.w, l)
}

// finish ends the bar's line so later output starts on a fresh one.
func (t *tracker) finish() {
	if t.tty && t.drawn {
		fmt.Fprintln(t.w)
	}
}
