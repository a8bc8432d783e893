package provider

import (
	"context"
	"fmt"
	"strings"

	"edgepipe/pipeline"
)

// The settings (environment variables) that choose a provider per operation
// (RoutingConfig); internal/app reads them.
const (
	EnvProvider       = "EDGEPIPE_PROVIDER"        // every operation: fake (default), workers-ai, replicate
	EnvProviderImage  = "EDGEPIPE_PROVIDER_IMAGE"  // overrides EnvProvider for images
	EnvProviderSpeech = "EDGEPIPE_PROVIDER_SPEECH" // ... for speech
	EnvProviderVideo  = "EDGEPIPE_PROVIDER_VIDEO"  // ... for video
)

// Provider kinds EDGEPIPE_PROVIDER* accept.
const (
	KindFake      = "fake" // the HTTP client of this package: EDGEPIPE_PROVIDER_URL, or the in-process fake
	KindWorkersAI = "workers-ai"
	KindReplicate = "replicate"
)

// Kinds lists the accepted provider kinds.
var Kinds = []string{KindFake, KindWorkersAI, KindReplicate}

// RoutedOps are the operations a provider is chosen for.
var RoutedOps = []string{pipeline.OpImage, pipeline.OpSpeech, pipeline.OpVideoSubmit}

// Routing is the provider kind of each of RoutedOps.
type Routing map[string]string

// RoutingConfig names the provider kind of every operation (All, set by
// EnvProvider) and of each one (Image, Speech, Video: EnvProviderImage, ...,
// overriding All). Empty means KindFake for All and All for the others;
// kinds are matched without case or surrounding space. internal/app reads
// it from the environment.
type RoutingConfig struct {
	All, Image, Speech, Video string
}

// Routing validates c and resolves every operation's kind. Workers AI as the
// explicit video provider is refused (it has no text-to-video model); as the
// default of all operations it is accepted and its video contract fails
// closed. Errors wrap pipeline.ErrInvalidInput and name the setting.
func (c RoutingConfig) Routing() (Routing, error) {
	kind := func(env, raw, def string) (string, error) {
		v := strings.ToLower(strings.TrimSpace(raw))
		if v == "" {
			return def, nil
		}
		for _, k := range Kinds {
			if v == k {
				return v, nil
			}
		}
		return "", fmt.Errorf("%w: %s must be one of %s, got %q", pipeline.ErrInvalidInput, env, strings.Join(Kinds, ", "), v)
	}
	all, err := kind(EnvProvider, c.All, KindFake)
	if err != nil {
		return nil, err
	}
	r := Routing{}
	for _, o := range []struct{ op, env, raw string }{
		{pipeline.OpImage, EnvProviderImage, c.Image},
		{pipeline.OpSpeech, EnvProviderSpeech, c.Speech},
		{pipeline.OpVideoSubmit, EnvProviderVideo, c.Video},
	} {
		if r[o.op], err = kind(o.env, o.raw, all); err != nil {
			return nil, err
		}
	}
	if strings.TrimSpace(c.Video) != "" && r[pipeline.OpVideoSubmit] == KindWorkersAI {
		return nil, fmt.Errorf("%w: %s=workers-ai: Workers AI has no text-to-video model; use replicate or fake", pipeline.ErrInvalidInput, EnvProviderVideo)
	}
	return r, nil
}

// Kinds returns the distinct kinds in use, in RoutedOps order.
func (r Routing) Kinds() []string {
	var out []string
	for _, op := range RoutedOps {
		if k := r[op]; !containsString(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Routed is a pipeline.Providers that sends each operation to its own
// provider: images, speech and video (submit, status, fetch) may each come
// from a different one.
//
// Name is per provider set, because pipeline.Providers.Name takes no
// operation: when every operation goes to one provider it is that
// provider's name (so object keys equal a single provider's), otherwise
// "image=<name>,speech=<name>,video=<name>", which names each operation's
// provider in the intent log and in the object keys (where it also means
// that changing one operation's provider changes every key). ProviderName
// gives the per-operation name a pipeline could use instead.
type Routed struct {
	byOp map[string]pipeline.Providers
	name string
}

var _ pipeline.Providers = (*Routed)(nil)

// NewRouted routes image, speech and video to their providers (none nil).
func NewRouted(image, speech, video pipeline.Providers) (*Routed, error) {
	if image == nil || speech == nil || video == nil {
		return nil, fmt.Errorf("%w: every operation needs a provider", pipeline.ErrInvalidInput)
	}
	r := &Routed{byOp: map[string]pipeline.Providers{
		pipeline.OpImage: image, pipeline.OpSpeech: speech, pipeline.OpVideoSubmit: video,
		OpVideoStatus: video, OpVideoFetch: video,
	}}
	if image.Name() == speech.Name() && speech.Name() == video.Name() {
		r.name = image.Name()
	} else {
		r.name = "image=" + image.Name() + ",speech=" + speech.Name() + ",video=" + video.Name()
	}
	return r, nil
}

// For returns the provider of op (nil for an operation outside RoutedOps
// and the video reads).
func (r *Routed) For(op string) pipeline.Providers { return r.byOp[op] }

// Name identifies the provider set (see the type's documentation).
func (r *Routed) Name() string { return r.name }

// ProviderName is the name of op's provider ("" for an unknown operation).
func (r *Routed) ProviderName(op string) string {
	if p := r.byOp[op]; p != nil {
		return p.Name()
	}
	return ""
}

// Endpoint is where op's provider sends it (pipeline.ProviderEndpoint).
func (r *Routed) Endpoint(op string) string {
	if p := r.byOp[op]; p != nil {
		return pipeline.ProviderEndpoint(p, op)
	}
	return ""
}

// Contract is op's provider's contract; other operations fail closed.
func (r *Routed) Contract(op string) pipeline.Contract {
	if p := r.byOp[op]; p != nil {
		return p.Contract(op)
	}
	return pipeline.ContractFailClosed
}

// Model is op's provider's model.
func (r *Routed) Model(op string) string {
	if p := r.byOp[op]; p != nil {
		return p.Model(op)
	}
	return ""
}

func (r *Routed) GenerateImage(ctx context.Context, meta pipeline.CallMeta, req pipeline.ImageRequest) (pipeline.Media, error) {
	return r.byOp[pipeline.OpImage].GenerateImage(ctx, meta, req)
}

func (r *Routed) Synthesize(ctx context.Context, meta pipeline.CallMeta, req pipeline.SpeechRequest) (pipeline.Media, error) {
	return r.byOp[pipeline.OpSpeech].Synthesize(ctx, meta, req)
}

func (r *Routed) SubmitVideo(ctx context.Context, meta pipeline.CallMeta, req pipeline.VideoRequest) (string, error) {
	return r.byOp[pipeline.OpVideoSubmit].SubmitVideo(ctx, meta, req)
}

func (r *Routed) VideoStatus(ctx context.Context, externalID string) (pipeline.VideoState, error) {
	return r.byOp[pipeline.OpVideoSubmit].VideoStatus(ctx, externalID)
}

func (r *Routed) FetchVideo(ctx context.Context, externalID string) (pipeline.Media, error) {
	return r.byOp[pipeline.OpVideoSubmit].FetchVideo(ctx, externalID)
}
