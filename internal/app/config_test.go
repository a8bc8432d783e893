package app

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"edgepipe/api"
	"edgepipe/pipeline"
	"edgepipe/provider"
	"edgepipe/provider/fake"
	"edgepipe/provider/replicate"
	"edgepipe/provider/workersai"
	"edgepipe/render"
	"edgepipe/routing"
)

func TestHTTPSettings(t *testing.T) {
	t.Parallel()
	read := func(env map[string]string) (Config, error) {
		var environ []string
		for k, v := range env {
			environ = append(environ, k+"="+v)
		}
		return FromEnv(func(k string) string { return env[k] }, environ)
	}
	c, err := read(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.ReadHeaderTimeout != api.DefaultReadHeaderTimeout || c.HTTP.ReadTimeout != api.DefaultReadTimeout ||
		c.HTTP.IdleTimeout != api.DefaultIdleTimeout || c.HTTP.MaxConns != api.DefaultMaxConns || c.SSEMaxAge != api.DefaultSSEMaxAge {
		t.Fatalf("defaults: %+v, SSE max age %s", c.HTTP, c.SSEMaxAge)
	}
	c, err = read(map[string]string{"EDGEPIPE_HTTP_READ_HEADER_TIMEOUT": "2s", "EDGEPIPE_HTTP_READ_TIMEOUT": "15s",
		"EDGEPIPE_HTTP_IDLE_TIMEOUT": "1m", "EDGEPIPE_HTTP_MAX_CONNS": "64", "EDGEPIPE_SSE_MAX_AGE": "5m"})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP != (api.HTTPConfig{ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 15 * time.Second, IdleTimeout: time.Minute, MaxConns: 64}) ||
		c.SSEMaxAge != 5*time.Minute {
		t.Fatalf("%+v %s", c.HTTP, c.SSEMaxAge)
	}
	for k, v := range map[string]string{
		"EDGEPIPE_HTTP_READ_HEADER_TIMEOUT": "1ms",
		"EDGEPIPE_HTTP_READ_TIMEOUT":        "soon",
		"EDGEPIPE_HTTP_IDLE_TIMEOUT":        "-1s",
		"EDGEPIPE_HTTP_MAX_CONNS":           "0",
		"EDGEPIPE_SSE_MAX_AGE":              "10ms",
	} {
		if _, err := read(map[string]string{k: v}); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
	// The whole request cannot take less time than its headers.
	if _, err := read(map[string]string{"EDGEPIPE_HTTP_READ_HEADER_TIMEOUT": "30s", "EDGEPIPE_HTTP_READ_TIMEOUT": "5s"}); err == nil ||
		!strings.Contains(err.Error(), "EDGEPIPE_HTTP_READ_TIMEOUT") {
		t.Errorf("read timeout below header timeout: %v", err)
	}
}

// Build hands the configured limits to the server it makes.
func TestBuildAppliesHTTPSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir, map[string]string{"EDGEPIPE_HTTP_READ_TIMEOUT": "20s", "EDGEPIPE_HTTP_IDLE_TIMEOUT": "40s"})
	a, err := Open(t.Context(), cfg, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p, err := a.Build(t.Context(), true, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Listener.Close()
	if p.HTTP.ReadTimeout != 20*time.Second || p.HTTP.IdleTimeout != 40*time.Second || p.HTTP.ReadHeaderTimeout != api.DefaultReadHeaderTimeout {
		t.Fatalf("%+v", p.HTTP)
	}
}

// The listener Build makes serves at most EDGEPIPE_HTTP_MAX_CONNS
// connections at once.
func TestBuildCapsConnections(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir(), map[string]string{"EDGEPIPE_HTTP_MAX_CONNS": "1"})
	a, err := Open(t.Context(), cfg, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p, err := a.Build(t.Context(), true, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	go p.HTTP.Serve(p.Listener)
	defer p.HTTP.Close()
	addr := p.Listener.Addr().String()
	hold, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	time.Sleep(100 * time.Millisecond) // accepted: the one slot is taken
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(400 * time.Millisecond))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("a second connection was served with EDGEPIPE_HTTP_MAX_CONNS=1")
	}
	hold.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("once the slot freed: %v %v", resp, err)
	}
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestRoutingSettings(t *testing.T) {
	t.Parallel()
	cfg, err := routingSettings(envOf(nil))
	if err != nil || cfg.RolloutPercent != 0 || cfg.Bindings.String() != "v1,v2" {
		t.Errorf("empty env: %+v, %v", cfg, err)
	}
	cfg, err = routingSettings(envOf(map[string]string{routing.EnvRolloutPercent: "37", routing.EnvBindings: "v2,v1"}))
	if err != nil || cfg.RolloutPercent != 37 || cfg.Bindings.String() != "v1,v2" {
		t.Errorf("37/v2,v1: %+v, %v", cfg, err)
	}
	for _, m := range []map[string]string{
		{routing.EnvRolloutPercent: "abc"},
		{routing.EnvBindings: "x"},
		{routing.EnvRolloutPercent: "101"},
	} {
		if _, err := routingSettings(envOf(m)); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("routingSettings(%v) = %v, want ErrInvalidInput", m, err)
		}
	}
	// A rollout to a version this process does not bind starts, warned.
	cfg, err = routingSettings(envOf(map[string]string{routing.EnvRolloutPercent: "100", routing.EnvBindings: "v1"}))
	if err != nil || len(cfg.Warnings()) != 1 {
		t.Errorf("100/v1: %+v, %v, warnings %q; want it to start with one warning", cfg, err, cfg.Warnings())
	}
	// The exact name of the rollout setting is part of the contract.
	if routing.EnvRolloutPercent != "WORKFLOW_V2_ROLLOUT_PERCENT" {
		t.Errorf("rollout setting renamed to %s", routing.EnvRolloutPercent)
	}
}

func TestRenderSettings(t *testing.T) {
	t.Parallel()
	env := map[string]string{render.EnvFFmpeg: "/opt/ff/ffmpeg", render.EnvFFprobe: "/opt/ff/ffprobe", render.EnvPreset: "fast"}
	c, err := FromEnv(envOf(env), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Render.WithDefaults()
	if r.FFmpegPath != "/opt/ff/ffmpeg" || r.FFprobePath != "/opt/ff/ffprobe" || r.Preset != "fast" {
		t.Fatalf("env not applied: %+v", r)
	}
	if c, err = FromEnv(envOf(nil), nil); err != nil {
		t.Fatal(err)
	}
	r = c.Render.WithDefaults()
	if r.FFmpegPath != "ffmpeg" || r.Preset != render.DefaultPreset {
		t.Fatalf("empty env should give defaults: %+v", r)
	}
}

func TestProviderSettings(t *testing.T) {
	t.Parallel()
	c, err := ProviderSettings(envOf(map[string]string{provider.EnvURL: " http://h:1 ", provider.EnvTimeout: "90s"}))
	if err != nil || c.BaseURL != "http://h:1" || c.Timeout != 90*time.Second {
		t.Fatalf("ProviderSettings = %+v, %v", c, err)
	}
	c, err = ProviderSettings(envOf(nil))
	if err != nil || c.Timeout != 0 || c.BaseURL != "" {
		t.Fatalf("unset: %+v, %v", c, err)
	}
	for _, bad := range []string{"soon", "-1s", "0"} {
		_, err := ProviderSettings(envOf(map[string]string{provider.EnvTimeout: bad}))
		if err == nil || !strings.Contains(err.Error(), provider.EnvTimeout) || !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("timeout %q: err = %v", bad, err)
		}
	}
}

func TestProviderRoutingSettings(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(envOf(map[string]string{provider.EnvProvider: "workers-ai", provider.EnvProviderImage: "replicate",
		provider.EnvProviderSpeech: "fake", provider.EnvProviderVideo: "replicate"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := provider.RoutingConfig{All: "workers-ai", Image: "replicate", Speech: "fake", Video: "replicate"}
	if c.ProviderRouting != want {
		t.Fatalf("ProviderRouting = %+v, want %+v", c.ProviderRouting, want)
	}
}

func TestFakeSettings(t *testing.T) {
	t.Parallel()
	c, err := FakeSettings(envOf(map[string]string{
		fake.EnvFaults: "speech:drop=0.5", fake.EnvSeed: "42", fake.EnvVideoProcessing: "1s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Faults.Speech.Drop != 0.5 || c.Seed != 42 || c.VideoProcessing != time.Second {
		t.Fatalf("FakeSettings = %+v", c)
	}
	c, err = FakeSettings(envOf(nil))
	if err != nil || c.Faults != (fake.Faults{}) || c.Seed != 0 || c.VideoProcessing != 0 {
		t.Fatalf("empty env: %+v, %v", c, err)
	}
	// An explicit 0 means no artificial processing time, not the default.
	if c, err = FakeSettings(envOf(map[string]string{fake.EnvVideoProcessing: "0s"})); err != nil || c.VideoProcessing >= 0 {
		t.Fatalf("explicit 0: %+v, %v", c, err)
	}
	for _, bad := range []map[string]string{
		{fake.EnvFaults: "speech:drop=2"},
		{fake.EnvSeed: "-1"},
		{fake.EnvVideoProcessing: "soon"},
	} {
		_, err := FakeSettings(envOf(bad))
		if err == nil {
			t.Fatalf("FakeSettings(%v) succeeded", bad)
		}
		for k := range bad {
			if !strings.Contains(err.Error(), k) {
				t.Errorf("error %q does not name %s", err, k)
			}
		}
	}
}

func TestProviderCredentialSettings(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(envOf(map[string]string{
		workersai.EnvAccountID: " acc ", workersai.EnvAPIToken: "cf-tok", workersai.EnvAPIBase: "http://127.0.0.1:9/gw",
		workersai.EnvModelImage: "@cf/bytedance/stable-diffusion-xl-lightning", workersai.EnvModelSpeech: " ",
		replicate.EnvAPIToken: "r8_tok", replicate.EnvAPIBase: "http://127.0.0.1:9", replicate.EnvModelVideo: "wan-video/wan-2.1-t2v-480p",
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := c.WorkersAI
	if w.AccountID != "acc" || w.APIToken != "cf-tok" || w.BaseURL != "http://127.0.0.1:9/gw" ||
		!maps.Equal(w.Models, map[string]string{pipeline.OpImage: "@cf/bytedance/stable-diffusion-xl-lightning"}) {
		t.Errorf("WorkersAI = %+v", w)
	}
	r := c.Replicate
	if r.APIToken != "r8_tok" || r.BaseURL != "http://127.0.0.1:9" ||
		!maps.Equal(r.Models, map[string]string{pipeline.OpVideoSubmit: "wan-video/wan-2.1-t2v-480p"}) {
		t.Errorf("Replicate = %+v", r)
	}
}

// EDGEPIPE_DATABASE_URL is a Postgres URL or empty (SQLite); anything else
// is refused at start-up without echoing the value, which may hold a
// password.
func TestDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		url, kind string
		ok        bool
	}{
		{"", "sqlite", true},
		{"postgres://edgepipe:pw@db:5432/edgepipe", "postgres", true},
		{"postgresql://db/edgepipe?sslmode=disable", "postgres", true},
		{"mysql://u:sekrit@db/x", "", false},
		{"postgres:///nohost", "", false},
		{"sekrit", "", false},
	} {
		env := map[string]string{"EDGEPIPE_DATABASE_URL": tt.url}
		cfg, err := FromEnv(func(k string) string { return env[k] }, nil)
		if tt.ok != (err == nil) {
			t.Errorf("%q: err = %v", tt.url, err)
			continue
		}
		if err != nil {
			if strings.Contains(err.Error(), "sekrit") || !strings.Contains(err.Error(), "EDGEPIPE_DATABASE_URL") {
				t.Errorf("%q: error %q must name the setting and not echo it", tt.url, err)
			}
			continue
		}
		if cfg.DatabaseKind() != tt.kind || cfg.DatabaseURL() != tt.url {
			t.Errorf("%q: kind %s url %q", tt.url, cfg.DatabaseKind(), cfg.DatabaseURL())
		}
	}
}

// EDGEPIPE_TENANT_MAX_RUNNING: empty or 0 is no limit; a negative or
// non-integer value is a one-line configuration error naming the setting.
func TestTenantMaxRunningSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value string
		want  int
		bad   bool
	}{
		{"", pipeline.DefaultTenantMaxRunning, false},
		{"0", 0, false},
		{"3", 3, false},
		{"-1", 0, true},
		{"1.5", 0, true},
		{"two", 0, true},
		{"1000001", 0, true},
	} {
		env := map[string]string{}
		if tc.value != "" {
			env["EDGEPIPE_TENANT_MAX_RUNNING"] = tc.value
		}
		c, err := parse(envOf(env))
		switch {
		case tc.bad && (err == nil || !strings.Contains(err.Error(), "EDGEPIPE_TENANT_MAX_RUNNING") || strings.Contains(err.Error(), "\n")):
			t.Errorf("%q: %v, want a one-line error naming the setting", tc.value, err)
		case !tc.bad && (err != nil || c.TenantMaxRunning != tc.want):
			t.Errorf("%q: %d, %v; want %d", tc.value, c.TenantMaxRunning, err, tc.want)
		}
	}
}

// EDGEPIPE_RATE_LIMITS: empty is no limits; a bad value is one line naming
// the setting.
func TestRateLimitSettings(t *testing.T) {
	t.Parallel()
	read := func(v string) (Config, error) {
		env := map[string]string{EnvRateLimits: v}
		return FromEnv(func(k string) string { return env[k] }, []string{EnvRateLimits + "=" + v})
	}
	c, err := read("")
	if err != nil || c.RateLimits != nil {
		t.Fatalf("empty: %+v, %v", c.RateLimits, err)
	}
	c, err = read("workers-ai:image=60/min:4,replicate:video_submit=10/min:2")
	want := []pipeline.RateLimit{
		{Provider: "workers-ai", Op: pipeline.OpImage, Requests: 60, Per: time.Minute, Burst: 60, Concurrency: 4},
		{Provider: "replicate", Op: pipeline.OpVideoSubmit, Requests: 10, Per: time.Minute, Burst: 10, Concurrency: 2},
	}
	if err != nil || len(c.RateLimits) != 2 || c.RateLimits[0] != want[0] || c.RateLimits[1] != want[1] {
		t.Fatalf("got %+v, %v", c.RateLimits, err)
	}
	for _, bad := range []string{"workers-ai:image=60/day", "workers-ai=60/min", "a:image=1/s,a:image=2/s", "a:render=1/s"} {
		_, err := read(bad)
		if err == nil || !strings.HasPrefix(err.Error(), EnvRateLimits+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v; want one line naming %s", bad, err, EnvRateLimits)
		}
	}
}
