package provider_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"edgepipe/pipeline"
	"edgepipe/provider"
)

// stub is a pipeline.Providers that records which operations reached it.
type stub struct {
	name  string
	calls []string
}

func (s *stub) Name() string                         { return s.name }
func (s *stub) Contract(op string) pipeline.Contract { return pipeline.Contract(s.name + ":" + op) }
func (s *stub) Model(op string) string               { return s.name + "-model-" + op }
func (s *stub) GenerateImage(context.Context, pipeline.CallMeta, pipeline.ImageRequest) (pipeline.Media, error) {
	s.calls = append(s.calls, "image")
	return pipeline.Media{}, nil
}
func (s *stub) Synthesize(context.Context, pipeline.CallMeta, pipeline.SpeechRequest) (pipeline.Media, error) {
	s.calls = append(s.calls, "speech")
	return pipeline.Media{}, nil
}
func (s *stub) SubmitVideo(context.Context, pipeline.CallMeta, pipeline.VideoRequest) (string, error) {
	s.calls = append(s.calls, "submit")
	return "id", nil
}
func (s *stub) VideoStatus(context.Context, string) (pipeline.VideoState, error) {
	s.calls = append(s.calls, "status")
	return pipeline.VideoState{}, nil
}
func (s *stub) FetchVideo(context.Context, string) (pipeline.Media, error) {
	s.calls = append(s.calls, "fetch")
	return pipeline.Media{}, nil
}

func TestRoutedSendsEachOperationToItsProvider(t *testing.T) {
	t.Parallel()
	img, sp, vid := &stub{name: "a"}, &stub{name: "b"}, &stub{name: "c"}
	r, err := provider.NewRouted(img, sp, vid)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _ = r.GenerateImage(ctx, pipeline.CallMeta{}, pipeline.ImageRequest{})
	_, _ = r.Synthesize(ctx, pipeline.CallMeta{}, pipeline.SpeechRequest{})
	_, _ = r.SubmitVideo(ctx, pipeline.CallMeta{}, pipeline.VideoRequest{})
	_, _ = r.VideoStatus(ctx, "id")
	_, _ = r.FetchVideo(ctx, "id")
	if strings.Join(img.calls, ",") != "image" || strings.Join(sp.calls, ",") != "speech" || strings.Join(vid.calls, ",") != "submit,status,fetch" {
		t.Errorf("calls: image %v speech %v video %v", img.calls, sp.calls, vid.calls)
	}
	for op, want := range map[string]string{pipeline.OpImage: "a", pipeline.OpSpeech: "b", pipeline.OpVideoSubmit: "c"} {
		if got := r.Model(op); got != want+"-model-"+op {
			t.Errorf("Model(%s) = %s", op, got)
		}
		if got := string(r.Contract(op)); got != want+":"+op {
			t.Errorf("Contract(%s) = %s", op, got)
		}
		if got := r.ProviderName(op); got != want {
			t.Errorf("ProviderName(%s) = %s", op, got)
		}
	}
	if r.Contract("other") != pipeline.ContractFailClosed || r.Model("other") != "" {
		t.Error("an unknown operation must fail closed")
	}
	if r.Name() != "image=a,speech=b,video=c" {
		t.Errorf("Name = %q", r.Name())
	}
	same, _ := provider.NewRouted(&stub{name: "x"}, &stub{name: "x"}, &stub{name: "x"})
	if same.Name() != "x" {
		t.Errorf("one provider for every op: Name = %q, want its own name (keys unchanged)", same.Name())
	}
	if _, err := provider.NewRouted(img, nil, vid); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Errorf("nil provider: %v", err)
	}
}

func TestRoutingConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env                map[string]string
		image, speech, vid string
		wantErr            string
	}{
		{env: nil, image: "fake", speech: "fake", vid: "fake"},
		{env: map[string]string{"EDGEPIPE_PROVIDER": "workers-ai"}, image: "workers-ai", speech: "workers-ai", vid: "workers-ai"},
		{env: map[string]string{"EDGEPIPE_PROVIDER": "Workers-AI ", "EDGEPIPE_PROVIDER_VIDEO": "replicate"}, image: "workers-ai", speech: "workers-ai", vid: "replicate"},
		{env: map[string]string{"EDGEPIPE_PROVIDER_IMAGE": "replicate"}, image: "replicate", speech: "fake", vid: "fake"},
		{env: map[string]string{"EDGEPIPE_PROVIDER_SPEECH": "workers-ai", "EDGEPIPE_PROVIDER": "replicate"}, image: "replicate", speech: "workers-ai", vid: "replicate"},
		{env: map[string]string{"EDGEPIPE_PROVIDER": "openai"}, wantErr: "EDGEPIPE_PROVIDER must be one of"},
		{env: map[string]string{"EDGEPIPE_PROVIDER_SPEECH": "x"}, wantErr: "EDGEPIPE_PROVIDER_SPEECH"},
		{env: map[string]string{"EDGEPIPE_PROVIDER_VIDEO": "workers-ai"}, wantErr: "no text-to-video model"},
	} {
		r, err := provider.RoutingConfig{All: tc.env["EDGEPIPE_PROVIDER"], Image: tc.env["EDGEPIPE_PROVIDER_IMAGE"],
			Speech: tc.env["EDGEPIPE_PROVIDER_SPEECH"], Video: tc.env["EDGEPIPE_PROVIDER_VIDEO"]}.Routing()
		if tc.wantErr != "" {
			if !errors.Is(err, pipeline.ErrInvalidInput) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: err = %v, want %q", tc.env, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if r[pipeline.OpImage] != tc.image || r[pipeline.OpSpeech] != tc.speech || r[pipeline.OpVideoSubmit] != tc.vid {
			t.Errorf("%v: %v", tc.env, r)
		}
	}
}
