package provider_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     provider.Config
		wantErr string // "" = valid
	}{
		{"http", provider.Config{BaseURL: "http://127.0.0.1:8081"}, ""},
		{"https with prefix", provider.Config{BaseURL: "https://api.example.com/gen/"}, ""},
		{"timeout", provider.Config{BaseURL: "http://h", Timeout: time.Second}, ""},
		{"empty", provider.Config{}, "is required"},
		{"blank", provider.Config{BaseURL: "  "}, "is required"},
		{"relative", provider.Config{BaseURL: "/v1"}, "absolute http(s)"},
		{"no scheme", provider.Config{BaseURL: "127.0.0.1:8081"}, "absolute http(s)"},
		{"ftp", provider.Config{BaseURL: "ftp://h/x"}, "absolute http(s)"},
		{"no host", provider.Config{BaseURL: "http:///v1"}, "with a host"},
		{"opaque", provider.Config{BaseURL: "http:h"}, "with a host"},
		{"query", provider.Config{BaseURL: "http://h/?x=1"}, "query or fragment"},
		{"credentials", provider.Config{BaseURL: "http://user:hunter2@h/"}, "credentials"},
		{"unparsable", provider.Config{BaseURL: "http://h:port/x\x7f"}, "absolute http(s)"},
		{"negative timeout", provider.Config{BaseURL: "http://h", Timeout: -time.Second}, provider.EnvTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			_, newErr := provider.New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || newErr != nil {
					t.Fatalf("Validate = %v, New = %v; want valid", err, newErr)
				}
				return
			}
			if err == nil || newErr == nil {
				t.Fatalf("Validate = %v, New = %v; want an error containing %q", err, newErr, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, pipeline.ErrInvalidInput) {
				t.Fatalf("error %q: want it to contain %q and match ErrInvalidInput", err, tt.wantErr)
			}
			if tt.cfg.Timeout >= 0 && !strings.Contains(err.Error(), provider.EnvURL) {
				t.Fatalf("error %q does not name %s", err, provider.EnvURL)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error %q leaks the password", err)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	p, err := provider.New(provider.Config{BaseURL: "http://h", Models: map[string]string{pipeline.OpSpeech: "tts-2", pipeline.OpImage: ""}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != provider.DefaultName {
		t.Errorf("Name = %q", p.Name())
	}
	want := map[string]string{
		pipeline.OpImage:       "fake-image-1",
		pipeline.OpSpeech:      "tts-2",
		pipeline.OpVideoSubmit: "fake-video-1",
		"unknown":              "",
	}
	for op, m := range want {
		if got := p.Model(op); got != m {
			t.Errorf("Model(%q) = %q, want %q", op, got, m)
		}
	}
	if provider.DefaultModels[pipeline.OpSpeech] != "fake-tts-1" {
		t.Error("New modified DefaultModels")
	}
}
