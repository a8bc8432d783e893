package pipeline

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// presenceStore is a PresenceStore that records what the heartbeat asks
// of it and fails or answers as a test says.
type presenceStore struct {
	mu          sync.Mutex
	announces   int
	failAfter   int // announces after the first this many fail (0: none fail)
	lives       int
	deadLetters []DeadLetterUnservedParams
	moved       int   // what DeadLetterUnserved reports
	moveErr     error // and its error
}

func (s *presenceStore) AnnounceBindings(context.Context, *AnnounceBindingsParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.announces++
	if s.failAfter > 0 && s.announces > s.failAfter {
		return errors.New("database is locked")
	}
	return nil
}

func (s *presenceStore) WithdrawBindings(context.Context, string) error { return nil }

func (s *presenceStore) LiveBindings(context.Context, *LiveBindingsParams) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lives++
	return []string{"v1"}, nil
}

func (s *presenceStore) DeadLetterUnserved(_ context.Context, p *DeadLetterUnservedParams) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadLetters = append(s.deadLetters, *p)
	return s.moved, s.moveErr
}

func (s *presenceStore) counts() (announces, lives, deadLetters int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.announces, s.lives, len(s.deadLetters)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// NewPresence defaults a zero interval and a zero patience, keeps set and
// negative (never) patience, and refuses a negative interval.
func TestNewPresenceDefaults(t *testing.T) {
	t.Parallel()
	st := &presenceStore{}
	base := PresenceConfig{Store: st, ProcessID: "p", Role: "worker"}
	for _, tc := range []struct {
		interval, unserved         time.Duration
		wantInterval, wantUnserved time.Duration
	}{
		{0, 0, DefaultPresenceInterval, DefaultUnservedAfter},
		{time.Second, 5 * time.Minute, time.Second, 5 * time.Minute},
		{time.Second, -1, time.Second, -1},
	} {
		cfg := base
		cfg.Interval, cfg.UnservedAfter = tc.interval, tc.unserved
		p, err := NewPresence(cfg)
		if err != nil {
			t.Fatalf("NewPresence(interval %v, unserved %v): %v", tc.interval, tc.unserved, err)
		}
		if p.cfg.Interval != tc.wantInterval || p.cfg.UnservedAfter != tc.wantUnserved {
			t.Errorf("NewPresence(interval %v, unserved %v) = interval %v, unserved %v; want %v, %v",
				tc.interval, tc.unserved, p.cfg.Interval, p.cfg.UnservedAfter, tc.wantInterval, tc.wantUnserved)
		}
	}
	cfg := base
	cfg.Interval = -time.Second
	if _, err := NewPresence(cfg); err == nil {
		t.Error("NewPresence accepted a negative interval")
	}
}

// The heartbeat: a beat whose announce failed is logged and skips the
// dead-lettering (this process may not count as live); a dead-lettering
// asks for jobs idle for UnservedAfter before now, and is logged when it
// moved jobs or failed, and only then.
func TestPresenceHeartbeat(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		store     *presenceStore
		unserved  time.Duration
		wantLogs  []string
		wantNoLog []string
	}{
		{"announce fails", &presenceStore{failAfter: 1}, time.Minute, []string{"bindings heartbeat failed"}, []string{"dead-lettering"}},
		{"nothing to move", &presenceStore{}, time.Minute, nil, []string{"heartbeat failed", "dead-lettering", "moved to the dead-letter queue"}},
		{"jobs moved", &presenceStore{moved: 3}, time.Minute, []string{"moved to the dead-letter queue"}, []string{"dead-lettering"}},
		{"move fails", &presenceStore{moveErr: errors.New("disk I/O error")}, time.Minute, []string{"dead-lettering jobs of unbound versions failed"}, []string{"moved to"}},
		{"never", &presenceStore{}, -1, nil, []string{"dead-lettering", "moved to"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs lockedBuffer
			p, err := NewPresence(PresenceConfig{Store: tc.store, ProcessID: "p", Role: "worker", Versions: []string{"v1"},
				Interval: 2 * time.Millisecond, UnservedAfter: tc.unserved, Clock: NewManualClock(now),
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for announces, _, _ := tc.store.counts(); announces < 6; announces, _, _ = tc.store.counts() {
				if time.Now().After(deadline) {
					t.Fatalf("%d announces in 10 s at a 2 ms interval", announces)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if err := p.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			_, lives, moves := tc.store.counts()
			switch {
			case tc.store.failAfter > 0 || tc.unserved < 0:
				if lives != 0 || moves != 0 {
					t.Errorf("%d live-binding reads and %d dead-letterings, want none", lives, moves)
				}
			case moves == 0:
				t.Error("no dead-lettering in 5 beats")
			}
			for _, d := range tc.store.deadLetters {
				if want := now.Add(-tc.unserved); !d.IdleSince.Equal(want) || len(d.Live) != 1 || d.Live[0] != "v1" {
					t.Errorf("DeadLetterUnserved(%+v), want idle since %v for live [v1]", d, want)
				}
			}
			out := logs.String()
			for _, s := range tc.wantLogs {
				if !strings.Contains(out, s) {
					t.Errorf("log lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tc.wantNoLog {
				if strings.Contains(out, s) {
					t.Errorf("log has %q:\n%s", s, out)
				}
			}
		})
	}
}

// blockingAnnounce is a presenceStore whose announces after the first wait
// for their context to end and then fail with its error, as a driver's
// query does when Stop cancels it.
type blockingAnnounce struct {
	*presenceStore
	blocked chan struct{} // closed when an announce is waiting
	once    sync.Once
}

func (s *blockingAnnounce) AnnounceBindings(ctx context.Context, p *AnnounceBindingsParams) error {
	if announces, _, _ := s.counts(); announces == 0 {
		return s.presenceStore.AnnounceBindings(ctx, p)
	}
	s.once.Do(func() { close(s.blocked) })
	<-ctx.Done()
	return ctx.Err()
}

// A beat whose announce Stop cut short neither dead-letters (this process
// may not count as live) nor warns (nothing is wrong).
func TestPresenceStopDuringAnnounce(t *testing.T) {
	t.Parallel()
	st := &blockingAnnounce{presenceStore: &presenceStore{}, blocked: make(chan struct{})}
	var logs lockedBuffer
	p, err := NewPresence(PresenceConfig{Store: st, ProcessID: "p", Role: "worker", Versions: []string{"v1"},
		Interval: time.Millisecond, UnservedAfter: time.Minute, Clock: NewManualClock(time.Now()),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-st.blocked
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, lives, moves := st.counts(); lives != 0 || moves != 0 {
		t.Errorf("%d live-binding reads and %d dead-letterings after a beat Stop cut short, want none", lives, moves)
	}
	if logs.String() != "" {
		t.Errorf("a beat Stop cut short logged:\n%s", logs.String())
	}
}
