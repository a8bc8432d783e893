package api

import (
	"errors"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want map[string]string
		bad  bool
	}{
		{"", map[string]string{}, false},
		{"  ", map[string]string{}, false},
		{"tok-aaaaaaaaaaaaaaaa:acme", map[string]string{"tok-aaaaaaaaaaaaaaaa": "acme"}, false},
		{"tok-aaaaaaaaaaaaaaaa:acme, tok-bbbbbbbbbbbbbbbb:acme,tok-cccccccccccccccc:globex.eu",
			map[string]string{"tok-aaaaaaaaaaaaaaaa": "acme", "tok-bbbbbbbbbbbbbbbb": "acme", "tok-cccccccccccccccc": "globex.eu"}, false},
		{"short:acme", nil, true},
		{"tok-aaaaaaaaaaaaaaaa", nil, true},
		{"tok-aaaaaaaaaaaaaaaa:", nil, true},
		{":acme", nil, true},
		{"tok-aaaaaaaaaaaaaaaa:ac me", nil, true},
		{"tok-aaaaaaaaaaaaaaaa:acme,tok-aaaaaaaaaaaaaaaa:globex", nil, true},
		{"tok-aaaaaaaaaaaaaaaa:acme,", nil, true},
		{"tok-aaaa aaaaaaaaaaa:acme", nil, true},
		{"tok-ääääääääääääääää:acme", nil, true},
		{"tok-aaaaaaaaaaaaaaaa:" + strings.Repeat("t", 65), nil, true},
	}
	for _, tc := range cases {
		got, err := ParseTokens(tc.in)
		if tc.bad {
			if !errors.Is(err, pipeline.ErrInvalidInput) {
				t.Errorf("ParseTokens(%q) = %v, %v; want ErrInvalidInput", tc.in, got, err)
			} else if strings.Contains(err.Error(), "aaaaaaaaaaaaaaaa") {
				t.Errorf("error quotes a token: %v", err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("ParseTokens(%q) = %v, %v", tc.in, got, err)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("ParseTokens(%q)[%q] = %q, want %q", tc.in, k, got[k], v)
			}
		}
	}
}

func TestGenerateToken(t *testing.T) {
	t.Parallel()
	a, err := GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenerateToken()
	if a == b || len(a) < 50 || checkToken(a) != nil {
		t.Fatalf("tokens %q %q", a, b)
	}
	// A generated token works as configuration.
	m, err := ParseTokens(a + ":local")
	if err != nil || m[a] != "local" {
		t.Fatalf("%v %v", m, err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := e.srv.cfg
	cases := map[string]func(*Config){
		"no store":          func(c *Config) { c.Store = nil },
		"no objects":        func(c *Config) { c.Objects = nil },
		"no router":         func(c *Config) { c.Router = nil },
		"tiny body limit":   func(c *Config) { c.MaxBodyBytes = 10 },
		"short token":       func(c *Config) { c.Tokens = map[string]string{"short": "acme"} },
		"bad tenant":        func(c *Config) { c.Tokens = map[string]string{tokAcme: "a/b"} },
		"admin is a tenant": func(c *Config) { c.Tokens = map[string]string{tokAdmin: "acme"} },
		"short admin token": func(c *Config) { c.AdminToken = "admin" },
	}
	for name, mutate := range cases {
		c := base
		mutate(&c)
		if _, err := New(c); !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := New(base); err != nil {
		t.Fatal(err)
	}
}
