package pipeline

import "fmt"

// MaxOperatorReason bounds an operator's reason for a decision or a
// discard (bytes). The API refuses a longer one before the store does.
const MaxOperatorReason = 1000

// CheckDecisionReason refuses a reason over MaxOperatorReason. Stores call
// it before they look the job up, so an overlong reason is refused as bad
// input whether or not the job exists.
func CheckDecisionReason(reason string) error {
	if len(reason) > MaxOperatorReason {
		return fmt.Errorf("%w: reason is longer than %d bytes", ErrInvalidInput, MaxOperatorReason)
	}
	return nil
}

// DecisionOutcome is what an operator's decision d on job j (read under the
// job's lock) does, and the detail of the decision event that records it:
// retry puts the job back on its queue (pending); fail ends it (failed)
// with a message saying who failed it and why, keeping the error class and
// code it was reviewed for. It refuses an unknown decision, a reason over
// MaxOperatorReason and a job that is not in needs_review. Every job store
// decides through it.
func DecisionOutcome(j Job, d ReviewDecision, operator, reason string) (Outcome, map[string]any, error) {
	if err := CheckDecisionReason(reason); err != nil {
		return Outcome{}, nil, err
	}
	var o Outcome
	switch d {
	case DecisionRetry:
		o = Outcome{Status: StatusPending}
	case DecisionFail:
		msg := "failed by operator"
		if operator != "" {
			msg += " " + operator
		}
		if reason != "" {
			msg += ": " + reason
		}
		o = Outcome{Status: StatusFailed, ErrorClass: j.LastErrorClass, ErrorCode: j.LastErrorCode, ErrorMessage: msg}
	default:
		return Outcome{}, nil, fmt.Errorf("%w: decision must be retry or fail, got %q", ErrInvalidInput, d)
	}
	if j.Status != StatusNeedsReview {
		return Outcome{}, nil, &TransitionError{From: j.Status, To: o.Status}
	}
	ev := map[string]any{"decision": d, "operator": operator}
	if reason != "" {
		ev["reason"] = reason
	}
	return o, ev, nil
}
