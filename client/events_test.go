package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// cutWriter passes an event stream through until it has carried n events,
// then fails every write, like a connection that broke.
type cutWriter struct {
	http.ResponseWriter
	n      int
	events int
	cut    bool
}

func (w *cutWriter) Write(p []byte) (int, error) {
	if w.cut {
		return 0, errors.New("connection cut by the test")
	}
	// Pass whole events until the limit, then half of the next one.
	for i := 0; i < len(p); i++ {
		if i+1 < len(p) && p[i] == '\n' && p[i+1] == '\n' && bytes.HasPrefix(p[lastEventStart(p, i):], []byte("id: ")) {
			w.events++
			if w.events > w.n {
				half := lastEventStart(p, i) + 8
				w.ResponseWriter.Write(p[:half])
				w.ResponseWriter.(http.Flusher).Flush()
				w.cut = true
				return 0, errors.New("connection cut by the test")
			}
		}
	}
	return w.ResponseWriter.Write(p)
}

func (w *cutWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// lastEventStart is where the event ending at i starts in p.
func lastEventStart(p []byte, i int) int {
	if j := bytes.LastIndex(p[:i], []byte("\n\n")); j >= 0 {
		return j + 2
	}
	return 0
}

// runJob takes a submitted job through running to succeeded, one second
// of the store's clock apart.
func (s *testServer) runJob(t *testing.T, content []byte) {
	t.Helper()
	s.clock.Advance(time.Second)
	c := s.claim(t)
	s.clock.Advance(2 * time.Second)
	s.succeed(t, c, content)
}

// TestFollowResumesWithLastEventID: the first connection breaks in the
// middle of the job's history; Follow reconnects with the id of the last
// whole event and every event arrives once, in order, with the times the
// store gave them.
func TestFollowResumesWithLastEventID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t)
	c := s.client(t, tokAcme)
	j := mustSubmit(t, c, "k", board(1))
	s.runJob(t, []byte("mp4"))
	want, err := s.store.Events(ctx, pipeline.JobKey("acme", j.ID), 0, 0)
	if err != nil || len(want) < 3 {
		t.Fatalf("store events %v %v", want, err)
	}
	var conns atomic.Int32
	s.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if strings.HasSuffix(r.URL.Path, "/events") && conns.Add(1) == 1 {
			next.ServeHTTP(&cutWriter{ResponseWriter: w, n: 1}, r)
			panic(http.ErrAbortHandler)
		}
		next.ServeHTTP(w, r)
	})
	var got []Event
	var reconnects int
	final, err := c.Follow(ctx, j.ID, FollowOptions{
		OnEvent:     func(e Event) { got = append(got, e) },
		OnReconnect: func(error) { reconnects++ },
	})
	if err != nil || final.Status != pipeline.StatusSucceeded || final.Result == nil {
		t.Fatalf("follow: %+v %v", final, err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Kind != want[i].Kind || got[i].To != want[i].ToStatus || !got[i].At.Equal(want[i].At) {
			t.Errorf("event %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if got[len(got)-1].At.Sub(got[0].At) != 3*time.Second {
		t.Errorf("event times %v … %v, want the store's 3s apart", got[0].At, got[len(got)-1].At)
	}
	evReqs := s.requests("/v1/jobs/" + j.ID + "/events")
	if len(evReqs) != 2 || evReqs[0].Header.Get("Last-Event-ID") != "" || evReqs[1].Header.Get("Last-Event-ID") != fmt.Sprint(want[0].ID) {
		var ids []string
		for _, r := range evReqs {
			ids = append(ids, r.Header.Get("Last-Event-ID"))
		}
		t.Errorf("event stream requests with Last-Event-ID %q; want none, then %d", ids, want[0].ID)
	}
	if reconnects != 1 {
		t.Errorf("%d reconnects, want 1", reconnects)
	}

	// Resuming after the last event of a settled job: nothing more to
	// say, and the job resource answers.
	var more []Event
	final, err = c.Follow(ctx, j.ID, FollowOptions{After: want[len(want)-1].ID, OnEvent: func(e Event) { more = append(more, e) }})
	if err != nil || final.Status != pipeline.StatusSucceeded || len(more) != 0 {
		t.Fatalf("follow after the end: %v %v %v", final.Status, more, err)
	}
}

// TestFollowLive: Follow waits while the job runs and returns it once it
// settles in needs_review.
func TestFollowLive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newServer(t)
	c := s.client(t, tokAcme)
	j := mustSubmit(t, c, "k", board(1))
	type result struct {
		job Job
		err error
	}
	var mu sync.Mutex
	var kinds []string
	done := make(chan result, 1)
	go func() {
		job, err := c.Follow(ctx, j.ID, FollowOptions{OnEvent: func(e Event) {
			mu.Lock()
			kinds = append(kinds, e.Kind+":"+string(e.To))
			mu.Unlock()
		}})
		done <- result{job, err}
	}()
	// Wait until the stream delivered the created event, then move on.
	for {
		mu.Lock()
		n := len(kinds)
		mu.Unlock()
		if n > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("follow returned early: %+v %v", r.job, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	s.toReview(t, s.claim(t))
	r := <-done
	if r.err != nil || r.job.Status != pipeline.StatusNeedsReview || !r.job.RequiresAction {
		t.Fatalf("follow: %+v %v", r.job, r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(kinds, " ") != "created:pending status:running status:needs_review" {
		t.Errorf("events %q", kinds)
	}
}

// TestFollowGivesUpOn4xx: reconnecting cannot help a 404.
func TestFollowGivesUpOn4xx(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := s.client(t, tokAcme)
	_, err := c.Follow(context.Background(), "v1-missing", FollowOptions{})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
	if n := len(s.requests("/v1/jobs/v1-missing/events")); n != 1 {
		t.Errorf("%d stream requests, want 1", n)
	}
}

// TestFollowRetriesThenGivesUp: a stream that keeps failing with 503 is
// retried MaxStreamFailures times, then the error says why.
func TestFollowRetriesThenGivesUp(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := s.client(t, tokAcme)
	j := mustSubmit(t, c, "k", board(1))
	s.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(503)
			io.WriteString(w, `{"title":"Service unavailable","code":"unavailable","detail":"the service is busy; retry shortly"}`)
			return
		}
		next.ServeHTTP(w, r)
	})
	var reconnectErrs []error
	_, err := c.Follow(context.Background(), j.ID, FollowOptions{OnReconnect: func(err error) { reconnectErrs = append(reconnectErrs, err) }})
	if !errors.Is(err, ErrUnavailable) || !strings.HasPrefix(err.Error(), "following job "+j.ID+": Service unavailable") {
		t.Fatalf("err = %v", err)
	}
	if n := len(s.requests("/v1/jobs/" + j.ID + "/events")); n != 5 {
		t.Errorf("%d stream attempts, want MaxStreamFailures (5)", n)
	}
	if len(reconnectErrs) != 4 || !errors.Is(reconnectErrs[0], ErrUnavailable) {
		t.Errorf("reconnects %v", reconnectErrs)
	}
}

// TestFollowReconnectsASilentStream: a stream that goes silent without
// closing (no keep-alive either) is dropped after StreamIdle and resumed.
func TestFollowReconnectsASilentStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t)
	c, err := New(Config{BaseURL: s.URL, Token: tokAcme, ReconnectDelay: time.Millisecond, StreamIdle: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	j := mustSubmit(t, c, "k", board(1))
	s.runJob(t, []byte("x"))
	var conns atomic.Int32
	s.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if strings.HasSuffix(r.URL.Path, "/events") && conns.Add(1) == 1 {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		next.ServeHTTP(w, r)
	})
	var why []error
	start := time.Now()
	final, err := c.Follow(ctx, j.ID, FollowOptions{OnReconnect: func(err error) { why = append(why, err) }})
	if err != nil || final.Status != pipeline.StatusSucceeded {
		t.Fatalf("follow: %v %v", final.Status, err)
	}
	if len(why) != 1 || !errors.Is(why[0], ErrStreamSilent) || time.Since(start) < 100*time.Millisecond {
		t.Errorf("reconnected because of %v after %s", why, time.Since(start))
	}
}

// TestEventStreamNext reads one connection by hand.
func TestEventStreamNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t)
	c := s.client(t, tokAcme)
	j := mustSubmit(t, c, "k", board(1))
	s.runJob(t, []byte("x"))
	es, err := c.Events(ctx, j.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	var n int
	for {
		e, err := es.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if es.LastID() != e.ID {
			t.Errorf("LastID %d after event %d", es.LastID(), e.ID)
		}
	}
	if n != 3 {
		t.Errorf("%d events, want created, running, succeeded", n)
	}
	if _, err := c.Events(ctx, "v1-nope", 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing job: %v", err)
	}
}

func TestSSEReader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     []sseEvent
	}{
		{"api format", "retry: 2000\n\nid: 1\nevent: created\ndata: {}\n\n: keep-alive\n\nid: 2\nevent: status\ndata: {\"a\":1}\n\n",
			[]sseEvent{{"1", "created", "{}"}, {"2", "status", `{"a":1}`}}},
		{"CRLF and multi-line data", "id: 7\r\ndata: a\r\ndata: b\r\n\r\n", []sseEvent{{"7", "", "a\nb"}}},
		{"no space after colon, field without colon", "data:x\nevent\n\n", []sseEvent{{"", "", "x"}}},
		{"id carries over", "id: 3\n\ndata: y\n\n", []sseEvent{{"3", "", "y"}}},
		{"id with NUL is ignored", "id: 4\ndata: a\n\nid: 5\x00\ndata: b\n\n", []sseEvent{{"4", "", "a"}, {"4", "", "b"}}},
		{"a cut-off event is dropped", "id: 1\ndata: a\n\nid: 2\ndata: {\"id\":", []sseEvent{{"1", "", "a"}}},
		{"empty data is an event", "data\n\n", []sseEvent{{"", "", ""}}},
		{"unknown fields ignored", "foo: bar\nretry: x\ndata: z\n\n", []sseEvent{{"", "", "z"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newSSEReader(strings.NewReader(tc.in))
			var got []sseEvent
			for {
				e, err := r.next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, e)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzSSEReader: any byte stream parses without panicking and yields at
// most one event per blank line.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("id: 1\nevent: status\ndata: {\"to\":\"succeeded\"}\n\n"))
	f.Add([]byte(": c\r\n\r\ndata\ndata:\n\nid:\x00\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := newSSEReader(bytes.NewReader(b))
		n := 0
		for {
			_, err := r.next()
			if err != nil {
				break
			}
			n++
			if n > bytes.Count(b, []byte("\n"))+1 {
				t.Fatalf("%d events from %d lines", n, bytes.Count(b, []byte("\n")))
			}
		}
	})
}
