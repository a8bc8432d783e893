package routing

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

func mustBindings(t *testing.T, s string) Bindings {
	t.Helper()
	b, err := ParseBindings(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoute(t *testing.T) {
	t.Parallel()
	const unbound, poison = pipeline.ReasonUnboundVersion, pipeline.ReasonPoison
	tests := []struct {
		name     string
		bindings string // EDGEPIPE_BINDINGS
		pct      int
		id       string
		want     Decision // Detail checked for non-emptiness only
	}{
		{"v1 prefix", "v1,v2", 0, "v1-abc", Decision{Version: "v1", Queue: "render-v1"}},
		{"v2 prefix", "v1,v2", 0, "v2-abc", Decision{Version: "v2", Queue: "render-v2"}},
		{"v2 prefix, rollout irrelevant", "v1,v2", 100, "v2-abc", Decision{Version: "v2", Queue: "render-v2"}},
		{"v1 prefix at rollout 100", "v1,v2", 100, "v1-abc", Decision{Version: "v1", Queue: "render-v1"}},
		{"no prefix", "v1,v2", 0, "abc", Decision{Version: "v1", Queue: "render-v1"}},
		{"no prefix at rollout 100", "v1,v2", 100, "abc", Decision{Version: "v1", Queue: "render-v1"}},
		{"bare v2 is no prefix", "v1,v2", 0, "v2", Decision{Version: "v1", Queue: "render-v1"}},
		{"vx- is no prefix", "v1,v2", 0, "vx-abc", Decision{Version: "v1", Queue: "render-v1"}},
		{"default bindings", "", 0, "v2-abc", Decision{Version: "v2", Queue: "render-v2"}},

		{"v2 unbound", "v1", 0, "v2-abc", Decision{Version: "v2", DeadLetter: true, Reason: unbound}},
		{"v3", "v1,v2", 0, "v3-abc", Decision{Version: "v3", DeadLetter: true, Reason: unbound}},
		{"v3 bound", "v1,v2,v3", 0, "v3-abc", Decision{Version: "v3", Queue: "render-v3"}},
		{"v1 unbound", "v2", 100, "v1-abc", Decision{Version: "v1", DeadLetter: true, Reason: unbound}},
		{"no prefix, v1 unbound", "v2", 100, "abc", Decision{Version: "v1", DeadLetter: true, Reason: unbound}},

		{"malformed v-", "v1,v2", 0, "v-abc", Decision{DeadLetter: true, Reason: unbound}},
		{"malformed v01-", "v1,v2", 0, "v01-abc", Decision{DeadLetter: true, Reason: unbound}},
		{"malformed V2-", "v1,v2", 0, "V2-abc", Decision{DeadLetter: true, Reason: unbound}},
		{"malformed v2_", "v1,v2", 0, "v2_abc", Decision{DeadLetter: true, Reason: unbound}},
		{"malformed v2-", "v1,v2", 0, "v2-", Decision{DeadLetter: true, Reason: unbound}},
		{"malformed v0-", "v1,v2", 0, "v0-abc", Decision{DeadLetter: true, Reason: unbound}},
		{"malformed huge", "v1,v2", 0, "v123456789012345678901234567890-a", Decision{DeadLetter: true, Reason: unbound}},

		{"empty id", "v1,v2", 0, "", Decision{DeadLetter: true, Reason: poison}},
		{"bad chars", "v1,v2", 0, "v1-a/b", Decision{DeadLetter: true, Reason: poison}},
		{"too long", "v1,v2", 0, "v1-" + strings.Repeat("a", 62), Decision{DeadLetter: true, Reason: poison}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := NewRouter(Config{RolloutPercent: tt.pct, Bindings: mustBindings(t, tt.bindings)})
			if err != nil {
				t.Fatal(err)
			}
			got := r.Route(tt.id)
			if tt.want.DeadLetter != (got.Detail != "") {
				t.Errorf("Route(%q).Detail = %q: want set exactly for dead letters", tt.id, got.Detail)
			}
			got.Detail = ""
			if got != tt.want {
				t.Errorf("Route(%q) = %+v, want %+v", tt.id, got, tt.want)
			}
		})
	}
}

func TestRouteDetail(t *testing.T) {
	t.Parallel()
	r, err := NewRouter(Config{Bindings: mustBindings(t, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Route("v2-abc")
	for _, want := range []string{`"v2-abc"`, "v2", "EDGEPIPE_BINDINGS=v1"} {
		if !strings.Contains(d.Detail, want) {
			t.Errorf("Detail %q does not mention %q", d.Detail, want)
		}
	}
	if d := r.Route("V2-abc"); !strings.Contains(d.Detail, "malformed version prefix") {
		t.Errorf("malformed Detail %q does not say so", d.Detail)
	}
}

// No id, whatever the bindings, is routed to a version other than the one its
// prefix names (docs/design.md §9.5): the only outcomes are "its own version" and
// "dead letter".
func TestRouteNeverFallsBack(t *testing.T) {
	t.Parallel()
	ids := []string{"v1-a", "v2-a", "v3-a", "v10-a", "a", "v2", "V2-a", "v-a", "v01-a", "v2_a", "", "v2-ä"}
	for _, bind := range []string{"v1", "v2", "v3", "v1,v2", "v1,v3", "v2,v3", "v1,v2,v3"} {
		r := &Router{cfg: Config{Bindings: mustBindings(t, bind)}} // skip Validate: v1-less sets must route too
		for _, id := range ids {
			d := r.Route(id)
			p, err := ParseInstanceID(id)
			if err != nil {
				if !d.DeadLetter || d.Queue != "" {
					t.Errorf("bindings %s: Route(%q) = %+v, want a dead letter for an unparseable id", bind, id, d)
				}
				continue
			}
			want := p.VersionOrDefault()
			if d.Version != want {
				t.Errorf("bindings %s: Route(%q).Version = %q, want %q", bind, id, d.Version, want)
			}
			if d.DeadLetter {
				if d.Queue != "" || d.Reason != pipeline.ReasonUnboundVersion {
					t.Errorf("bindings %s: Route(%q) = %+v", bind, id, d)
				}
				continue
			}
			if d.Queue != QueueName(want) {
				t.Errorf("bindings %s: Route(%q).Queue = %q, want %q", bind, id, d.Queue, QueueName(want))
			}
		}
	}
}

func TestNewID(t *testing.T) {
	t.Parallel()
	for _, pct := range []int{0, 37, 100} {
		r, err := NewRouter(Config{RolloutPercent: pct})
		if err != nil {
			t.Fatal(err)
		}
		v2 := 0
		const n = 2000
		for i := range n {
			key := fmt.Sprintf("key-%d", i)
			id, err := r.NewID("acme", key, fmt.Sprintf("job%d", i))
			if err != nil {
				t.Fatal(err)
			}
			want := V1
			if Bucket("acme", key) < pct {
				want = V2
			}
			if !strings.HasPrefix(id, want+"-") {
				t.Fatalf("rollout %d: NewID(acme, %s) = %q, want version %s", pct, key, id, want)
			}
			if d := r.Route(id); d.DeadLetter || d.Version != want {
				t.Fatalf("rollout %d: Route(NewID) = %+v, want version %s", pct, d, want)
			}
			if want == V2 {
				v2++
			}
		}
		switch {
		case pct == 0 && v2 != 0, pct == 100 && v2 != n, pct == 37 && (v2 < n*34/100 || v2 > n*40/100):
			t.Errorf("rollout %d: %d of %d new ids are v2", pct, v2, n)
		}
	}
}

func TestNewIDRejectsBadSuffix(t *testing.T) {
	t.Parallel()
	var r Router // zero Router: rollout 0, default bindings
	for _, s := range []string{"", "-a", "a b", "ä", strings.Repeat("a", 62)} {
		if id, err := r.NewID("t", "k", s); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("NewID suffix %q = %q, %v; want ErrInvalidInput", s, id, err)
		}
	}
	if id, err := r.NewID("t", "k", strings.Repeat("a", 61)); err != nil || id != "v1-"+strings.Repeat("a", 61) {
		t.Errorf("NewID with 61-byte suffix = %q, %v", id, err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		pct      int
		bindings string
		wantErr  string // "" = valid
	}{
		{"defaults", 0, "", ""},
		{"rollout 37", 37, "", ""},
		{"rollout 100", 100, "v1,v2", ""},
		{"v2 only at 100", 100, "v2", ""},
		{"v1 only at 0", 0, "v1", ""},
		{"negative", -1, "", "0 to 100"},
		{"over 100", 101, "", "0 to 100"},
		// A rollout towards a version this process does not bind starts
		// (another process may bind it); Warnings says so loudly.
		{"rollout without v2", 1, "v1", ""},
		{"v1 traffic without v1", 99, "v2", ""},
		{"rollout 0 without v1", 0, "v2,v3", ""},
	}
	for _, tt := range tests {
		cfg := Config{RolloutPercent: tt.pct, Bindings: mustBindings(t, tt.bindings)}
		err := cfg.Validate()
		_, nrErr := NewRouter(cfg)
		if tt.wantErr == "" {
			if err != nil || nrErr != nil {
				t.Errorf("%s: Validate = %v, NewRouter = %v", tt.name, err, nrErr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: Validate = %v, want ErrInvalidInput mentioning %q", tt.name, err, tt.wantErr)
		}
		if nrErr == nil {
			t.Errorf("%s: NewRouter accepted an invalid config", tt.name)
		}
	}
	// A hand-built Bindings cannot smuggle in a bad version.
	bad := Config{Bindings: Bindings{versions: []string{"v1", "x"}}}
	if err := bad.Validate(); err == nil {
		t.Error("Validate accepted bindings with version x")
	}
	var zero Router
	if err := zero.Validate(); err != nil {
		t.Errorf("zero Router.Validate = %v", err)
	}
	if got := zero.Config().Bindings.String(); got != "v1,v2" {
		t.Errorf("zero Router bindings = %q, want v1,v2", got)
	}
}

// A rollout that mints ids of a version this process does not bind is a
// loud warning, not a refusal to start (docs/design.md §4).
func TestConfigWarnings(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pct      int
		bindings string
		want     []string
	}{
		{0, "", nil},
		{37, "v1,v2", nil},
		{0, "v1", nil}, // no new id is v2
		{1, "v1", []string{"does not bind v2"}},
		{100, "v1", []string{"does not bind v2"}},
		{50, "v2", []string{"does not bind v1"}},
		{0, "v2", []string{"does not bind v1"}},
		{100, "v2", nil},
	} {
		got := Config{RolloutPercent: tt.pct, Bindings: mustBindings(t, tt.bindings)}.Warnings()
		if len(got) != len(tt.want) {
			t.Errorf("pct %d bindings %q: warnings %q, want %d", tt.pct, tt.bindings, got, len(tt.want))
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], tt.want[i]) || !strings.Contains(got[i], "dead-lettered") {
				t.Errorf("pct %d bindings %q: warning %q, want it to mention %q and the dead-letter queue", tt.pct, tt.bindings, got[i], tt.want[i])
			}
		}
	}
}

// RouteLive runs a job whose version this process does not bind when a live
// process of the deployment binds it, and dead-letters it otherwise — never
// routing it to another version.
func TestRouteLive(t *testing.T) {
	t.Parallel()
	r, err := NewRouter(Config{RolloutPercent: 100, Bindings: mustBindings(t, "v1")})
	if err != nil {
		t.Fatalf("a rollout to an unbound version must start: %v", err)
	}
	for _, tt := range []struct {
		id        string
		live      []string
		wantQueue string
		wantDL    bool
	}{
		{"v2-a", nil, "", true},
		{"v2-a", []string{"v1"}, "", true},
		{"v2-a", []string{"v2"}, "render-v2", false},
		{"v1-a", nil, "render-v1", false},
		{"v3-a", []string{"v1", "v2"}, "", true},
		{"v3-a", []string{"v3"}, "render-v3", false},
	} {
		d := r.RouteLive(tt.id, tt.live)
		if d.DeadLetter != tt.wantDL || d.Queue != tt.wantQueue {
			t.Errorf("RouteLive(%s, %v) = %+v, want queue %q dead-letter %v", tt.id, tt.live, d, tt.wantQueue, tt.wantDL)
		}
		if d.DeadLetter && d.Reason != pipeline.ReasonUnboundVersion {
			t.Errorf("RouteLive(%s, %v) reason %q, want unbound_version", tt.id, tt.live, d.Reason)
		}
	}
}
