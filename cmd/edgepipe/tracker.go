package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"edgepipe/api"
	"edgepipe/pipeline"
)

// tracker shows a job's progress from its events: a bar redrawn in place on
// a terminal, a line per change otherwise. It is fed the job's whole event
// log from the first event, so it starts from nothing (not from the
// progress the job resource reports, which would run backwards as the
// history replays). The time it shows is the job's: the last event's
// timestamp counted from the job's creation, never this process's clock.
type tracker struct {
	w      io.Writer
	tty    bool
	origin time.Time // the job's creation
	at     time.Time // the latest event's time
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

func newTracker(w io.Writer, tty bool, j api.JobResource, scenes int) *tracker {
	t := &tracker{w: w, tty: tty, origin: j.CreatedAt, at: j.CreatedAt, id: clean(j.ID, 64),
		status: pipeline.StatusPending, total: scenes, scenes: map[int]bool{}}
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
	if m.At.After(t.at) {
		t.at = m.At
	}
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
				// The wait the job was given, as of the event: true in
				// a replay as well as live.
				t.extra = strings.TrimSpace(fmt.Sprintf("%s, retry in %s", t.extra, ts.Sub(m.At).Round(time.Second)))
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

// observe folds a fresh job resource into the display (between stream
// connections; the events that led there may still be on their way).
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

// elapsed is the job's age at its latest event.
func (t *tracker) elapsed() string {
	return fmt.Sprintf("+%.1fs", max(t.at.Sub(t.origin), 0).Seconds())
}

func (t *tracker) draw() {
	l := t.line()
	if l == t.last {
		return
	}
	t.last = l
	if t.tty {
		// \r and "erase line": redraw in place.
		fmt.Fprintf(t.w, "\r\x1b[K%s %s", l, t.elapsed())
		t.drawn = true
		return
	}
	fmt.Fprintln(t.w, l+" "+t.elapsed())
}

// finish ends the bar's line so later output starts on a fresh one.
func (t *tracker) finish() {
	if t.tty && t.drawn {
		fmt.Fprintln(t.w)
	}
}
