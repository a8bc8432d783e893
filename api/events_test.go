package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
)

type sseEvent struct {
	id   int64
	kind string
	data EventMessage
}

// sseStream is one connection to the events endpoint.
type sseStream struct {
	resp *http.Response
	r    *bufio.Reader
	stop context.CancelFunc
}

func openStream(t *testing.T, base, jobID, lastEventID, query string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	hr, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/jobs/"+jobID+"/events"+query, nil)
	hr.Header.Set("Authorization", "Bearer "+tokAcme)
	if lastEventID != "" {
		hr.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("events: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	s := &sseStream{resp: resp, r: bufio.NewReader(resp.Body), stop: cancel}
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) close() { s.stop(); s.resp.Body.Close() }

// next returns the next event, or io.EOF when the server closed the stream.
// Comment lines are collected in comments.
func (s *sseStream) next(t *testing.T, comments *[]string) (sseEvent, error) {
	t.Helper()
	var ev sseEvent
	var seen bool
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if seen {
				t.Fatalf("stream ended inside an event: %v", err)
			}
			return ev, io.EOF
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if seen {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			if comments != nil {
				*comments = append(*comments, line)
			}
		case strings.HasPrefix(line, "id: "):
			seen = true
			ev.id, err = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
			if err != nil {
				t.Fatalf("bad id line %q", line)
			}
		case strings.HasPrefix(line, "event: "):
			ev.kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data); err != nil {
				t.Fatalf("bad data %q: %v", line, err)
			}
		case strings.HasPrefix(line, "retry: "):
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

func (s *sseStream) take(t *testing.T, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	for range n {
		ev, err := s.next(t, nil)
		if err != nil {
			t.Fatalf("stream ended after %d of %d events", len(out), n)
		}
		out = append(out, ev)
	}
	return out
}

func (s *sseStream) rest(t *testing.T) []sseEvent {
	t.Helper()
	var out []sseEvent
	for {
		ev, err := s.next(t, nil)
		if errors.Is(err, io.EOF) {
			return out
		}
		out = append(out, ev)
	}
}

// A client that drops the connection and reconnects with Last-Event-ID
// sees every event exactly once, in order, and the stream ends after the
// terminal event.
func TestEventsResumeWithoutGapsOrDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ts := httptest.NewServer(e.checked(t))
	t.Cleanup(ts.Close) // after the streams close (cleanups run last-in first-out)
	ctx := context.Background()

	j := e.mustSubmit(t, tokAcme, "k1")
	c := e.claim(t, "render-v1")

	s1 := openStream(t, ts.URL, j.ID, "", "")
	got := s1.take(t, 2) // created, pending → running
	if got[0].kind != pipeline.EventCreated || got[1].data.To != pipeline.StatusRunning {
		t.Fatalf("first events %+v", got)
	}
	// Live: events appended while connected arrive.
	if err := e.store.StageFinished(ctx, c.Lease, "prepare", 0, map[string]any{"units_total": 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.AppendEvent(ctx, c.Lease, pipeline.EventUnitGenerated, map[string]any{"scene": 0, "owner": "secret-worker"}); err != nil {
		t.Fatal(err)
	}
	got = append(got, s1.take(t, 2)...)
	s1.close()

	// While disconnected the job moves on and finishes.
	if err := e.store.AppendEvent(ctx, c.Lease, pipeline.EventUnitGenerated, map[string]any{"scene": 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.StageFinished(ctx, c.Lease, "execute", 2, nil); err != nil {
		t.Fatal(err)
	}
	e.succeed(t, c, []byte("mp4"))

	s2 := openStream(t, ts.URL, j.ID, strconv.FormatInt(got[len(got)-1].id, 10), "")
	got = append(got, s2.rest(t)...) // ends by itself after the terminal event

	all, err := e.store.Events(ctx, ak(j.ID), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(all) {
		t.Fatalf("received %d events, the log has %d", len(got), len(all))
	}
	for i, ev := range got {
		if ev.id != all[i].ID || ev.data.ID != ev.id || ev.kind != all[i].Kind || ev.data.Kind != ev.kind ||
			ev.data.To != all[i].ToStatus || !ev.data.At.Equal(all[i].At) {
			t.Fatalf("event %d: got %+v, log has %+v", i, ev, all[i])
		}
	}
	if last := got[len(got)-1]; last.data.To != pipeline.StatusSucceeded {
		t.Fatalf("last event %+v, want the succeeded transition", last)
	}
	// Internal details stay out of the stream.
	for _, ev := range got {
		for k := range ev.data.Detail {
			if !publicDetail[k] {
				t.Fatalf("event %d leaks detail %q", ev.id, k)
			}
		}
		if ev.data.Detail["owner"] != nil {
			t.Fatalf("worker name leaked: %+v", ev.data)
		}
	}
	if got[3].data.Detail["scene"] != float64(0) {
		t.Fatalf("public detail dropped: %+v", got[3].data)
	}
}

func TestEventsOfSettledJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ts := httptest.NewServer(e.checked(t))
	t.Cleanup(ts.Close) // after the streams close (cleanups run last-in first-out)
	j := e.mustSubmit(t, tokAcme, "k1")
	e.toReview(t, e.claim(t, "render-v1"))
	all, _ := e.store.Events(context.Background(), ak(j.ID), 0, 0)
	if len(all) != 3 {
		t.Fatalf("%d events", len(all))
	}
	// From the start: everything, then the stream ends (needs_review).
	if got := openStream(t, ts.URL, j.ID, "", "").rest(t); len(got) != 3 || got[2].data.To != pipeline.StatusNeedsReview {
		t.Fatalf("replay %+v", got)
	}
	// Caught up already: the stream ends at once, empty.
	if got := openStream(t, ts.URL, j.ID, strconv.FormatInt(all[2].ID, 10), "").rest(t); len(got) != 0 {
		t.Fatalf("resumed at the end: %+v", got)
	}
	// ?after= skips ahead; Last-Event-ID wins over it.
	if got := openStream(t, ts.URL, j.ID, "", fmt.Sprintf("?after=%d", all[0].ID)).rest(t); len(got) != 2 || got[0].id != all[1].ID {
		t.Fatalf("after: %+v", got)
	}
	if got := openStream(t, ts.URL, j.ID, strconv.FormatInt(all[1].ID, 10), "?after=0").rest(t); len(got) != 1 || got[0].id != all[2].ID {
		t.Fatalf("Last-Event-ID and after: %+v", got)
	}
	// An operator's decision moves it again; reconnecting follows on.
	if _, err := e.store.Decide(context.Background(), &pipeline.DecideParams{JobID: ak(j.ID), Decision: pipeline.DecisionFail, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	got := openStream(t, ts.URL, j.ID, strconv.FormatInt(all[2].ID, 10), "").rest(t)
	if len(got) != 2 || got[0].kind != pipeline.EventDecision || got[1].data.To != pipeline.StatusFailed {
		t.Fatalf("after decision: %+v", got)
	}
	if got[0].data.Detail["operator"] != nil {
		t.Fatalf("operator name leaked: %+v", got[0].data)
	}
}

func TestEventsBadCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.mustSubmit(t, tokAcme, "k1")
	for _, tc := range []struct{ hdr, query, field string }{
		{"abc", "", "Last-Event-ID"}, {"-1", "", "Last-Event-ID"}, {"", "?after=x", "after"}, {"", "?after=-3", "after"},
	} {
		h := map[string]string{"Authorization": "Bearer " + tokAcme}
		if tc.hdr != "" {
			h["Last-Event-ID"] = tc.hdr
		}
		w := e.do(t, req{method: http.MethodGet, path: "/v1/jobs/" + j.ID + "/events" + tc.query, hdr: h})
		if w.Code != 400 || !hasField(problemOf(t, w), tc.field) {
			t.Fatalf("%+v: %d %s", tc, w.Code, w.Body)
		}
	}
}

func TestEventsHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.SSEHeartbeat = 20 * time.Millisecond })
	ts := httptest.NewServer(e.checked(t))
	t.Cleanup(ts.Close) // after the streams close (cleanups run last-in first-out)
	j := e.mustSubmit(t, tokAcme, "k1")
	s := openStream(t, ts.URL, j.ID, "", "")
	var comments []string
	if ev, err := s.next(t, &comments); err != nil || ev.kind != pipeline.EventCreated {
		t.Fatalf("first event %+v %v", ev, err)
	}
	// The pending job stays quiet; only heartbeats arrive. Read lines until
	// two of them have been seen.
	deadline := time.Now().Add(5 * time.Second)
	for len(comments) < 2 && time.Now().Before(deadline) {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, ":") {
			comments = append(comments, line)
		}
	}
	if len(comments) < 2 || !strings.HasPrefix(comments[0], ": keep-alive") {
		t.Fatalf("heartbeats %q", comments)
	}
}

func TestCloseStreamsEndsOpenStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ts := httptest.NewServer(e.checked(t))
	t.Cleanup(ts.Close)
	j := e.mustSubmit(t, tokAcme, "k1")
	s := openStream(t, ts.URL, j.ID, "", "")
	s.take(t, 1)
	done := make(chan []sseEvent)
	go func() { done <- s.rest(t) }()
	e.srv.CloseStreams()
	e.srv.CloseStreams() // idempotent
	select {
	case rest := <-done:
		if len(rest) != 0 {
			t.Fatalf("unexpected events %+v", rest)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open after CloseStreams")
	}
}

// A server-wide WriteTimeout does not cut a stream short: each write gets
// its own deadline.
func TestEventsOutliveServerWriteTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.SSEHeartbeat = 30 * time.Millisecond })
	ts := httptest.NewUnstartedServer(e.h)
	ts.Config.WriteTimeout = 100 * time.Millisecond
	ts.Start()
	t.Cleanup(ts.Close)
	j := e.mustSubmit(t, tokAcme, "k1")
	s := openStream(t, ts.URL, j.ID, "", "")
	s.take(t, 1)
	time.Sleep(300 * time.Millisecond) // three times the server's write timeout
	c := e.claim(t, "render-v1")
	e.toReview(t, c)
	if got := s.rest(t); len(got) != 2 || got[1].data.To != pipeline.StatusNeedsReview {
		t.Fatalf("after the write timeout: %+v", got)
	}
}
