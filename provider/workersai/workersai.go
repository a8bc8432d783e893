// Package workersai is edgepipe's adapter for Cloudflare Workers AI over its
// REST API: POST {base}/accounts/{account}/ai/run/{model} with a Bearer
// token. It implements pipeline.Providers for images
// (@cf/black-forest-labs/flux-1-schnell) and speech (@cf/myshell-ai/melotts);
// Workers AI has no text-to-video model, so video is routed to another
// provider (EDGEPIPE_PROVIDER_VIDEO) or a storyboard uses image scenes only.
//
// Both operations are sync (docs/design.md §6): Workers AI has no idempotency key,
// so a failure after the request may have reached it (timeout, dropped
// connection, 5xx, 408) is ambiguous and the job goes to needs_review
// instead of paying again. Requests are sent through provider.Caller, which
// makes them impossible for net/http to resend.
//
// AI Gateway: EDGEPIPE_CF_API_BASE may point at a gateway that proxies this
// REST API, but its caching and retries must be off for these calls. A cache
// is not idempotency: two concurrent misses for the same prompt both reach
// the model and both bill, and a hit hands one scene another request's
// answer, which hides nothing from the bill but everything from the audit
// trail. A gateway retry resends a billed request that edgepipe promised to
// send once, behind the intent log's back. The adapter sends
// cf-aig-skip-cache: true on every call; retries can only be turned off in
// the gateway's own settings.
package workersai

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"

	"edgepipe/pipeline"
	"edgepipe/provider"
)

// Name is the provider name in intent rows and object keys.
const Name = "workers-ai"

// The settings (environment variables) of Config; internal/app reads them,
// and errors name them.
const (
	EnvAccountID   = "EDGEPIPE_CF_ACCOUNT_ID"
	EnvAPIToken    = "EDGEPIPE_CF_API_TOKEN"
	EnvAPIBase     = "EDGEPIPE_CF_API_BASE"
	EnvModelImage  = "EDGEPIPE_CF_MODEL_IMAGE"
	EnvModelSpeech = "EDGEPIPE_CF_MODEL_SPEECH"
)

// DefaultBaseURL is the Cloudflare API root.
const DefaultBaseURL = "https://api.cloudflare.com/client/v4"

// Default models per operation.
var DefaultModels = map[string]string{
	pipeline.OpImage:  "@cf/black-forest-labs/flux-1-schnell",
	pipeline.OpSpeech: "@cf/myshell-ai/melotts",
}

// Defaults of the model inputs.
const (
	DefaultSteps = 4    // flux-1-schnell's own default (maximum 8)
	DefaultLang  = "en" // melotts's own default
)

// Answer size bounds: an image or narration is held in memory once.
const (
	maxJSONAnswer  = 48 << 20
	maxAudioAnswer = 32 << 20
)

// Media types of the answers handed to the pipeline.
const (
	ContentTypePNG = "image/png"
	ContentTypeMP3 = "audio/mpeg"
)

// Config configures the adapter.
type Config struct {
	BaseURL   string // EDGEPIPE_CF_API_BASE ("" = DefaultBaseURL)
	AccountID string // EDGEPIPE_CF_ACCOUNT_ID
	APIToken  string // EDGEPIPE_CF_API_TOKEN; never logged
	// Models overrides DefaultModels per operation.
	Models map[string]string
	// Steps is flux-1-schnell's "steps" (0 = DefaultSteps, at most 8).
	Steps int
	// Seed, when non-zero, is sent as flux's "seed". Off by default: the
	// model's published schema (additionalProperties: false) lists only
	// prompt and steps.
	Seed int64
	// Lang is melotts's "lang" ("" = DefaultLang).
	Lang string
	// Timeout bounds one call (EDGEPIPE_PROVIDER_TIMEOUT; 0 =
	// provider.DefaultTimeout).
	Timeout time.Duration
	Client  *http.Client // tests; nil = provider.Caller's own transports
	Clock   pipeline.Clock
	Logger  *slog.Logger
}

// Adapter is the Workers AI pipeline.Providers. Create it with New.
type Adapter struct {
	cfg    Config
	base   *url.URL
	models map[string]string
	caller *provider.Caller
}

var _ pipeline.Providers = (*Adapter)(nil)

// New validates cfg and builds the adapter.
func New(cfg Config) (*Adapter, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", pipeline.ErrInvalidInput, fmt.Sprintf(format, a...))
	}
	base, err := provider.ParseBaseURL(cfg.BaseURL, DefaultBaseURL, EnvAPIBase)
	if err != nil {
		return nil, err
	}
	cfg.BaseURL = base.String()
	if !validSegment(cfg.AccountID) {
		return nil, bad("%s is required: the Cloudflare account id (letters and digits)", EnvAccountID)
	}
	if cfg.APIToken == "" || strings.ContainsAny(cfg.APIToken, " \t\r\n") {
		return nil, bad("%s is required: an API token with Workers AI permission", EnvAPIToken)
	}
	if cfg.Steps == 0 {
		cfg.Steps = DefaultSteps
	}
	if cfg.Steps < 1 || cfg.Steps > 8 {
		return nil, bad("flux-1-schnell steps must be 1 to 8, got %d", cfg.Steps)
	}
	if cfg.Lang == "" {
		cfg.Lang = DefaultLang
	}
	models := maps.Clone(DefaultModels)
	for op, m := range cfg.Models {
		if m == "" {
			continue
		}
		if _, ok := DefaultModels[op]; !ok {
			return nil, bad("workers-ai has no operation %q (it has image and speech)", op)
		}
		if !validModel(m) {
			return nil, bad("workers-ai model %q for %s is not a model id like @cf/owner/name", m, op)
		}
		models[op] = m
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Adapter{cfg: cfg, base: base, models: models, caller: provider.NewCaller(provider.CallerConfig{
		Timeout: cfg.Timeout, Client: cfg.Client, ParseError: parseError, Clock: cfg.Clock, Logger: cfg.Logger,
	})}, nil
}

// Close releases idle connections.
func (a *Adapter) Close() error { return a.caller.Close() }

// Name is "workers-ai".
func (a *Adapter) Name() string { return Name }

// Endpoint is the API base every operation goes to (pipeline.EndpointNamer).
func (a *Adapter) Endpoint(string) string { return provider.EndpointOf(a.base) }

// Model returns the model id of op ("" for video, which Workers AI lacks).
// Settings that change the result without changing the model id (steps,
// seed, lang away from their defaults) are appended after a ';', so the
// deterministic object keys, which include the model, change with them.
func (a *Adapter) Model(op string) string {
	m := a.models[op]
	switch {
	case op == pipeline.OpImage && (a.cfg.Steps != DefaultSteps || a.cfg.Seed != 0):
		m += fmt.Sprintf(";steps=%d", a.cfg.Steps)
		if a.cfg.Seed != 0 {
			m += fmt.Sprintf(";seed=%d", a.cfg.Seed)
		}
	case op == pipeline.OpSpeech && a.cfg.Lang != DefaultLang:
		m += ";lang=" + a.cfg.Lang
	}
	return m
}

// Contract answers from ContractTable.
func (a *Adapter) Contract(op string) pipeline.Contract {
	for _, r := range contracts {
		if r.Op == op && op != provider.OpOther {
			return r.Contract
		}
	}
	return pipeline.ContractFailClosed
}

var contracts = []provider.ContractRow{
	{Op: pipeline.OpImage, Contract: pipeline.ContractSync,
		Why: "POST /accounts/{account}/ai/run/{model} answers with the image in one exchange and bills every run; " +
			"Workers AI has no idempotency key, so a failure after sending (timeout, dropped connection, 5xx, 408) " +
			"is ambiguous and goes to needs_review"},
	{Op: pipeline.OpSpeech, Contract: pipeline.ContractSync,
		Why: "as image: one exchange, no idempotency key, every run billed; the audio comes base64 in JSON or as " +
			"an audio/mpeg body"},
	{Op: pipeline.OpVideoSubmit, Contract: pipeline.ContractFailClosed,
		Why: "Workers AI has no text-to-video model: route video to another provider (EDGEPIPE_PROVIDER_VIDEO) " +
			"or use image scenes only"},
	{Op: provider.OpOther, Contract: pipeline.ContractFailClosed,
		Why: "no contract was established for any other operation"},
}

// Describe returns the contract table and the model of each operation of
// cfg without validating it (for `edgepipe provider contracts`, which needs
// no credentials).
func Describe(cfg Config) ([]provider.ContractRow, map[string]string) {
	models := maps.Clone(DefaultModels)
	for op, m := range cfg.Models {
		if _, ok := DefaultModels[op]; ok && m != "" {
			models[op] = m
		}
	}
	return ContractTable(), models
}

// ContractTable returns the declared contracts (a copy).
func ContractTable() []provider.ContractRow { return append([]provider.ContractRow(nil), contracts...) }

// envelope is every Workers AI REST answer.
type envelope struct {
	Result   json.RawMessage `json:"result"`
	Success  bool            `json:"success"`
	Errors   []apiMessage    `json:"errors"`
	Messages []apiMessage    `json:"messages"`
}

type apiMessage struct {
	Code    json.RawMessage `json:"code"`
	Message string          `json:"message"`
}

// parseError reads {"errors":[{"code":7003,"message":"..."}], ...}.
func parseError(b []byte) (string, string) {
	var e envelope
	if json.Unmarshal(b, &e) != nil || len(e.Errors) == 0 {
		return "", ""
	}
	return strings.Trim(string(e.Errors[0].Code), `"`), e.Errors[0].Message
}

func (a *Adapter) request(op, unit string, body any) (provider.Request, error) {
	r := provider.Request{Op: op, Method: http.MethodPost, Unit: unit, Header: http.Header{}}
	b, err := json.Marshal(body)
	if err != nil {
		return r, err
	}
	u := *a.base
	u.Path = a.base.Path + "/accounts/" + a.cfg.AccountID + "/ai/run/" + a.models[op]
	r.URL, r.Body = &u, b
	r.Header.Set("Authorization", "Bearer "+a.cfg.APIToken)
	r.Header.Set("cf-aig-skip-cache", "true")
	return r, nil
}

type imageInput struct {
	Prompt string `json:"prompt"`
	Steps  int    `json:"steps"`
	Seed   int64  `json:"seed,omitempty"`
}

type speechInput struct {
	Prompt string `json:"prompt"`
	Lang   string `json:"lang"`
}

// GenerateImage runs flux-1-schnell and returns the image as PNG. The model
// answers base64 JPEG; the pipeline stores images as image/png and its
// renderer decodes them by that name, so the JPEG is decoded and re-encoded
// (losslessly from its pixels) here. A PNG answer passes through.
func (a *Adapter) GenerateImage(ctx context.Context, meta pipeline.CallMeta, req pipeline.ImageRequest) (pipeline.Media, error) {
	r, err := a.request(pipeline.OpImage, meta.UnitID, imageInput{Prompt: req.Prompt, Steps: a.cfg.Steps, Seed: a.cfg.Seed})
	if err != nil {
		return pipeline.Media{}, err
	}
	resp, err := a.caller.Do(ctx, r)
	if err != nil {
		return pipeline.Media{}, err
	}
	var env envelope
	if err := a.caller.DecodeJSON(r, resp, maxJSONAnswer, &env); err != nil {
		return pipeline.Media{}, err
	}
	var res struct {
		Image string `json:"image"`
	}
	if err := a.result(r, resp, env, &res); err != nil {
		return pipeline.Media{}, err
	}
	raw, err := base64.StdEncoding.DecodeString(res.Image)
	if err != nil || len(raw) == 0 {
		return pipeline.Media{}, a.caller.BadResponse(r, resp.Status, fmt.Errorf("result.image is not base64 image data: %v", err))
	}
	img, err := toPNG(raw)
	if err != nil {
		return pipeline.Media{}, a.caller.BadResponse(r, resp.Status, err)
	}
	return pipeline.Media{Body: io.NopCloser(bytes.NewReader(img)), ContentType: ContentTypePNG}, nil
}

// Synthesize runs melotts and returns MP3 audio, taken from result.audio
// (base64) or from a binary audio/mpeg answer, whichever the API sends.
func (a *Adapter) Synthesize(ctx context.Context, meta pipeline.CallMeta, req pipeline.SpeechRequest) (pipeline.Media, error) {
	r, err := a.request(pipeline.OpSpeech, meta.UnitID, speechInput{Prompt: req.Text, Lang: a.cfg.Lang})
	if err != nil {
		return pipeline.Media{}, err
	}
	resp, err := a.caller.Do(ctx, r)
	if err != nil {
		return pipeline.Media{}, err
	}
	ct := resp.Header.Get("Content-Type")
	var audio []byte
	switch {
	case provider.MediaTypeIs(ct, ContentTypeMP3):
		if audio, err = a.caller.ReadAll(r, resp, maxAudioAnswer); err != nil {
			return pipeline.Media{}, err
		}
	case provider.MediaTypeIs(ct, "application/json"):
		var env envelope
		if err := a.caller.DecodeJSON(r, resp, maxJSONAnswer, &env); err != nil {
			return pipeline.Media{}, err
		}
		var res struct {
			Audio string `json:"audio"`
		}
		if err := a.result(r, resp, env, &res); err != nil {
			return pipeline.Media{}, err
		}
		if audio, err = base64.StdEncoding.DecodeString(res.Audio); err != nil {
			return pipeline.Media{}, a.caller.BadResponse(r, resp.Status, fmt.Errorf("result.audio is not base64: %w", err))
		}
	default:
		resp.Body.Close()
		return pipeline.Media{}, a.caller.BadResponse(r, resp.Status, fmt.Errorf("content type %q, want application/json or audio/mpeg", ct))
	}
	if len(audio) == 0 {
		return pipeline.Media{}, a.caller.BadResponse(r, resp.Status, errors.New("empty audio"))
	}
	return pipeline.Media{Body: io.NopCloser(bytes.NewReader(audio)), ContentType: ContentTypeMP3}, nil
}

// result unwraps a 200 envelope: success must be true and result present.
func (a *Adapter) result(r provider.Request, resp *provider.Response, env envelope, v any) error {
	if !env.Success {
		code, msg := "", ""
		if len(env.Errors) > 0 {
			code, msg = string(env.Errors[0].Code), env.Errors[0].Message
		}
		return a.caller.BadResponse(r, resp.Status, &provider.ResponseError{Status: resp.Status, ProviderCode: code, Message: msg})
	}
	if len(env.Result) == 0 || string(env.Result) == "null" {
		return a.caller.BadResponse(r, resp.Status, errors.New("success without a result"))
	}
	if err := json.Unmarshal(env.Result, v); err != nil {
		return a.caller.BadResponse(r, resp.Status, fmt.Errorf("malformed result: %w", err))
	}
	return nil
}

// maxSide bounds a decoded image's width and height.
const maxSide = 8192

// toPNG returns a PNG of a JPEG or PNG image.
func toPNG(b []byte) ([]byte, error) {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return b, nil
	case bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}):
		// Bound the decoded size before decoding: a few KB of JPEG can
		// claim gigapixels.
		cfg, err := jpeg.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("result.image is not a decodable JPEG: %w", err)
		}
		if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width > maxSide || cfg.Height > maxSide {
			return nil, fmt.Errorf("result.image is %dx%d, more than %d pixels a side", cfg.Width, cfg.Height, maxSide)
		}
		img, err := jpeg.Decode(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("result.image is not a decodable JPEG: %w", err)
		}
		var out bytes.Buffer
		if err := png.Encode(&out, img); err != nil {
			return nil, err
		}
		return out.Bytes(), nil
	}
	return nil, errors.New("result.image is neither JPEG nor PNG")
}

// unsupported refuses an operation Workers AI does not have, before sending.
func unsupported(op string) error {
	return &pipeline.CallError{Op: op, Outcome: pipeline.OutcomeRejected, Code: provider.CodeUnsupportedOperation,
		Cause: fmt.Errorf("%w: Workers AI has no text-to-video model; route video to another provider", pipeline.ErrInvalidInput)}
}

// SubmitVideo is refused: Workers AI has no text-to-video model.
func (a *Adapter) SubmitVideo(context.Context, pipeline.CallMeta, pipeline.VideoRequest) (string, error) {
	return "", unsupported(pipeline.OpVideoSubmit)
}

// VideoStatus is refused: Workers AI has no video jobs.
func (a *Adapter) VideoStatus(context.Context, string) (pipeline.VideoState, error) {
	return pipeline.VideoState{}, unsupported(provider.OpVideoStatus)
}

// FetchVideo is refused: Workers AI has no video jobs.
func (a *Adapter) FetchVideo(context.Context, string) (pipeline.Media, error) {
	return pipeline.Media{}, unsupported(provider.OpVideoFetch)
}

func validSegment(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// validModel accepts model ids like @cf/black-forest-labs/flux-1-schnell.
func validModel(m string) bool {
	if m == "" || len(m) > 200 || strings.Contains(m, "..") || strings.HasPrefix(m, "/") || strings.HasSuffix(m, "/") {
		return false
	}
	for _, r := range m {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("@/-_.", r)) {
			return false
		}
	}
	return true
}
