package provider

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"

	"edgepipe/pipeline"
)

// The settings (environment variables) of BaseURL and Timeout; internal/app
// reads them, and errors name them.
const (
	EnvURL     = "EDGEPIPE_PROVIDER_URL"     // base URL of the provider API, e.g. http://127.0.0.1:8081
	EnvTimeout = "EDGEPIPE_PROVIDER_TIMEOUT" // Go duration bounding one call, e.g. 60s
)

// DefaultTimeout bounds one provider call when Config.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// DefaultName is what Name reports when Config.Name is empty.
const DefaultName = "http"

// DefaultModels are the model ids used when Config.Models does not name one.
// Keys are the pipeline operations. They match provider/fake's defaults; the
// model id is part of deterministic object keys, so changing it regenerates.
var DefaultModels = map[string]string{
	pipeline.OpImage:       "fake-image-1",
	pipeline.OpSpeech:      "fake-tts-1",
	pipeline.OpVideoSubmit: "fake-video-1",
}

// Config configures an HTTP provider client.
type Config struct {
	// BaseURL is the provider API root (EDGEPIPE_PROVIDER_URL): an absolute
	// http or https URL, optionally with a path prefix the API lives under.
	BaseURL string
	// Timeout bounds one call from the first byte sent to the last byte of
	// the response body read, including the streamed media (0 =
	// DefaultTimeout). Size it for the largest video you fetch.
	Timeout time.Duration
	// Client sends the requests (nil = clients of our own built on clones
	// of http.DefaultTransport, where speech and video submissions get a
	// fresh connection each; see New). It is copied, never modified; the
	// copy never follows redirects, because following one could turn a POST
	// into a GET or send a body to a server nobody chose. The adapter's
	// request shape keeps billable calls from being resent whatever the
	// transport.
	Client *http.Client
	// Models maps a pipeline operation (pipeline.OpImage, ...) to the model
	// id Model reports; missing entries take DefaultModels.
	Models map[string]string
	// Name is what Name reports for the intent log ("" = DefaultName).
	Name string
	// Endpoint names the server in probes' proofs (Endpoint; "" = BaseURL
	// without credentials). internal/app names its in-process fake
	// "in-process", whose port changes at every start.
	Endpoint string
	// Clock dates a Retry-After given as an HTTP date when the response has
	// no usable Date header (nil = the system clock).
	Clock pipeline.Clock
	// Logger receives a debug line per call and a warning per failed call
	// (nil = discard). Prompts and texts are never logged.
	Logger *slog.Logger
}

// Validate reports the first invalid field. Errors match
// pipeline.ErrInvalidInput and name the environment variable a user sets.
func (c Config) Validate() error {
	if _, err := parseBaseURL(c.BaseURL); err != nil {
		return err
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: %s: timeout must not be negative, got %s", pipeline.ErrInvalidInput, EnvTimeout, c.Timeout)
	}
	return nil
}

// parseBaseURL checks BaseURL. Messages never echo a password the URL might
// carry, and url.Parse errors are unwrapped because they quote the input.
func parseBaseURL(raw string) (*url.URL, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s %s", pipeline.ErrInvalidInput, EnvURL, fmt.Sprintf(format, a...))
	}
	if strings.TrimSpace(raw) == "" {
		return nil, bad("is required: the provider API base URL, e.g. http://127.0.0.1:8081")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, bad("must be an absolute http(s) URL, e.g. http://127.0.0.1:8081: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("must be an absolute http(s) URL, got scheme %q in %q", u.Scheme, u.Redacted())
	case u.Host == "" || u.Opaque != "":
		return nil, bad("must be an absolute http(s) URL with a host, got %q", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return nil, bad("must not have a query or fragment, got %q", u.Redacted())
	case u.User != nil:
		return nil, bad("must not carry credentials, got %q", u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

func (c Config) withDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.Name = cmp.Or(c.Name, DefaultName)
	models := maps.Clone(DefaultModels)
	for op, m := range c.Models {
		if m != "" {
			models[op] = m
		}
	}
	c.Models = models
	if c.Clock == nil {
		c.Clock = pipeline.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
