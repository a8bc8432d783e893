package pipeline

import (
	"errors"
	"testing"
)

func TestCheckTransitionTable(t *testing.T) {
	t.Parallel()
	allowed := map[[2]Status]bool{}
	for _, e := range [][2]Status{
		{StatusPending, StatusRunning}, {StatusPending, StatusCanceled}, {StatusPending, StatusDeadLettered},
		{StatusRunning, StatusRunning}, {StatusRunning, StatusPending}, {StatusRunning, StatusRetryWait},
		{StatusRunning, StatusNeedsReview}, {StatusRunning, StatusSucceeded}, {StatusRunning, StatusFailed},
		{StatusRunning, StatusCanceled}, {StatusRunning, StatusDeadLettered},
		{StatusRetryWait, StatusRunning}, {StatusRetryWait, StatusCanceled}, {StatusRetryWait, StatusDeadLettered},
		{StatusNeedsReview, StatusPending}, {StatusNeedsReview, StatusFailed}, {StatusNeedsReview, StatusCanceled},
		{StatusDeadLettered, StatusPending},
	} {
		allowed[e] = true
	}
	// Every pair of statuses, allowed or refused, is checked against the
	// expectation above, so adding an edge to the table without meaning to
	// fails here.
	for _, from := range AllStatuses {
		for _, to := range AllStatuses {
			t.Run(string(from)+">"+string(to), func(t *testing.T) {
				t.Parallel()
				err := CheckTransition(from, to)
				want := allowed[[2]Status{from, to}]
				if want && err != nil {
					t.Fatalf("want allowed, got %v", err)
				}
				if !want {
					if err == nil {
						t.Fatal("want refused, got allowed")
					}
					if !errors.Is(err, ErrInvalidTransition) {
						t.Fatalf("error %v does not match ErrInvalidTransition", err)
					}
					if errors.Is(err, ErrTerminal) != from.Terminal() {
						t.Fatalf("ErrTerminal match = %v, want %v", errors.Is(err, ErrTerminal), from.Terminal())
					}
				}
			})
		}
	}
	if err := CheckTransition("bogus", StatusRunning); err == nil {
		t.Fatal("unknown from status allowed")
	}
}

func TestTerminalAndSettled(t *testing.T) {
	t.Parallel()
	cases := []struct {
		s                 Status
		terminal, settled bool
	}{
		{StatusPending, false, false}, {StatusRunning, false, false}, {StatusRetryWait, false, false},
		{StatusNeedsReview, false, true}, {StatusSucceeded, true, true}, {StatusFailed, true, true},
		{StatusCanceled, true, true}, {StatusDeadLettered, true, true},
	}
	if len(cases) != len(AllStatuses) {
		t.Fatalf("table covers %d statuses, set has %d", len(cases), len(AllStatuses))
	}
	for _, c := range cases {
		if c.s.Terminal() != c.terminal || c.s.Settled() != c.settled {
			t.Errorf("%s: terminal=%v settled=%v, want %v %v", c.s, c.s.Terminal(), c.s.Settled(), c.terminal, c.settled)
		}
		if len(transitions[c.s]) == 0 != (c.terminal && c.s != StatusDeadLettered) {
			t.Errorf("%s: outgoing edges %v disagree with terminality", c.s, transitions[c.s])
		}
	}
}

func TestParseStatus(t *testing.T) {
	t.Parallel()
	for _, s := range AllStatuses {
		got, err := ParseStatus(string(s))
		if err != nil || got != s {
			t.Errorf("ParseStatus(%q) = %q, %v", s, got, err)
		}
	}
	for _, bad := range []string{"", "PENDING", "done", "running "} {
		if _, err := ParseStatus(bad); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("ParseStatus(%q) err = %v, want ErrInvalidInput", bad, err)
		}
	}
}

func TestTransitionsIsACopy(t *testing.T) {
	t.Parallel()
	m := Transitions()
	m[StatusSucceeded] = append(m[StatusSucceeded], StatusRunning)
	if CheckTransition(StatusSucceeded, StatusRunning) == nil {
		t.Fatal("mutating the copy changed the table")
	}
}
