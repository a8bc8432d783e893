package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"edgepipe/api"
	"edgepipe/pipeline"
)

// TestSubmitWaitExitCodes (issue 12 item 11): each outcome of submit
// --wait has its own exit status.
func TestSubmitWaitExitCodes(t *testing.T) {
	t.Parallel()
	settle := func(st pipeline.Status) *waitServer {
		script := []api.EventMessage{
			ev(1, "created", "", pipeline.StatusPending, nil),
			ev(2, "status", pipeline.StatusPending, pipeline.StatusRunning, map[string]any{"attempt": 1}),
			ev(3, "status", pipeline.StatusRunning, st, map[string]any{"attempt": 1}),
		}
		final := jobResource("v1-x", st)
		if st == pipeline.StatusSucceeded {
			final = succeededJob("v1-x", []byte("x"))
		}
		return &waitServer{t: t, id: "v1-x", script: script, dropAfter: -1, final: final, mp4: []byte("x")}
	}
	refuse := func(status int, code string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			respondProblem(w, status, code, "Refused", "no")
		})
	}
	hang := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST":
			respondJSON(w, 202, jobResource("v1-slow", pipeline.StatusPending))
		case strings.HasSuffix(r.URL.Path, "/events"):
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			respondJSON(w, 200, jobResource("v1-slow", pipeline.StatusPending))
		}
	})
	for _, tc := range []struct {
		name string
		h    http.Handler
		args []string
		want int
	}{
		{"succeeded", settle(pipeline.StatusSucceeded), nil, 0},
		{"failed", settle(pipeline.StatusFailed), nil, 3},
		{"needs_review", settle(pipeline.StatusNeedsReview), nil, 4},
		{"dead_lettered", settle(pipeline.StatusDeadLettered), nil, 5},
		{"canceled", settle(pipeline.StatusCanceled), nil, 6},
		{"timeout", hang, []string{"--timeout", "50ms"}, 7},
		{"refused: invalid", refuse(400, "validation_failed"), nil, 8},
		{"refused: key reused", refuse(422, "idempotency_key_reused"), nil, 8},
		{"refused: bad token", refuse(401, "unauthorized"), nil, 8},
		{"server error is not a refusal", refuse(500, "internal_error"), nil, 1},
		{"usage", nil, []string{"--nope"}, 2},
		{"unreachable", nil, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := "http://127.0.0.1:1"
			if tc.h != nil {
				srv, _ := serveCanned(t, tc.h)
				url = srv.URL
			}
			c := newTestCLI(t, url)
			args := append([]string{demoFile, "--wait", "--out", filepath.Join(t.TempDir(), "x.mp4")}, tc.args...)
			err := c.submit(context.Background(), args)
			if got := exitCode(err); got != tc.want {
				t.Errorf("exit %d (err %v), want %d", got, err, tc.want)
			}
		})
	}
	// Without --wait an accepted job is 0 whatever its status.
	ws := settle(pipeline.StatusFailed)
	srv, _ := serveCanned(t, ws)
	if err := newTestCLI(t, srv.URL).submit(context.Background(), []string{demoFile}); exitCode(err) != 0 {
		t.Errorf("submit without --wait: %v", err)
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{flag.ErrHelp, 0},
		{fmt.Errorf("%w: missing FILE", errUsage), 2},
		{errors.New("boom"), 1},
		{errExit, 1},
		{fmt.Errorf("wrapped: %w", &jobError{ID: "j", Status: pipeline.StatusDeadLettered}), 5},
		{&jobError{ID: "j", Status: pipeline.StatusRunning}, 1},
		{&codedError{code: exitTimeout, err: errors.New("gave up")}, 7},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// exitLines finds "  N  text" lines: the exit status tables of submit
// --help and README.
var exitLine = regexp.MustCompile(`(?m)^\|? *` + "`?" + `(\d)` + "`?" + ` *(?:\||  )`)

// TestExitCodesDocumented: submit --help and README's Commands section
// list every exit status submit can return, and no other.
func TestExitCodesDocumented(t *testing.T) {
	t.Parallel()
	want := []int{exitOK, exitError, exitUsage, exitFailed, exitNeedsReview, exitDeadLettered, exitCanceled, exitTimeout, exitRefused}
	codes := func(text string) []int {
		var out []int
		for _, m := range exitLine.FindAllStringSubmatch(text, -1) {
			n, _ := strconv.Atoi(m[1])
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out
	}
	help := submitHelp[strings.Index(submitHelp, "Exit status:"):]
	if got := codes(help); !slices.Equal(got, want) {
		t.Errorf("submit --help lists exit statuses %v, want %v", got, want)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(readme), "Exit status of `edgepipe submit")
	if i < 0 {
		t.Fatal("README has no exit status table for submit")
	}
	section := string(readme[i:])
	if j := strings.Index(section, "\n\n\n"); j > 0 {
		section = section[:j]
	}
	if j := strings.Index(section[1:], "\n#"); j > 0 {
		section = section[:j+1]
	}
	if got := codes(section); !slices.Equal(got, want) {
		t.Errorf("README lists exit statuses %v, want %v", got, want)
	}
}
