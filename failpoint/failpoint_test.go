package failpoint

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec string
		ok   bool
	}{
		{"", true}, {"after_claim=crash", true}, {"mid_upload=error,before_ack=delay(5)", true},
		{"after_provider_intent=crash@3", true}, {"nope=crash", false}, {"after_claim", false},
		{"after_claim=explode", false}, {"after_claim=delay(x)", false}, {"after_claim=crash@0", false},
		{"after_claim=delay(-1)", false},
	} {
		_, err := Parse(c.spec, nil)
		if (err == nil) != c.ok {
			t.Errorf("Parse(%q) err=%v, want ok=%v", c.spec, err, c.ok)
		}
	}
	if s, _ := Parse("", nil); s.Func() != nil {
		t.Fatal("an empty spec must cost nothing (nil hook)")
	}
}

func TestFire(t *testing.T) {
	t.Parallel()
	s, err := Parse("mid_upload=error@2,before_ack=delay(20)", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Fire(ctx, "mid_upload"); err != nil {
		t.Fatal("fired on hit 1, want only hit 2")
	}
	if err := s.Fire(ctx, "mid_upload"); !errors.Is(err, ErrInjected) {
		t.Fatalf("hit 2: %v", err)
	}
	if err := s.Fire(ctx, "mid_upload"); err != nil {
		t.Fatal("fired on hit 3")
	}
	start := time.Now()
	if err := s.Fire(ctx, "before_ack"); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("delay: %v after %s", err, time.Since(start))
	}
	if err := s.Fire(ctx, "after_claim"); err != nil {
		t.Fatal("an unset point fired")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("after_claim=crash,mid_upload=delay(10)@2")
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := Parse(spec, nil)
		if err == nil && s != nil {
			for name, p := range s.points {
				if p.action == "" || name == "" {
					t.Fatalf("accepted %q with an empty point", spec)
				}
			}
		}
	})
}
