package fake

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Operation names one of the imitated provider operations. Faults are
// configured per operation.
type Operation string

const (
	OpImage  Operation = "image"  // POST /v1/images
	OpSpeech Operation = "speech" // POST /v1/speech
	OpVideo  Operation = "video"  // POST /v1/videos (the submit; polls are never faulted)
)

// Operations lists every operation in a stable order.
var Operations = []Operation{OpImage, OpSpeech, OpVideo}

// FaultKind names one kind of injected failure.
type FaultKind string

const (
	FaultLatency      FaultKind = "latency"       // sleep before handling
	FaultRateLimit    FaultKind = "rate_limit"    // 429 + Retry-After, nothing billed
	FaultBeforeCommit FaultKind = "before_commit" // 500, nothing billed
	FaultAfterCommit  FaultKind = "after_commit"  // billed, then 500
	FaultDrop         FaultKind = "drop"          // billed, then the TCP connection is closed without a response
	FaultAsyncFail    FaultKind = "async_fail"    // video only: billed, accepted, the job later ends "failed"
)

// FaultKinds lists every kind in the order a request meets them.
var FaultKinds = []FaultKind{FaultLatency, FaultRateLimit, FaultBeforeCommit, FaultAfterCommit, FaultDrop, FaultAsyncFail}

// Limits on durations in a fault spec, so a typo cannot hang a test run.
const (
	MaxLatency        = 10 * time.Minute
	MaxRetryAfter     = time.Hour
	DefaultRetryAfter = time.Second
)

// ErrInvalidFaults is matched by every error ParseFaults and Faults.Validate
// return.
var ErrInvalidFaults = errors.New("invalid fault spec")

// FaultSpecError says which entry of a fault spec is wrong and why. Its
// message is one line whatever the input (the entry is quoted with %q).
type FaultSpecError struct {
	Entry  int    // 1-based index of the comma-separated entry; 0 for the whole spec
	Text   string // the entry as given
	Reason string
}

func (e *FaultSpecError) Error() string {
	if e.Entry == 0 {
		return "fake: fault spec: " + e.Reason
	}
	return fmt.Sprintf("fake: fault spec entry %d %q: %s", e.Entry, e.Text, e.Reason)
}

func (e *FaultSpecError) Unwrap() error { return ErrInvalidFaults }

// OpFaults is the fault configuration of one operation. Every probability is
// in [0,1] and is drawn independently for each request.
type OpFaults struct {
	LatencyP     float64
	Latency      time.Duration
	RateLimit    float64
	RetryAfter   time.Duration // Retry-After of an injected 429; 0 means DefaultRetryAfter
	BeforeCommit float64
	AfterCommit  float64
	Drop         float64
	AsyncFail    float64 // only meaningful for OpVideo
}

// Faults is the whole fault configuration. The zero value injects nothing.
type Faults struct {
	Image, Speech, Video OpFaults
}

// For returns the faults of op (zero for an unknown op).
func (f Faults) For(op Operation) OpFaults {
	switch op {
	case OpImage:
		return f.Image
	case OpSpeech:
		return f.Speech
	case OpVideo:
		return f.Video
	}
	return OpFaults{}
}

func (f *Faults) ptr(op Operation) *OpFaults {
	switch op {
	case OpImage:
		return &f.Image
	case OpSpeech:
		return &f.Speech
	case OpVideo:
		return &f.Video
	}
	return nil
}

// IsZero reports whether no fault is configured.
func (f Faults) IsZero() bool { return f == Faults{} }

// FaultsHelp documents the fault spec syntax; the CLI shows it in --help.
const FaultsHelp = `Fault spec: comma-separated entries OP:KIND=VALUE, e.g.
  image:before_commit=0.2,speech:after_commit=0.1,speech:drop=0.05,video:async_fail=0.1,*:latency=50ms@0.3,*:rate_limit=0.05
OP is image (POST /v1/images), speech (POST /v1/speech), video (POST /v1/videos)
or * (all three). Polls of a video job are never faulted.
KIND and VALUE (P is a probability in [0,1], drawn independently per request):
  latency=DUR@P      sleep DUR (e.g. 200ms) before handling; DUR alone means P=1
  rate_limit=P       answer 429 with Retry-After: 1, nothing billed
  rate_limit=DUR@P   same with Retry-After DUR (whole seconds, e.g. 5s)
  before_commit=P    answer 500 before the call is committed, nothing billed
  after_commit=P     commit (bill) the call, then answer 500
  drop=P             commit (bill) the call, then close the TCP connection without a response
  async_fail=P       video only: accept and bill the job, which later ends "failed"
A request meets them in this order: latency, rate_limit, before_commit, commit,
drop, after_commit (drop wins when both are drawn). Entries apply left to right;
a later entry for the same operation and kind overrides an earlier one (so
"*:drop=0.1,image:drop=0" leaves images alone); P=0 or DUR=0 turns a kind off.
With a fixed seed a sequential run of requests is reproducible; concurrent
requests draw from the one generator in arrival order, which is not.`

// ParseFaults parses a fault spec (see FaultsHelp). An empty or blank spec is
// the zero Faults. Errors are *FaultSpecError and match ErrInvalidFaults.
func ParseFaults(spec string) (Faults, error) {
	var f Faults
	if strings.TrimSpace(spec) == "" {
		return f, nil
	}
	type slot struct {
		op   string
		kind FaultKind
	}
	seen := map[slot]bool{}
	for i, raw := range strings.Split(spec, ",") {
		entry := strings.TrimSpace(raw)
		bad := func(format string, a ...any) error {
			return &FaultSpecError{Entry: i + 1, Text: entry, Reason: fmt.Sprintf(format, a...)}
		}
		opText, kind, value, err := splitFaultEntry(entry)
		if err != nil {
			return Faults{}, bad("%v", err)
		}
		if seen[slot{opText, kind}] {
			return Faults{}, bad("%s:%s is given more than once", opText, kind)
		}
		seen[slot{opText, kind}] = true
		dur, p, err := parseFaultValue(kind, value)
		if err != nil {
			return Faults{}, bad("%v", err)
		}
		ops := Operations
		if opText != "*" {
			ops = []Operation{Operation(opText)}
		}
		for _, op := range ops {
			f.ptr(op).set(kind, dur, p)
		}
	}
	return f, nil
}

// splitFaultEntry splits one OP:KIND=VALUE entry and checks OP, KIND and
// that they go together.
func splitFaultEntry(entry string) (op string, kind FaultKind, value string, err error) {
	if entry == "" {
		return "", "", "", errors.New("empty entry (stray comma?)")
	}
	opText, rest, ok := strings.Cut(entry, ":")
	if !ok {
		return "", "", "", errors.New("want OP:KIND=VALUE, missing ':'")
	}
	kindText, value, ok := strings.Cut(rest, "=")
	if !ok {
		return "", "", "", errors.New("want OP:KIND=VALUE, missing '='")
	}
	opText, kindText, value = strings.TrimSpace(opText), strings.TrimSpace(kindText), strings.TrimSpace(value)
	switch opText {
	case "*", string(OpImage), string(OpSpeech), string(OpVideo):
	default:
		return "", "", "", fmt.Errorf("unknown operation %q (want image, speech, video or *)", opText)
	}
	kind = FaultKind(kindText)
	switch kind {
	case FaultLatency, FaultRateLimit, FaultBeforeCommit, FaultAfterCommit, FaultDrop:
	case FaultAsyncFail:
		if opText != string(OpVideo) {
			return "", "", "", fmt.Errorf("async_fail applies only to video, not %q", opText)
		}
	default:
		return "", "", "", fmt.Errorf("unknown fault kind %q (want latency, rate_limit, before_commit, after_commit, drop or async_fail)", kindText)
	}
	return opText, kind, value, nil
}

// parseFaultValue parses the VALUE of a kind: a duration and/or a
// probability. A kind turned off (P=0, or DUR=0 for latency) gets zero for
// both, so String round-trips.
func parseFaultValue(kind FaultKind, value string) (dur time.Duration, p float64, err error) {
	switch kind {
	case FaultLatency:
		dur, p, err = parseDurAtProb(value, true)
		if err == nil && dur > MaxLatency {
			err = fmt.Errorf("latency %s exceeds the maximum %s", dur, MaxLatency)
		}
		if dur == 0 || p == 0 {
			dur, p = 0, 0
		}
	case FaultRateLimit:
		dur, p, err = parseDurAtProb(value, false)
		switch {
		case err != nil:
		case strings.Contains(value, "@") && (dur < time.Second || dur%time.Second != 0):
			err = fmt.Errorf("retry-after %s must be a whole number of seconds, at least 1s", dur)
		case dur > MaxRetryAfter:
			err = fmt.Errorf("retry-after %s exceeds the maximum %s", dur, MaxRetryAfter)
		}
		if p == 0 {
			dur = 0
		}
	default:
		p, err = parseProb(value)
	}
	return dur, p, err
}

// set sets one kind's fault.
func (of *OpFaults) set(kind FaultKind, dur time.Duration, p float64) {
	switch kind {
	case FaultLatency:
		of.Latency, of.LatencyP = dur, p
	case FaultRateLimit:
		of.RetryAfter, of.RateLimit = dur, p
	case FaultBeforeCommit:
		of.BeforeCommit = p
	case FaultAfterCommit:
		of.AfterCommit = p
	case FaultDrop:
		of.Drop = p
	case FaultAsyncFail:
		of.AsyncFail = p
	}
}

// parseProb parses a probability in [0,1]. -0 becomes 0 so that String
// round-trips.
func parseProb(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("probability %q is not a number", s)
	}
	if !(p >= 0 && p <= 1) { // also refuses NaN
		return 0, fmt.Errorf("probability %q is outside [0,1]", s)
	}
	return p + 0, nil
}

// parseDurAtProb parses "DUR@P". For latency a bare "DUR" means P=1; for
// rate_limit a bare value is "P".
func parseDurAtProb(s string, bareIsDuration bool) (time.Duration, float64, error) {
	durText, probText, hasAt := strings.Cut(s, "@")
	if !hasAt {
		if !bareIsDuration {
			p, err := parseProb(s)
			return 0, p, err
		}
		probText = "1"
	}
	durText = strings.TrimSpace(durText)
	d, err := time.ParseDuration(durText)
	if err != nil {
		return 0, 0, fmt.Errorf("duration %q is not valid (want e.g. 200ms, 1s)", durText)
	}
	if d < 0 {
		return 0, 0, fmt.Errorf("duration %q is negative", durText)
	}
	p, err := parseProb(strings.TrimSpace(probText))
	if err != nil {
		return 0, 0, err
	}
	return d, p, nil
}

// Validate checks Faults built in code with the rules ParseFaults applies.
func (f Faults) Validate() error {
	for _, op := range Operations {
		of := f.For(op)
		probs := []struct {
			kind FaultKind
			p    float64
		}{
			{FaultLatency, of.LatencyP}, {FaultRateLimit, of.RateLimit}, {FaultBeforeCommit, of.BeforeCommit},
			{FaultAfterCommit, of.AfterCommit}, {FaultDrop, of.Drop}, {FaultAsyncFail, of.AsyncFail},
		}
		for _, pr := range probs {
			if !(pr.p >= 0 && pr.p <= 1) {
				return &FaultSpecError{Reason: fmt.Sprintf("%s:%s probability %v is outside [0,1]", op, pr.kind, pr.p)}
			}
		}
		switch {
		case of.Latency < 0 || of.Latency > MaxLatency:
			return &FaultSpecError{Reason: fmt.Sprintf("%s:latency %s is outside [0,%s]", op, of.Latency, MaxLatency)}
		case of.RetryAfter < 0 || of.RetryAfter > MaxRetryAfter || of.RetryAfter%time.Second != 0:
			return &FaultSpecError{Reason: fmt.Sprintf("%s:rate_limit retry-after %s must be whole seconds in [0,%s]", op, of.RetryAfter, MaxRetryAfter)}
		case op != OpVideo && of.AsyncFail != 0:
			return &FaultSpecError{Reason: fmt.Sprintf("async_fail applies only to video, not %s", op)}
		}
	}
	return nil
}

// String renders f as a canonical spec that ParseFaults turns back into f.
// The zero Faults renders as "".
func (f Faults) String() string {
	var parts []string
	ff := func(p float64) string { return strconv.FormatFloat(p, 'g', -1, 64) }
	for _, op := range Operations {
		of := f.For(op)
		if of.LatencyP != 0 && of.Latency != 0 {
			parts = append(parts, fmt.Sprintf("%s:latency=%s@%s", op, of.Latency, ff(of.LatencyP)))
		}
		if of.RateLimit != 0 {
			if of.RetryAfter != 0 {
				parts = append(parts, fmt.Sprintf("%s:rate_limit=%s@%s", op, of.RetryAfter, ff(of.RateLimit)))
			} else {
				parts = append(parts, fmt.Sprintf("%s:rate_limit=%s", op, ff(of.RateLimit)))
			}
		}
		for _, kp := range []struct {
			k FaultKind
			p float64
		}{{FaultBeforeCommit, of.BeforeCommit}, {FaultAfterCommit, of.AfterCommit}, {FaultDrop, of.Drop}, {FaultAsyncFail, of.AsyncFail}} {
			if kp.p != 0 {
				parts = append(parts, fmt.Sprintf("%s:%s=%s", op, kp.k, ff(kp.p)))
			}
		}
	}
	return strings.Join(parts, ",")
}

// retryAfterSeconds is the Retry-After header value for an injected 429.
func (of OpFaults) retryAfterSeconds() int {
	d := of.RetryAfter
	if d <= 0 {
		d = DefaultRetryAfter
	}
	return int(math.Ceil(d.Seconds()))
}
