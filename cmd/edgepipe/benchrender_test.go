package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Bad arguments are refused before anything starts.
func TestBenchRenderRefusesBadArguments(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"0"}, {"x"}, {"501"}, {"1", "--workers", "0"}, {"1", "--scenes", "21"}, {"--workers", "65"}, {"1", "2"}} {
		err := benchRenderTo(context.Background(), args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "bench render") {
			t.Errorf("bench render %v: %v, want a bench render error", args, err)
		}
	}
}

// One small job end to end and by hand: both times are measured (positive)
// and the ratio printed is theirs.
func TestBenchRenderMeasuresBothSides(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("ffmpeg is missing and CI is set")
		}
		t.Skip("needs ffmpeg")
	}
	var out bytes.Buffer
	if err := benchRenderTo(context.Background(), []string{"1", "--scenes", "2", "--workers", "1", "--stages"}, &out); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)submit to last succeeded: +([0-9.]+)s.*by hand: +([0-9.]+)s.*by hand: +([0-9.]+)x`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("output:\n%s", out.String())
	}
	e2e, _ := strconv.ParseFloat(m[1], 64)
	hand, _ := strconv.ParseFloat(m[2], 64)
	ratio, _ := strconv.ParseFloat(m[3], 64)
	if e2e <= 0 || hand <= 0 || ratio <= 0 {
		t.Fatalf("times %v and %v, ratio %v: want all positive\n%s", e2e, hand, ratio, out.String())
	}
	if want := e2e / hand; ratio < want*0.95-0.01 || ratio > want*1.05+0.01 {
		t.Fatalf("ratio %v, want %v/%v\n%s", ratio, e2e, hand, out.String())
	}
	// --stages: the one job's spans, counted per name. Two scenes of an
	// image and a narration: two units, four paid calls, two clips and a
	// join; the attempt takes no longer than the end-to-end run.
	for name, want := range map[string]int{"edgepipe.attempt": 1, "edgepipe.stage.apply": 1, "edgepipe.unit": 2,
		"edgepipe.provider_call": 4, "edgepipe.render.process": 3} {
		m := regexp.MustCompile(`(?m)^ +` + regexp.QuoteMeta(name) + ` +([0-9]+) +([0-9.]+)s$`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no %s line:\n%s", name, out.String())
		}
		n, _ := strconv.Atoi(m[1])
		secs, _ := strconv.ParseFloat(m[2], 64)
		if n != want || secs <= 0 || (name == "edgepipe.attempt" && secs > e2e+0.01) {
			t.Errorf("%s: %d spans, %vs; want %d, more than 0 s (end to end %vs)", name, n, secs, want, e2e)
		}
	}
}
