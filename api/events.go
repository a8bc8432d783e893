package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"edgepipe/pipeline"
)

// EventMessage is the data of one Server-Sent Event: a row of the job's
// event log.
type EventMessage struct {
	ID     int64           `json:"id"`
	Kind   string          `json:"kind"`
	From   pipeline.Status `json:"from,omitempty"`
	To     pipeline.Status `json:"to,omitempty"`
	At     time.Time       `json:"at"`
	Detail map[string]any  `json:"detail"`
}

// publicDetail lists the event detail keys a job's owner may see. Others
// (worker names, operators, queue names, internal ids) stay in the log.
var publicDetail = map[string]bool{
	"attempt": true, "error_code": true, "reason": true, "next_run_at": true,
	"stage": true, "units_done": true, "units_total": true, "scene": true,
	"kind": true, "decision": true, "version": true, "released": true, "reused": true,
}

func eventMessage(e pipeline.Event) EventMessage {
	m := EventMessage{ID: e.ID, Kind: e.Kind, From: e.FromStatus, To: e.ToStatus, At: e.At, Detail: map[string]any{}}
	var raw map[string]any
	if json.Unmarshal(e.Detail, &raw) == nil {
		for k, v := range raw {
			if publicDetail[k] {
				m.Detail[k] = v
			}
		}
	}
	return m
}

// eventBatch is how many events one store read returns.
const eventBatch = 500

// events is GET /v1/jobs/{id}/events: the job's event log as Server-Sent
// Events, from after Last-Event-ID (or ?after=, for a first connection that
// wants to skip ahead), then live.
//
// Each event is "id: <event id>", "event: <kind>", "data: <EventMessage
// JSON>". The stream ends once it has caught up with an event whose "to"
// status is settled (terminal or needs_review), or at once when the job is
// already settled and nothing is left to send. A needs_review or
// dead_lettered job can move again after an operator acts; reconnecting
// with Last-Event-ID picks that up without gaps or duplicates. Comment lines
// are sent every SSEHeartbeat to keep idle connections open. A stream is
// closed after SSEMaxAge whatever happens (the client reconnects), so no
// connection is held forever.
func (s *Server) events(c echo.Context) error {
	after, err := eventCursor(c.Request())
	if err != nil {
		return err
	}
	job, err := s.loadJob(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	// The job was read before the first events query, so every event up to
	// its current status is visible to that query: a settled job with
	// nothing after the cursor really has nothing more to say.
	settledAtStart := job.Status.Settled()

	w := c.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	// Tell EventSource how long to wait before reconnecting.
	bw.WriteString("retry: 2000\n\n")
	if err := flush(bw, w); err != nil {
		return nil
	}

	// The server's ReadTimeout must not cut the stream off (see
	// clearReadDeadline); the stream ends itself at SSEMaxAge instead, and
	// the client resumes with Last-Event-ID. Each write has its own
	// deadline (flush), so a stalled client frees the handler too.
	s.clearReadDeadline(w)
	maxAge := time.NewTimer(s.cfg.SSEMaxAge)
	defer maxAge.Stop()
	poll := time.NewTimer(0)
	defer poll.Stop()
	beat := time.NewTicker(s.cfg.SSEHeartbeat)
	defer beat.Stop()
	first := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		case <-maxAge.C:
			bw.WriteString(": stream age limit reached; reconnect with Last-Event-ID\n\n")
			_ = flush(bw, w)
			return nil
		case <-beat.C:
			bw.WriteString(": keep-alive\n\n")
			if err := flush(bw, w); err != nil {
				return nil
			}
			continue
		case <-poll.C:
		}
		evs, err := s.cfg.Store.Events(ctx, job.ID, after, eventBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("event stream: read events", "job", job.ID, "err", err)
			}
			return nil // the client reconnects with Last-Event-ID
		}
		for _, e := range evs {
			if err := writeEvent(bw, e); err != nil {
				return nil
			}
			after = e.ID
		}
		if len(evs) > 0 {
			if err := flush(bw, w); err != nil {
				return nil
			}
		}
		caughtUp := len(evs) < eventBatch
		switch {
		case caughtUp && len(evs) > 0 && evs[len(evs)-1].ToStatus.Settled():
			return nil
		case caughtUp && len(evs) == 0 && first && settledAtStart:
			return nil
		}
		first = false
		if caughtUp {
			poll.Reset(s.cfg.SSEPoll)
		} else {
			poll.Reset(0)
		}
	}
}

func writeEvent(bw *bufio.Writer, e pipeline.Event) error {
	data, err := json.Marshal(eventMessage(e))
	if err != nil {
		return err
	}
	bw.WriteString("id: ")
	bw.WriteString(strconv.FormatInt(e.ID, 10))
	bw.WriteString("\nevent: ")
	bw.WriteString(sanitizeLine(e.Kind))
	bw.WriteString("\ndata: ")
	bw.Write(data) // JSON from encoding/json has no raw newlines
	_, err = bw.WriteString("\n\n")
	return err
}

// sanitizeLine keeps a field on one line: a newline would end the field
// and let the rest be read as another.
func sanitizeLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

func flush(bw *bufio.Writer, w *echo.Response) error {
	extendWriteDeadline(w)
	if err := bw.Flush(); err != nil {
		return err
	}
	w.Flush()
	return nil
}

// eventCursor reads where to resume: the Last-Event-ID header (sent by a
// reconnecting EventSource, so it wins) or ?after=. 0 means from the start.
func eventCursor(r *http.Request) (int64, error) {
	v := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	field := "Last-Event-ID"
	if v == "" {
		v, field = r.URL.Query().Get("after"), "after"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fieldError(field, "must be an event id (a non-negative whole number)")
	}
	return n, nil
}
