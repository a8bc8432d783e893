package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// progressLine is a plain (not terminal) progress line: id, bar, scenes
// done of total, activity, the job's age at that point.
var progressLine = regexp.MustCompile(`^(\S+) \[[#-]+\] (\d+)/(\d+) scenes · .* \+(\d+\.\d)s$`)

// checkHistory checks that plain progress lines never run backwards, in
// scenes or in time, and returns the last line's age.
func checkHistory(t *testing.T, stderr string) (ages []string) {
	t.Helper()
	lastDone, lastAge := -1, -1.0
	for _, l := range strings.Split(stderr, "\n") {
		m := progressLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		done, _ := strconv.Atoi(m[2])
		age, _ := strconv.ParseFloat(m[4], 64)
		if done < lastDone || age < lastAge {
			t.Errorf("progress runs backwards at %q:\n%s", l, stderr)
		}
		lastDone, lastAge = done, age
		ages = append(ages, m[4])
	}
	if len(ages) == 0 {
		t.Fatalf("no progress lines:\n%s", stderr)
	}
	return ages
}

// TestSubmitWaitReplaysAFinishedJob (issue 12 item 13): a submit --wait
// whose submission is a replay of a job that succeeded long ago draws the
// job's history forwards (0/4 … 4/4, not 4/4 → 0/4) at the times its
// events carry, and reports how long the job took, not how long the
// replay took.
func TestSubmitWaitReplaysAFinishedJob(t *testing.T) {
	t.Parallel()
	mp4 := []byte("x")
	final := succeededJob("v1-old", mp4)
	final.StatusChangedAt = t0.Add(2500 * time.Millisecond) // the script's last event
	ws := &waitServer{t: t, id: "v1-old", script: successScript(), dropAfter: -1, final: final, mp4: mp4, submitted: &final}
	srv, _ := serveCanned(t, ws)
	c := newTestCLI(t, srv.URL)
	if err := c.submit(context.Background(), []string{demoFile, "--wait", "--out", t.TempDir() + "/x.mp4"}); err != nil {
		t.Fatalf("%v\n%s", err, c.errOut)
	}
	stderr := c.errOut.String()
	if !strings.Contains(stderr, "replayed: job v1-old was already submitted with this key; it is succeeded\n") {
		t.Errorf("stderr: %s", stderr)
	}
	ages := checkHistory(t, stderr)
	if !strings.Contains(stderr, "v1-old [------------------------] 0/4 scenes · queued +0.0s\n") ||
		!strings.Contains(stderr, "v1-old [########################] 4/4 scenes · succeeded +2.5s\n") || ages[len(ages)-1] != "2.5" {
		t.Errorf("history:\n%s", stderr)
	}
	if !strings.Contains(c.out.String(), "v1-old succeeded after 2.5s (attempts 1)\n") {
		t.Errorf("stdout: %s", c.out)
	}
}

// TestSubmitWaitReplayAgainstTheAPI: the same against the real API, with
// a job that ran for 3 seconds of the store's clock: the replay shows it
// queued at +0.0s, running at +1.0s, succeeded at +3.0s, and "succeeded
// after 3s" however fast the replay itself is.
func TestSubmitWaitReplayAgainstTheAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := realAPIEnv(t)
	c := newTestCLI(t, e.srv.URL)
	if err := c.submit(ctx, []string{demoFile}); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(c.out.String())
	e.clock.Advance(time.Second)
	cl := e.claim(t)
	e.clock.Advance(2 * time.Second)
	e.succeed(t, cl, []byte("mp4 bytes"))

	c = newTestCLI(t, e.srv.URL)
	if err := c.submit(ctx, []string{demoFile, "--wait", "--out", t.TempDir() + "/x.mp4", "--timeout", "30s"}); err != nil {
		t.Fatalf("%v\n%s", err, c.errOut)
	}
	stderr := c.errOut.String()
	checkHistory(t, stderr)
	for _, want := range []string{
		"replayed: job " + id + " was already submitted with this key; it is succeeded\n",
		id + " [------------------------] 0/4 scenes · queued +0.0s\n",
		id + " [------------------------] 0/4 scenes · preparing +1.0s\n",
		id + " [########################] 4/4 scenes · succeeded +3.0s\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(c.out.String(), id+" succeeded after 3s (attempts 1)\n") {
		t.Errorf("stdout: %s", c.out)
	}
}
