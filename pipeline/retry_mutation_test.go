package pipeline

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// A ClassifiedError shows its cause only when it has one.
func TestClassifiedErrorText(t *testing.T) {
	t.Parallel()
	with := &ClassifiedError{Class: ClassTransient, Code: "provider_timeout", Message: "the provider did not answer", Cause: errors.New("dial tcp: i/o timeout")}
	if got, want := with.Error(), "provider_timeout (transient): the provider did not answer: dial tcp: i/o timeout"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	without := &ClassifiedError{Class: ClassPermanent, Code: "bad_prompt", Message: "the prompt was refused"}
	if got, want := without.Error(), "bad_prompt (permanent): the prompt was refused"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if strings.Contains(without.Error(), "<nil>") {
		t.Errorf("Error() = %q shows a nil cause", without.Error())
	}
}

// The doubling never overflows, even with a cap so large it never applies.
func TestRetryPolicyCeilingHugeCap(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Base: time.Second, Cap: math.MaxInt64, MaxAttempts: 100}
	for _, tt := range []struct {
		attempt int
		want    time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {11, 1024 * time.Second},
	} {
		if got := p.Ceiling(tt.attempt); got != tt.want {
			t.Errorf("Ceiling(%d) = %s, want %s", tt.attempt, got, tt.want)
		}
	}
	for _, attempt := range []int{40, 63, 64, 100, math.MaxInt32} {
		if got := p.Ceiling(attempt); got <= 0 || got > p.Cap {
			t.Errorf("Ceiling(%d) = %d, want within (0, Cap]", attempt, got)
		}
	}
}
