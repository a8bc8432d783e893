package pipeline

import (
	"context"
	"errors"
	"testing"
)

// takeoverLedger hands the first claim a dead attempt's cleanup
// (ErrClaimTakenOver), then grants the claim; FinishAbandon answers
// finishErr.
type takeoverLedger struct {
	ObjectLedger
	claims, finishes int
	finishErr        error
}

func (l *takeoverLedger) ClaimObject(context.Context, Lease, string) error {
	l.claims++
	if l.claims == 1 {
		return ErrClaimTakenOver
	}
	return nil
}

func (l *takeoverLedger) FinishAbandon(context.Context, string, string) error {
	l.finishes++
	return l.finishErr
}

// deleteCounter counts deletes and succeeds.
type deleteCounter struct {
	ObjectStore
	deletes int
}

func (d *deleteCounter) Delete(context.Context, string) error {
	d.deletes++
	return nil
}

// claimKey finishes a cleanup it took over (delete, FinishAbandon) and
// claims again; when the ledger refuses to end the cleanup it does not
// claim over it, and the failure is the store's (transient), not a fence.
func TestClaimKeyTakeover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		finishErr error
		claims    int
	}{
		{"cleanup finished", nil, 2},
		{"cleanup refused", errors.New("database is locked"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			led := &takeoverLedger{finishErr: tc.finishErr}
			objs := &deleteCounter{}
			err := claimKey(t.Context(), led, objs, Lease{JobID: "j", AttemptID: "a"}, "units/j/1/image.png")
			if objs.deletes != 1 || led.finishes != 1 || led.claims != tc.claims {
				t.Errorf("%d deletes, %d finishes, %d claims; want 1, 1, %d", objs.deletes, led.finishes, led.claims, tc.claims)
			}
			if tc.finishErr == nil {
				if err != nil {
					t.Fatalf("claimKey = %v, want the claim", err)
				}
				return
			}
			var ce *ClassifiedError
			if !errors.As(err, &ce) || ce.Class != ClassTransient || !errors.Is(err, tc.finishErr) {
				t.Fatalf("claimKey = %v, want a transient store error wrapping %v", err, tc.finishErr)
			}
		})
	}
}
