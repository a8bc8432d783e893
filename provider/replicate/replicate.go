// Package replicate is edgepipe's adapter for Replicate's predictions API:
// POST /v1/models/{owner}/{name}/predictions (or POST /v1/predictions with
// a version id) with a Bearer token returns a prediction (id, status,
// urls.get); GET /v1/predictions/{id} reports on it until it is succeeded,
// failed or canceled; its output is a URL to download.
//
// Video is async_pollable (docs/design.md §6): SubmitVideo returns the prediction id,
// which the pipeline persists before anything else and recovers by polling,
// never by creating again. The create request never carries
// "Prefer: wait" (which makes Replicate hold the connection until the model
// finished): a connection dropped during that wait would lose the id of a
// prediction that runs and bills anyway.
//
// Image and speech, when routed here, run create → poll → download inside
// one pipeline call, because the pipeline persists external ids for video
// only. So they are declared sync: a failure after the create is ambiguous
// (the id is logged and carried in the error's cause for an operator).
//
// Outputs are downloaded as soon as they are asked for: Replicate deletes
// them about an hour after the prediction ended. A 404/410 on the download
// (or a prediction whose data was removed) is CodeOutputExpired with
// outcome failed: the generation was paid for and can only be bought again.
//
// The API token is sent to the API base and to Replicate's delivery hosts
// (replicate.delivery and its subdomains, which the API reference says may
// require it), never to any other host an output URL might name.
package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
const Name = "replicate"

// The settings (environment variables) of Config; internal/app reads them,
// and errors name them.
const (
	EnvAPIToken    = "EDGEPIPE_REPLICATE_API_TOKEN"
	EnvAPIBase     = "EDGEPIPE_REPLICATE_API_BASE"
	EnvModelImage  = "EDGEPIPE_REPLICATE_MODEL_IMAGE"
	EnvModelSpeech = "EDGEPIPE_REPLICATE_MODEL_SPEECH"
	EnvModelVideo  = "EDGEPIPE_REPLICATE_MODEL_VIDEO"
)

// DefaultBaseURL is Replicate's API root (paths start with /v1).
const DefaultBaseURL = "https://api.replicate.com"

// DefaultModels per operation. Speech has none: text-to-speech models on
// Replicate take different inputs; set EDGEPIPE_REPLICATE_MODEL_SPEECH to
// one that takes {"text"} to route speech here.
var DefaultModels = map[string]string{
	pipeline.OpImage:       "black-forest-labs/flux-schnell",
	pipeline.OpVideoSubmit: "minimax/video-01",
}

// Defaults of the in-call wait of image and speech predictions.
const (
	DefaultPollInterval = 2 * time.Second
	DefaultSyncWait     = 5 * time.Minute
	// pollErrorBudget is how many polls in a row may fail before a sync
	// call gives up on a prediction it created.
	pollErrorBudget = 5
)

const maxJSONAnswer = 1 << 20

// Config configures the adapter.
type Config struct {
	BaseURL  string // EDGEPIPE_REPLICATE_API_BASE ("" = DefaultBaseURL)
	APIToken string // EDGEPIPE_REPLICATE_API_TOKEN; never logged
	// Models overrides DefaultModels per operation: "owner/name" (the
	// model's latest version, official models) or "owner/name:version".
	Models map[string]string
	// Timeout bounds one exchange, including an output download
	// (EDGEPIPE_PROVIDER_TIMEOUT; 0 = provider.DefaultTimeout).
	Timeout time.Duration
	// PollInterval and SyncWait pace and bound the wait for an image or
	// speech prediction inside one call (0 = the defaults).
	PollInterval, SyncWait time.Duration
	Client                 *http.Client // tests; nil = provider.Caller's own transports
	Clock                  pipeline.Clock
	Logger                 *slog.Logger
}

// Adapter is the Replicate pipeline.Providers. Create it with New.
type Adapter struct {
	cfg    Config
	base   *url.URL
	models map[string]string
	caller *provider.Caller
	log    *slog.Logger
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
	if cfg.APIToken == "" || strings.ContainsAny(cfg.APIToken, " \t\r\n") {
		return nil, bad("%s is required: a Replicate API token", EnvAPIToken)
	}
	models := maps.Clone(DefaultModels)
	for op, m := range cfg.Models {
		if m == "" {
			continue
		}
		switch op {
		case pipeline.OpImage, pipeline.OpSpeech, pipeline.OpVideoSubmit:
		default:
			return nil, bad("replicate has no operation %q", op)
		}
		if _, _, _, ok := splitModel(m); !ok {
			return nil, bad("replicate model %q for %s must be owner/name or owner/name:version", m, op)
		}
		models[op] = m
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.SyncWait <= 0 {
		cfg.SyncWait = DefaultSyncWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Adapter{cfg: cfg, base: base, models: models, log: cfg.Logger, caller: provider.NewCaller(provider.CallerConfig{
		Timeout: cfg.Timeout, Client: cfg.Client, ParseError: parseError, Clock: cfg.Clock, Logger: cfg.Logger,
	})}, nil
}

// Close releases idle connections.
func (a *Adapter) Close() error { return a.caller.Close() }

// Name is "replicate".
func (a *Adapter) Name() string { return Name }

// Endpoint is the API base every operation goes to (pipeline.EndpointNamer).
func (a *Adapter) Endpoint(string) string { return provider.EndpointOf(a.base) }

// Model returns the configured model of op ("" when none).
func (a *Adapter) Model(op string) string { return a.models[op] }

// Contract answers from Contracts.
func (a *Adapter) Contract(op string) pipeline.Contract {
	for _, r := range a.Contracts() {
		if r.Op == op && op != provider.OpOther {
			return r.Contract
		}
	}
	return pipeline.ContractFailClosed
}

// Contracts returns the declared contract table of this configuration: an
// operation without a model fails closed.
func (a *Adapter) Contracts() []provider.ContractRow { return contractsFor(a.models) }

// Describe returns the contract table and the model of each operation of
// cfg without validating it (for `edgepipe provider contracts`, which needs
// no credentials).
func Describe(cfg Config) ([]provider.ContractRow, map[string]string) {
	models := maps.Clone(DefaultModels)
	for op, m := range cfg.Models {
		if m != "" {
			models[op] = m
		}
	}
	return contractsFor(models), models
}

func contractsFor(models map[string]string) []provider.ContractRow {
	rows := ContractTable()
	for i, r := range rows {
		if r.Op != provider.OpOther && models[r.Op] == "" {
			rows[i].Contract = pipeline.ContractFailClosed
			rows[i].Why = "no model is configured for this operation (" + envOf(r.Op) + ")"
		}
	}
	return rows
}

func envOf(op string) string {
	switch op {
	case pipeline.OpImage:
		return EnvModelImage
	case pipeline.OpSpeech:
		return EnvModelSpeech
	}
	return EnvModelVideo
}

var contracts = []provider.ContractRow{
	{Op: pipeline.OpImage, Contract: pipeline.ContractSync,
		Why: "create, poll and download happen inside one call because the pipeline persists external ids for " +
			"video only; Replicate has no idempotency key, so a failure after the create is ambiguous (the prediction " +
			"id is logged for an operator)"},
	{Op: pipeline.OpSpeech, Contract: pipeline.ContractSync,
		Why: "as image"},
	{Op: pipeline.OpVideoSubmit, Contract: pipeline.ContractAsyncPollable,
		Why: "POST .../predictions (never with Prefer: wait) returns the prediction id, persisted before anything " +
			"else; recovery polls GET /v1/predictions/{id} and never creates again; a failure before the id is " +
			"known is ambiguous"},
	{Op: provider.OpOther, Contract: pipeline.ContractFailClosed,
		Why: "no contract was established for any other operation (reads of a prediction bill nothing)"},
}

// ContractTable returns the declared contracts with the default models (a
// copy).
func ContractTable() []provider.ContractRow { return append([]provider.ContractRow(nil), contracts...) }

// splitModel parses "owner/name" or "owner/name:version".
func splitModel(m string) (owner, name, version string, ok bool) {
	ref, version, hasVersion := strings.Cut(m, ":")
	owner, name, found := strings.Cut(ref, "/")
	ok = found && segment(owner) && segment(name) && (!hasVersion || segment(version))
	return owner, name, version, ok
}

func segment(s string) bool {
	if s == "" || len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// prediction is Replicate's prediction object (the fields edgepipe reads).
type prediction struct {
	ID          string          `json:"id"`
	Status      string          `json:"status"`
	Output      json.RawMessage `json:"output"`
	Error       json.RawMessage `json:"error"`
	DataRemoved bool            `json:"data_removed"`
	URLs        struct {
		Get    string `json:"get"`
		Cancel string `json:"cancel"`
	} `json:"urls"`
}

// parseError reads Replicate's error bodies: {"title","detail","status"}.
func parseError(b []byte) (string, string) {
	var e struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &e) != nil {
		return "", ""
	}
	return e.Title, e.Detail
}

func (a *Adapter) apiURL(path string) *url.URL {
	u := *a.base
	u.Path = a.base.Path + path
	return &u
}

func (a *Adapter) auth() http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+a.cfg.APIToken)
	return h
}

// create starts a prediction of op's model and returns it. Billable: sent
// once, never with Prefer: wait.
func (a *Adapter) create(ctx context.Context, op, unit string, input map[string]any) (prediction, error) {
	owner, name, version, _ := splitModel(a.models[op])
	body := map[string]any{"input": input}
	path := "/v1/models/" + owner + "/" + name + "/predictions"
	if version != "" {
		path = "/v1/predictions"
		body["version"] = version
	}
	b, err := json.Marshal(body)
	if err != nil {
		return prediction{}, err
	}
	r := provider.Request{Op: op, Method: http.MethodPost, URL: a.apiURL(path), Body: b, Header: a.auth(), Unit: unit,
		OK: []int{http.StatusCreated, http.StatusOK, http.StatusAccepted}}
	resp, err := a.caller.Do(ctx, r)
	if err != nil {
		return prediction{}, err
	}
	var p prediction
	if err := a.caller.DecodeJSON(r, resp, maxJSONAnswer, &p); err != nil {
		return prediction{}, err
	}
	if !provider.ValidExternalID(p.ID) {
		return prediction{}, a.caller.BadResponse(r, resp.Status, fmt.Errorf("create answered with an invalid prediction id %q", p.ID))
	}
	a.log.Info("replicate prediction created", "op", op, "unit", unit, "prediction", p.ID, "status", p.Status)
	return p, nil
}

// get reads a prediction (bills nothing).
func (a *Adapter) get(ctx context.Context, op, id string) (prediction, error) {
	r := provider.Request{Op: op, Read: true, Method: http.MethodGet, Header: a.auth()}
	if !provider.ValidExternalID(id) {
		return prediction{}, a.caller.Fail(r, &pipeline.CallError{Op: op, Outcome: pipeline.OutcomeRejected, Code: provider.CodeInvalidCall,
			Cause: fmt.Errorf("%w: invalid prediction id", pipeline.ErrInvalidInput)})
	}
	r.URL = a.apiURL("/v1/predictions/" + id)
	resp, err := a.caller.Do(ctx, r)
	if err != nil {
		return prediction{}, err
	}
	var p prediction
	if err := a.caller.DecodeJSON(r, resp, maxJSONAnswer, &p); err != nil {
		return prediction{}, err
	}
	if p.ID != id {
		return prediction{}, a.caller.BadResponse(r, resp.Status, fmt.Errorf("prediction %q answered for %q", p.ID, id))
	}
	return p, nil
}

// outputURL is the first URL of a succeeded prediction's output (a string
// or a list of strings).
func outputURL(p prediction) (string, bool) {
	var one string
	if json.Unmarshal(p.Output, &one) == nil && one != "" {
		return one, true
	}
	var many []string
	if json.Unmarshal(p.Output, &many) == nil && len(many) > 0 && many[0] != "" {
		return many[0], true
	}
	return "", false
}

// download fetches a succeeded prediction's output as a stream. op names
// the operation in errors; a 404/410 is CodeOutputExpired, outcome failed.
func (a *Adapter) download(ctx context.Context, op string, p prediction, kind string) (pipeline.Media, error) {
	r := provider.Request{Op: op, Read: true, Method: http.MethodGet, Header: http.Header{},
		GoneCode: provider.CodeOutputExpired, GoneOutcome: pipeline.OutcomeFailed}
	raw, ok := outputURL(p)
	if !ok {
		if p.DataRemoved || len(p.Output) == 0 || string(p.Output) == "null" {
			return pipeline.Media{}, a.caller.Fail(r, &pipeline.CallError{Op: op, Outcome: pipeline.OutcomeFailed, Code: provider.CodeOutputExpired,
				Cause: fmt.Errorf("prediction %s has no output any more (data_removed=%t)", p.ID, p.DataRemoved)})
		}
		return pipeline.Media{}, a.caller.BadResponse(r, 200, fmt.Errorf("prediction %s output is not a URL", p.ID))
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || !(u.Scheme == "https" || u.Scheme == a.base.Scheme && u.Scheme == "http") {
		return pipeline.Media{}, a.caller.BadResponse(r, 200, fmt.Errorf("prediction %s output is not an https URL", p.ID))
	}
	r.URL = u
	if a.mayGetToken(u) {
		r.Header = a.auth()
	}
	resp, err := a.caller.Do(ctx, r)
	if err != nil {
		return pipeline.Media{}, err
	}
	ct := resp.Header.Get("Content-Type")
	mt := strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
	if !strings.HasPrefix(mt, kind+"/") && mt != "application/octet-stream" {
		resp.Body.Close()
		return pipeline.Media{}, a.caller.BadResponse(r, resp.Status, fmt.Errorf("output content type %q, want %s/*", ct, kind))
	}
	return pipeline.Media{Body: resp.Body, ContentType: mt}, nil
}

// mayGetToken: the API host, and Replicate's delivery hosts.
func (a *Adapter) mayGetToken(u *url.URL) bool {
	h := strings.ToLower(u.Hostname())
	if strings.EqualFold(u.Host, a.base.Host) && u.Scheme == a.base.Scheme {
		return true
	}
	return u.Scheme == "https" && (h == "replicate.delivery" || strings.HasSuffix(h, ".replicate.delivery"))
}

// SubmitVideo creates a video prediction and returns its id (async_pollable).
func (a *Adapter) SubmitVideo(ctx context.Context, meta pipeline.CallMeta, req pipeline.VideoRequest) (string, error) {
	if a.models[pipeline.OpVideoSubmit] == "" {
		return "", noModel(pipeline.OpVideoSubmit)
	}
	p, err := a.create(ctx, pipeline.OpVideoSubmit, meta.UnitID, map[string]any{"prompt": req.Prompt})
	if err != nil {
		return "", err
	}
	return p.ID, nil
}

// VideoStatus polls a prediction. Reads bill nothing: failures are not_sent.
func (a *Adapter) VideoStatus(ctx context.Context, id string) (pipeline.VideoState, error) {
	p, err := a.get(ctx, provider.OpVideoStatus, id)
	if err != nil {
		return pipeline.VideoState{}, err
	}
	return a.state(provider.OpVideoStatus, p)
}

func (a *Adapter) state(op string, p prediction) (pipeline.VideoState, error) {
	switch p.Status {
	case "starting", "processing":
		return pipeline.VideoState{}, nil
	case "succeeded":
		return pipeline.VideoState{Done: true}, nil
	case "failed":
		return pipeline.VideoState{Failed: true, Code: provider.CodeGenerationFailed}, nil
	case "canceled", "aborted":
		return pipeline.VideoState{Failed: true, Code: provider.CodeJobCanceled}, nil
	}
	r := provider.Request{Op: op, Read: true}
	return pipeline.VideoState{}, a.caller.BadResponse(r, 200, fmt.Errorf("unknown prediction status %q", p.Status))
}

// FetchVideo downloads a succeeded prediction's video, streamed.
func (a *Adapter) FetchVideo(ctx context.Context, id string) (pipeline.Media, error) {
	op := provider.OpVideoFetch
	p, err := a.get(ctx, op, id)
	if err != nil {
		return pipeline.Media{}, err
	}
	st, err := a.state(op, p)
	switch {
	case err != nil:
		return pipeline.Media{}, err
	case st.Failed:
		return pipeline.Media{}, a.caller.Fail(provider.Request{Op: op, Read: true}, &pipeline.CallError{Op: op, Outcome: pipeline.OutcomeFailed,
			Code: provider.CodeJobFailed, Cause: fmt.Errorf("prediction %s is %s", id, p.Status)})
	case !st.Done:
		return pipeline.Media{}, &pipeline.CallError{Op: op, Outcome: pipeline.OutcomeNotSent, Code: provider.CodeVideoNotReady,
			Cause: fmt.Errorf("prediction %s is %s", id, p.Status)}
	}
	return a.download(ctx, op, p, "video")
}

// GenerateImage runs an image prediction to its end inside this call.
func (a *Adapter) GenerateImage(ctx context.Context, meta pipeline.CallMeta, req pipeline.ImageRequest) (pipeline.Media, error) {
	in := map[string]any{"prompt": req.Prompt, "num_outputs": 1, "output_format": "png"}
	if ar := aspectRatio(req.Width, req.Height); ar != "" {
		in["aspect_ratio"] = ar
	}
	return a.runSync(ctx, pipeline.OpImage, meta.UnitID, in, "image")
}

// Synthesize runs a speech prediction ({"text"}) to its end inside this call.
func (a *Adapter) Synthesize(ctx context.Context, meta pipeline.CallMeta, req pipeline.SpeechRequest) (pipeline.Media, error) {
	return a.runSync(ctx, pipeline.OpSpeech, meta.UnitID, map[string]any{"text": req.Text}, "audio")
}

// runSync creates a prediction, polls it and downloads its output. Once the
// create succeeded, the prediction exists and bills: every later failure is
// reported as op's, with outcome unknown (or failed, when the provider says
// the generation failed or the output expired), never not_sent, so the
// pipeline cannot mistake it for a call it may simply repeat.
func (a *Adapter) runSync(ctx context.Context, op, unit string, input map[string]any, kind string) (pipeline.Media, error) {
	if a.models[op] == "" {
		return pipeline.Media{}, noModel(op)
	}
	p, err := a.create(ctx, op, unit, input)
	if err != nil {
		return pipeline.Media{}, err
	}
	deadline := time.Now().Add(a.cfg.SyncWait)
	pollErrors := 0
	for p.Status != "succeeded" {
		switch p.Status {
		case "failed":
			return pipeline.Media{}, a.after(op, p.ID, pipeline.OutcomeFailed, provider.CodeGenerationFailed, fmt.Errorf("prediction failed: %s", p.Error))
		case "canceled", "aborted":
			return pipeline.Media{}, a.after(op, p.ID, pipeline.OutcomeFailed, provider.CodeJobCanceled, fmt.Errorf("prediction %s", p.Status))
		}
		if time.Now().After(deadline) {
			// Stop the meter: a canceled prediction bills only the time it ran.
			a.cancel(ctx, op, p.ID)
			return pipeline.Media{}, a.after(op, p.ID, pipeline.OutcomeUnknown, provider.CodeTimeout,
				fmt.Errorf("prediction still %s after %s (cancel requested)", p.Status, a.cfg.SyncWait))
		}
		t := time.NewTimer(a.cfg.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			a.log.Warn("replicate call canceled while its prediction runs", "op", op, "unit", unit, "prediction", p.ID)
			return pipeline.Media{}, fmt.Errorf("provider %s: canceled after prediction %s was created: %w", op, p.ID, ctx.Err())
		case <-t.C:
		}
		next, err := a.get(ctx, op, p.ID)
		if err != nil {
			if ctx.Err() != nil {
				return pipeline.Media{}, fmt.Errorf("provider %s: canceled after prediction %s was created: %w", op, p.ID, ctx.Err())
			}
			if pollErrors++; pollErrors >= pollErrorBudget {
				return pipeline.Media{}, a.after(op, p.ID, pipeline.OutcomeUnknown, provider.CodePollFailed, err)
			}
			continue
		}
		pollErrors = 0
		if _, serr := a.state(op, next); serr != nil {
			return pipeline.Media{}, a.after(op, p.ID, pipeline.OutcomeUnknown, provider.CodeBadResponse, serr)
		}
		p = next
	}
	m, err := a.download(ctx, op, p, kind)
	if err != nil {
		if ctx.Err() != nil {
			return pipeline.Media{}, fmt.Errorf("provider %s: canceled after prediction %s was created: %w", op, p.ID, ctx.Err())
		}
		var ce *pipeline.CallError
		if errors.As(err, &ce) && ce.Outcome == pipeline.OutcomeFailed {
			return pipeline.Media{}, a.after(op, p.ID, pipeline.OutcomeFailed, ce.Code, err)
		}
		return pipeline.Media{}, a.after(op, p.ID, pipeline.OutcomeUnknown, provider.CodeConnectionLost, err)
	}
	// The body is read by the pipeline; a break there is classified as a
	// read failure (not_sent) by the Caller, so relabel it as this op's
	// unknown outcome.
	m.Body = &paidBody{rc: m.Body, a: a, op: op, id: p.ID}
	return m, nil
}

// cancel asks Replicate to cancel a prediction (POST
// /v1/predictions/{id}/cancel), best effort: the call's outcome is already
// decided, a failure here is only logged.
func (a *Adapter) cancel(ctx context.Context, op, id string) {
	r := provider.Request{Op: op, Read: true, Method: http.MethodPost, URL: a.apiURL("/v1/predictions/" + id + "/cancel"),
		Header: a.auth(), OK: []int{http.StatusOK, http.StatusAccepted, http.StatusNoContent}}
	resp, err := a.caller.Do(ctx, r)
	if err != nil {
		a.log.Warn("replicate prediction could not be canceled", "op", op, "prediction", id, "err", err)
		return
	}
	resp.Body.Close()
	a.log.Info("replicate prediction canceled", "op", op, "prediction", id)
}

// after builds the error of a sync call whose prediction was created.
func (a *Adapter) after(op, id string, outcome pipeline.CallOutcome, code string, cause error) error {
	return a.caller.Fail(provider.Request{Op: op}, &pipeline.CallError{Op: op, Outcome: outcome, Code: code,
		Cause: fmt.Errorf("prediction %s: %w", id, cause)})
}

type paidBody struct {
	rc     io.ReadCloser
	a      *Adapter
	op, id string
}

func (b *paidBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.a.after(b.op, b.id, pipeline.OutcomeUnknown, provider.CodeConnectionLost, err)
	}
	return n, err
}

func (b *paidBody) Close() error { return b.rc.Close() }

func noModel(op string) error {
	return &pipeline.CallError{Op: op, Outcome: pipeline.OutcomeRejected, Code: provider.CodeUnsupportedOperation,
		Cause: fmt.Errorf("%w: no Replicate model is configured for %s (%s)", pipeline.ErrInvalidInput, op, envOf(op))}
}

// aspectRatio maps a size to the nearest aspect ratio flux-schnell accepts.
func aspectRatio(w, h int) string {
	if w <= 0 || h <= 0 {
		return ""
	}
	best, bestDiff := "", 0.0
	for _, r := range []struct {
		s    string
		w, h float64
	}{{"1:1", 1, 1}, {"16:9", 16, 9}, {"21:9", 21, 9}, {"3:2", 3, 2}, {"2:3", 2, 3}, {"4:5", 4, 5},
		{"5:4", 5, 4}, {"3:4", 3, 4}, {"4:3", 4, 3}, {"9:16", 9, 16}, {"9:21", 9, 21}} {
		d := float64(w)/float64(h) - r.w/r.h
		if d < 0 {
			d = -d
		}
		if best == "" || d < bestDiff {
			best, bestDiff = r.s, d
		}
	}
	return best
}
