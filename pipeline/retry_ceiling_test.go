package pipeline

import (
	"testing"
	"time"
)

// Ceiling is documented as min(Cap, Base·2^(attempt-1)). Its overflow guard
// returns Cap as soon as the running value reaches Cap/2, which for a cap
// with an odd number of nanoseconds is one more than the formula: Base 5ns,
// Cap 11ns, attempt 2 gives 11ns instead of min(11, 10) = 10ns. Found by the
// surviving mutant retry.go `d >= p.Cap/2` → `d > p.Cap/2`, which computes
// the documented value. Harmless in practice (1 ns), but the guard and the
// doc disagree.
func TestRetryPolicyCeilingMatchesFormulaForOddCap(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Base: 5 * time.Nanosecond, Cap: 11 * time.Nanosecond, MaxAttempts: 5}
	if got := p.Ceiling(2); got != 10*time.Nanosecond {
		t.Fatalf("Ceiling(2) = %s, want min(11ns, 5ns·2) = 10ns", got)
	}
}
