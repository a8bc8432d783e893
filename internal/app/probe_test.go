package app

import (
	"errors"
	"strings"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/provider"
)

// TestProbeTarget: the probe builds the provider a worker would (the routed
// kind unless --provider names one) and refuses, calling nothing, an
// operation it cannot check.
func TestProbeTarget(t *testing.T) {
	t.Parallel()
	creds := map[string]string{
		"EDGEPIPE_CF_ACCOUNT_ID": "acc1", "EDGEPIPE_CF_API_TOKEN": "cf-secret",
		"EDGEPIPE_REPLICATE_API_TOKEN": "r8_secret", "EDGEPIPE_PROVIDER_URL": "http://127.0.0.1:1",
	}
	for _, tc := range []struct {
		name, op, kind string
		env            []string
		want           ProbeTarget // without p
		err            error
		errText        string
	}{
		{name: "routed fake image", op: "image",
			want: ProbeTarget{Kind: "fake", Provider: "http", Op: "image", Model: "fake-image-1", Endpoint: "http://127.0.0.1:1", Contract: pipeline.ContractIdempotentVerified}},
		{name: "kind named, any case", op: "image", kind: " Fake ", env: []string{"EDGEPIPE_PROVIDER_IMAGE", "workers-ai"},
			want: ProbeTarget{Kind: "fake", Provider: "http", Op: "image", Model: "fake-image-1", Endpoint: "http://127.0.0.1:1", Contract: pipeline.ContractIdempotentVerified}},
		{name: "routed workers-ai image is sync", op: "image", env: []string{"EDGEPIPE_PROVIDER_IMAGE", "workers-ai"},
			err: provider.ErrNothingToProve, errText: "image on workers-ai declares sync"},
		{name: "replicate video", op: "video_submit", kind: "replicate",
			err: provider.ErrNothingToProve, errText: "video_submit on replicate declares async_pollable"},
		{name: "fake speech", op: "speech", err: provider.ErrNothingToProve, errText: "speech on http declares sync"},
		{name: "unknown op", op: "upscale", err: pipeline.ErrInvalidInput, errText: `unknown operation "upscale"`},
		{name: "unknown kind", op: "image", kind: "dall-e", err: pipeline.ErrInvalidInput, errText: `unknown provider kind "dall-e"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			for k, v := range creds {
				env[k] = v
			}
			for i := 0; i+1 < len(tc.env); i += 2 {
				env[tc.env[i]] = tc.env[i+1]
			}
			got, err := appFor(t, env).ProbeTarget(t.Context(), tc.op, tc.kind)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !errors.Is(err, pipeline.ErrInvalidInput) || !strings.Contains(err.Error(), tc.errText) {
					t.Errorf("err %v, want %v saying %q", err, tc.err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.p == nil {
				t.Error("no provider built")
			}
			got.p = nil
			if got != tc.want {
				t.Errorf("target %+v, want %+v", got, tc.want)
			}
		})
	}
}
