package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/storage/fs"
)

// TestSweepHelpHasNoSentinelDefault (issue 12 item 14): --grace's help
// names its real default, not "(default -1ns)".
func TestSweepHelpHasNoSentinelDefault(t *testing.T) {
	t.Parallel()
	c := newTestCLI(t, "http://127.0.0.1:1")
	if err := c.sweep(context.Background(), []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v", err)
	}
	help := c.errOut.String()
	if strings.Contains(help, "-1ns") || strings.Contains(help, "(default 0s)") ||
		!strings.Contains(help, "minimum age of what is removed (default $EDGEPIPE_SWEEP_GRACE, else 1h)") {
		t.Errorf("help:\n%s", help)
	}
}

// TestSweepDryRunSaysWould (issue 12 item 14): a dry run says what it
// would delete, deletes nothing and claims nothing about claims or
// uploads it did not look at; the real sweep then deletes the orphan.
func TestSweepDryRunSaysWould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newTestCLI(t, "http://127.0.0.1:1")
	objs, err := fs.New(ctx, fs.Config{Root: filepath.Join(c.dataDir, "objects")})
	if err != nil {
		t.Fatal(err)
	}
	const key = "units/v1/ab/orphan.png"
	if _, err := objs.Put(ctx, key, bytes.NewReader([]byte("nobody's")), pipeline.PutOptions{ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}

	if err := c.sweep(ctx, []string{"--dry-run", "--grace", "0s"}); err != nil {
		t.Fatal(err)
	}
	want := "dry run: scanned 1 objects; would delete 1 orphans; stale claims, uploads and settled dead letters not inspected (a real sweep removes them)\n  " + key + "\n"
	if got := c.out.String(); got != want {
		t.Errorf("dry run printed\n%q\nwant\n%q", got, want)
	}
	if strings.Contains(c.out.String(), "dropped") || strings.Contains(c.out.String(), "aborted") || strings.Contains(c.out.String(), "deleted") {
		t.Errorf("a dry run claims it removed something: %s", c.out)
	}
	if _, err := objs.Head(ctx, key); err != nil {
		t.Fatalf("the dry run removed the orphan: %v", err)
	}

	c.out.Reset()
	if err := c.sweep(ctx, []string{"--grace", "0s"}); err != nil {
		t.Fatal(err)
	}
	want = "scanned 1 objects; deleted 1 orphans; dropped 0 stale claims; aborted 0 stale uploads; deleted 0 settled dead letters\n  " + key + "\n"
	if got := c.out.String(); got != want {
		t.Errorf("sweep printed\n%q\nwant\n%q", got, want)
	}
	if _, err := objs.Head(ctx, key); !errors.Is(err, pipeline.ErrNotFound) {
		t.Fatalf("the orphan is still there: %v", err)
	}

	// Without --grace the configured grace (1h) protects a new object.
	if _, err := objs.Put(ctx, key, bytes.NewReader([]byte("new")), pipeline.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c.out.Reset()
	if err := c.sweep(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := c.out.String(); !strings.Contains(got, "deleted 0 orphans") {
		t.Errorf("default grace: %s", got)
	}
	if err := c.sweep(ctx, []string{"--grace", "-1s"}); !errors.Is(err, errUsage) {
		t.Errorf("negative grace: %v", err)
	}
}
