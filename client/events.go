package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ErrStreamSilent: the event stream sent nothing, not even a keep-alive,
// for longer than Config.StreamIdle; the connection was dropped.
var ErrStreamSilent = errors.New("the event stream went silent")

// EventStream is one connection to a job's event stream
// (GET /v1/jobs/{id}/events). Follow reconnects; an EventStream does not.
type EventStream struct {
	body   io.ReadCloser
	sse    *sseReader
	cancel context.CancelFunc
	idle   *time.Timer
	silent atomic.Bool
	parent context.Context
	last   int64
}

// Events opens a job's event stream after event id after (0: the whole
// history; the id is sent as Last-Event-ID). The server ends the stream
// once it has sent an event that settles the job, or at once for a
// settled job with nothing after the cursor.
func (c *Client) Events(ctx context.Context, id string, after int64) (*EventStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	hdr := http.Header{}
	hdr.Set("Accept", "text/event-stream")
	if after > 0 {
		hdr.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := c.request(sctx, http.MethodGet, c.endpoint(nil, "v1", "jobs", id, "events"), hdr, nil) //nolint:bodyclose // the EventStream owns the body; its Close closes it
	if err != nil {
		cancel()
		return nil, err
	}
	s := &EventStream{body: resp.Body, cancel: cancel, parent: ctx, last: after}
	// The server sends a comment at least every 15 s. A connection that
	// stays silent much longer died without a reset (a NAT or proxy lost
	// it): drop it rather than wait forever.
	d := c.cfg.StreamIdle
	s.idle = time.AfterFunc(d, func() { s.silent.Store(true); cancel() })
	s.sse = newSSEReader(&watchdogReader{r: resp.Body, idle: s.idle, d: d})
	return s, nil
}

// Next returns the next event. It returns io.EOF when the server ended the
// stream, ErrStreamSilent when the connection went silent, the context's
// error when it ended, and a transport error when the connection broke.
// Events whose data is not an event message are skipped.
func (s *EventStream) Next() (Event, error) {
	for {
		ev, err := s.sse.next()
		if err != nil {
			switch {
			case errors.Is(err, io.EOF):
				return Event{}, io.EOF
			case s.parent.Err() != nil:
				return Event{}, s.parent.Err()
			case s.silent.Load():
				return Event{}, ErrStreamSilent
			}
			return Event{}, transportError(err)
		}
		if n, perr := strconv.ParseInt(ev.id, 10, 64); perr == nil && n > s.last {
			s.last = n
		}
		if ev.data == "" {
			continue
		}
		var m Event
		if json.Unmarshal([]byte(ev.data), &m) != nil {
			continue // not ours to judge; the job resource is the truth
		}
		return m, nil
	}
}

// LastID is the id of the last event received: where a new connection
// resumes.
func (s *EventStream) LastID() int64 { return s.last }

// Close ends the connection.
func (s *EventStream) Close() error {
	s.idle.Stop()
	s.cancel()
	return s.body.Close()
}

// FollowOptions tune Follow.
type FollowOptions struct {
	// After resumes after this event id; 0 replays the job's whole
	// history first, then follows it live.
	After int64
	// OnEvent sees every event, in order, each once.
	OnEvent func(Event)
	// OnJob sees the job resource read between connections when the job
	// has not settled.
	OnJob func(Job)
	// OnReconnect is called before each reconnection, with why the last
	// connection ended (nil when it just closed).
	OnReconnect func(error)
}

// Follow reads a job's event stream until the job settles (a terminal
// status or needs_review), reconnecting with Last-Event-ID whenever the
// stream ends early, and returns the job as it is then. A 4xx answer ends
// it at once (reconnecting cannot help); other failures are retried with a
// doubling pause, until Config.MaxStreamFailures connections in a row
// brought no event. On error the last job resource read (possibly zero) is
// returned with it.
func (c *Client) Follow(ctx context.Context, id string, o FollowOptions) (Job, error) {
	last := o.After
	delay := c.cfg.ReconnectDelay
	failures := 0
	var job Job
	for {
		settled, got, err := c.followOnce(ctx, id, &last, o.OnEvent)
		if ctx.Err() != nil {
			return job, ctx.Err()
		}
		var ae *APIError
		if errors.As(err, &ae) && !ae.Temporary() {
			return job, err // 401, 404: reconnecting cannot help
		}
		// Whether the stream ended at a settled event or not (the server
		// restarted, a proxy cut it, or the job settled before we
		// connected and nothing was left after our cursor), the job
		// resource has the last word. A settled job is returned once its
		// history has been read to the end: the stream brought the
		// settling event, or ended cleanly with nothing more to say.
		// Otherwise (it broke half-way through a finished job's history)
		// the rest is fetched, so OnEvent sees the whole story.
		j, gerr := c.Get(ctx, id)
		switch {
		case gerr == nil:
			job = j
			if j.Status.Settled() && (settled || err == nil && !got) {
				return j, nil
			}
			if !j.Status.Settled() && o.OnJob != nil {
				o.OnJob(j)
			}
		case settled || errors.As(gerr, &ae) && !ae.Temporary():
			return job, gerr
		case err == nil:
			err = gerr
		}
		if got {
			failures, delay = 0, c.cfg.ReconnectDelay
		} else {
			failures++
		}
		if failures >= c.cfg.MaxStreamFailures {
			if err == nil {
				err = errors.New("the event stream keeps closing without news")
			}
			return job, fmt.Errorf("following job %s: %w", id, err)
		}
		if o.OnReconnect != nil {
			o.OnReconnect(err)
		}
		select {
		case <-ctx.Done():
			return job, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, c.cfg.ReconnectMax)
	}
}

// followOnce reads one connection, resuming after *last. settled reports
// that an event moved the job to a settled status; got, that at least one
// event arrived.
func (c *Client) followOnce(ctx context.Context, id string, last *int64, onEvent func(Event)) (settled, got bool, err error) {
	s, err := c.Events(ctx, id, *last)
	if err != nil {
		return false, false, err
	}
	defer s.Close()
	for {
		m, err := s.Next()
		*last = s.LastID()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return false, got, err
		}
		got = true
		if onEvent != nil {
			onEvent(m)
		}
		if m.To.Settled() {
			return true, true, nil
		}
	}
}

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
// because Follow paces itself).
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
