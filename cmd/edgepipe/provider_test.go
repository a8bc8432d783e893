package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestProviderContractsPrintsTheRouting(t *testing.T) {
	t.Parallel()
	env := map[string]string{"EDGEPIPE_PROVIDER": "workers-ai", "EDGEPIPE_PROVIDER_VIDEO": "replicate"}
	var out bytes.Buffer
	if err := providerContracts(&out, func(k string) string { return env[k] }, []string{"--why"}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		`(?m)^PROVIDER\s+NAME\s+OP\s+MODEL\s+CONTRACT\s+ROUTED$`,
		`(?m)^fake\s+http\s+image\s+fake-image-1\s+idempotent_verified\s*$`,
		`(?m)^workers-ai\s+workers-ai\s+image\s+@cf/black-forest-labs/flux-1-schnell\s+sync\s+yes$`,
		`(?m)^workers-ai\s+workers-ai\s+speech\s+@cf/myshell-ai/melotts\s+sync\s+yes$`,
		`(?m)^workers-ai\s+workers-ai\s+video_submit\s+-\s+fail_closed\s*$`,
		`(?m)^replicate\s+replicate\s+video_submit\s+minimax/video-01\s+async_pollable\s+yes$`,
		`(?m)^replicate video_submit: .*never with Prefer: wait`,
	} {
		if !regexp.MustCompile(want).MatchString(s) {
			t.Errorf("output lacks %s:\n%s", want, s)
		}
	}
	if n := strings.Count(s, " yes\n"); n != 3 {
		t.Errorf("%d routed rows, want one per operation:\n%s", n, s)
	}
}

func TestProviderCommandErrors(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	env := map[string]string{"EDGEPIPE_PROVIDER_VIDEO": "workers-ai"}
	if err := providerContracts(&out, func(k string) string { return env[k] }, nil); err == nil || !strings.Contains(err.Error(), "no text-to-video model") {
		t.Errorf("workers-ai video: %v", err)
	}
	if err := providerContracts(&out, func(string) string { return "" }, []string{"extra"}); !errors.Is(err, errUsage) {
		t.Errorf("extra argument: %v", err)
	}
	if err := providerCmd(t.Context(), []string{"nope"}); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown subcommand: %v", err)
	}
}
