// Package failpoint turns EDGEPIPE_FAILPOINTS into a pipeline.Failpoint: named
// crash, error and delay points at the boundaries that matter, for the crash
// matrix and fault-injection tests. With the variable unset, Parse returns
// nil and the pipeline's nil checks make every point free.
//
// Syntax: name=action[,name=action...], action one of
//
//	crash       SIGKILL this process (no deferred code, no cleanup)
//	error       fail the attempt with a transient error
//	delay(MS)   sleep MS milliseconds, then continue
//
// An action may end in @N to fire only on the N-th time the point is
// reached (1-based), e.g. after_provider_intent=crash@3.
package failpoint

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"edgepipe/pipeline"
)

// Names lists every failpoint the code fires, in the order an attempt meets
// them. The crash matrix iterates over it.
var Names = []string{
	"after_claim",               // the job is leased, nothing done yet
	"before_provider_call",      // before the intent row
	"after_provider_intent",     // intent row written, request not sent
	"after_provider_response",   // provider answered (billed), result not stored
	"after_claim_object",        // ownership row written, no object yet
	"after_execute",             // every unit stored, nothing rendered
	"before_upload",             // clips rendered, upload not started
	"mid_upload",                // the render upload is streaming
	"after_upload_before_asset", // object written, no asset row
	"after_asset_before_unit",   // asset row written, unit not updated
	"after_asset_before_status", // render asset written, job not succeeded
	"before_finish",             // stages done, outcome not recorded
	"before_ack",                // worker about to record the outcome (and ack)
	"webhook_dispatch",          // a webhook delivery is being sent
}

type point struct {
	action string
	delay  time.Duration
	nth    int
	hits   int
}

// Set is a parsed EDGEPIPE_FAILPOINTS.
type Set struct {
	mu     sync.Mutex
	points map[string]*point
	log    *slog.Logger
}

// Parse reads spec. An empty spec returns (nil, nil): no failpoints, no cost.
func Parse(spec string, log *slog.Logger) (*Set, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Set{points: map[string]*point{}, log: log}
	for _, item := range strings.Split(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || action == "" {
			return nil, fmt.Errorf("EDGEPIPE_FAILPOINTS: %q is not name=action", item)
		}
		if !slices.Contains(Names, name) {
			return nil, fmt.Errorf("EDGEPIPE_FAILPOINTS: unknown failpoint %q (known: %s)", name, strings.Join(Names, ", "))
		}
		p := &point{}
		if a, n, ok := strings.Cut(action, "@"); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("EDGEPIPE_FAILPOINTS: %s: @%s is not a positive hit number", name, n)
			}
			action, p.nth = a, v
		}
		switch {
		case action == "crash" || action == "error":
			p.action = action
		case strings.HasPrefix(action, "delay(") && strings.HasSuffix(action, ")"):
			ms, err := strconv.Atoi(action[len("delay(") : len(action)-1])
			if err != nil || ms < 0 {
				return nil, fmt.Errorf("EDGEPIPE_FAILPOINTS: %s: %q is not delay(milliseconds)", name, action)
			}
			p.action, p.delay = "delay", time.Duration(ms)*time.Millisecond
		default:
			return nil, fmt.Errorf("EDGEPIPE_FAILPOINTS: %s: unknown action %q (crash, error, delay(ms))", name, action)
		}
		s.points[name] = p
	}
	return s, nil
}

// Func returns the pipeline hook, or nil for a nil Set.
func (s *Set) Func() pipeline.Failpoint {
	if s == nil {
		return nil
	}
	return s.Fire
}

// ErrInjected is the error an "error" failpoint returns; it is transient.
var ErrInjected = &pipeline.ClassifiedError{Class: pipeline.ClassTransient, Code: "failpoint", Message: "an injected failure interrupted the attempt"}

// Fire is the pipeline.Failpoint.
func (s *Set) Fire(ctx context.Context, name string) error {
	s.mu.Lock()
	p := s.points[name]
	if p == nil {
		s.mu.Unlock()
		return nil
	}
	p.hits++
	fire := p.nth == 0 || p.hits == p.nth
	s.mu.Unlock()
	if !fire {
		return nil
	}
	switch p.action {
	case "crash":
		s.log.Warn("failpoint: crashing", "failpoint", name)
		fmt.Fprintf(os.Stderr, "edgepipe: failpoint %s: crash\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable late; never return
	case "error":
		s.log.Warn("failpoint: error", "failpoint", name)
		return ErrInjected
	case "delay":
		t := time.NewTimer(p.delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
