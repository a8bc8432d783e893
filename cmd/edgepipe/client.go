package main

// The client commands (submit, status, cancel, review, dlq) talk to a
// running edgepipe over its HTTP API through the client package. This file
// holds what they share: where the server is and which token to send,
// argument parsing, and printing server text safely.

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"edgepipe/client"
	"edgepipe/internal/app"
	"edgepipe/internal/termtext"
	"edgepipe/pipeline"
	"edgepipe/render"
	"edgepipe/routing"
)

// Client settings, read by app.FromEnv (Config.ClientURL, ClientToken,
// Render.FFprobePath); the admin token is the server's own
// EDGEPIPE_ADMIN_TOKEN. The names are here for the tests.
const (
	envURL       = "EDGEPIPE_URL"
	envToken     = "EDGEPIPE_TOKEN"
	envFFprobe   = "EDGEPIPE_FFPROBE"
	defaultURL   = "http://127.0.0.1:8080"
	devTokenFile = "dev-token"
	devAdminFile = "dev-admin-token"
	// maxPartLen bounds one piece of server text in a message.
	maxPartLen = 300
)

// Sentinel errors of the client commands.
var (
	errNoToken = errors.New("no token")
	errUsage   = errors.New("usage")
)

// cliEnv is what a client command takes from its process: streams,
// environment and a few knobs, injected so tests can drive the commands
// against httptest servers without touching the real process.
type cliEnv struct {
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	getenv  func(string) string
	environ []string
	// tty: stderr is a terminal, so submit --wait draws a progress bar
	// that redraws in place instead of printing lines.
	tty bool
	// transport is the HTTP transport; nil means the client's default.
	transport http.RoundTripper
	// reconnectDelay, reconnectMax and streamIdle tune following an event
	// stream (client.Config); zero means the client's defaults.
	reconnectDelay time.Duration
	reconnectMax   time.Duration
	streamIdle     time.Duration
	now            func() time.Time
	// proofs replaces the job store's proofs (provider probe, proofs);
	// nil means the configured store's.
	proofs pipeline.ProofStore
}

func osEnv() *cliEnv {
	return &cliEnv{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		getenv: os.Getenv, environ: os.Environ(),
		tty: isTerminal(os.Stderr),
		now: time.Now,
	}
}

// isTerminal reports whether f is a character device, and TERM does not
// say the terminal cannot move the cursor.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	return os.Getenv("TERM") != "dumb"
}

// clientFlags are the flags every client command has.
type clientFlags struct {
	url   *string
	token *string
}

func addClientFlags(fs *flag.FlagSet, admin bool) clientFlags {
	tokenHelp := "bearer token (default $EDGEPIPE_TOKEN, else $EDGEPIPE_DATA_DIR/dev-token)"
	if admin {
		tokenHelp = "operator token (default $EDGEPIPE_ADMIN_TOKEN, else $EDGEPIPE_DATA_DIR/dev-admin-token)"
	}
	return clientFlags{
		url:   fs.String("url", "", "server URL (default $EDGEPIPE_URL, else "+defaultURL+")"),
		token: fs.String("token", "", tokenHelp),
	}
}

// apiClient is a client of one server with one token, and the ffprobe
// that checks downloaded results.
type apiClient struct {
	*client.Client
	// ffprobe is the configured ffprobe (EDGEPIPE_FFPROBE or "ffprobe").
	ffprobe string
}

// newClient resolves the server URL and token: flags first, then
// EDGEPIPE_URL / EDGEPIPE_TOKEN (or EDGEPIPE_ADMIN_TOKEN), then the
// development token file that `edgepipe serve` writes.
func (e *cliEnv) newClient(f clientFlags, admin bool) (*apiClient, error) {
	cfg, err := app.FromEnv(e.getenv, e.environ)
	if err != nil {
		return nil, err
	}
	raw := firstNonEmpty(*f.url, cfg.ClientURL, defaultURL)
	if _, err := client.ParseBaseURL(raw); err != nil {
		return nil, err
	}
	tok := *f.token
	file := filepath.Join(cfg.DataDir, devTokenFile)
	if admin {
		tok, file = firstNonEmpty(tok, cfg.AdminToken), filepath.Join(cfg.DataDir, devAdminFile)
	} else {
		tok = firstNonEmpty(tok, cfg.ClientToken)
	}
	if tok == "" {
		if tok, err = readTokenFile(file); err != nil {
			return nil, err
		}
	}
	c, err := client.New(client.Config{BaseURL: raw, Token: tok, Transport: e.transport, UserAgent: "edgepipe-cli/" + version,
		ReconnectDelay: e.reconnectDelay, ReconnectMax: e.reconnectMax, StreamIdle: e.streamIdle})
	if err != nil {
		return nil, err
	}
	return &apiClient{Client: c, ffprobe: cmp.Or(cfg.Render.FFprobePath, render.DefaultFFprobePath)}, nil
}

func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: pass --token, set the environment variable, or start `edgepipe serve` in development mode, which writes %s", errNoToken, path)
	}
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: %s is empty", errNoToken, path)
	}
	return tok, nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// clean makes server text safe for one terminal line.
func clean(s string, limit int) string { return termtext.Clean(s, limit) }

// keyLimit bounds a printed internal job key (operator commands): an
// instance id of up to routing.MaxIDLen bytes plus pipeline.JobKey's suffix.
const keyLimit = routing.MaxIDLen + pipeline.JobKeySuffixLen

// parseArgs parses flags that may come before or after the positional
// arguments ("submit FILE --wait" as well as "submit --wait FILE"); "--"
// ends the flags.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// wantArgs checks the number of positional arguments.
func wantArgs(fs *flag.FlagSet, pos []string, names ...string) error {
	if len(pos) == len(names) {
		return nil
	}
	if len(pos) < len(names) {
		return fmt.Errorf("%w: missing %s (edgepipe %s --help)", errUsage, names[len(pos)], fs.Name())
	}
	return fmt.Errorf("%w: unexpected argument %q (edgepipe %s --help)", errUsage, pos[len(names)], fs.Name())
}

// writeJSON prints v indented, for --json.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
