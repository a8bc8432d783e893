package main

// The client commands (submit, status, cancel, dlq) talk to a running
// edgepipe over its HTTP API. This file holds what they share: where the
// server is and which token to send, the HTTP client, and turning
// problem+json answers into one-line errors.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"edgepipe/api"
	"edgepipe/internal/app"
)

// Client settings. EDGEPIPE_URL and EDGEPIPE_TOKEN are in app.Known; the
// admin token is the server's own EDGEPIPE_ADMIN_TOKEN.
const (
	envURL        = "EDGEPIPE_URL"
	envToken      = "EDGEPIPE_TOKEN"
	envFFprobe    = "EDGEPIPE_FFPROBE"
	defaultURL    = "http://127.0.0.1:8080"
	devTokenFile  = "dev-token"
	devAdminFile  = "dev-admin-token"
	requestTimout = 30 * time.Second
	// maxErrorBody bounds how much of an error answer is read: a problem is
	// small, and a misconfigured URL may point at something that is not.
	maxErrorBody = 64 << 10
	// maxJSONBody bounds a JSON answer (a page of 500 jobs fits easily).
	maxJSONBody = 16 << 20
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
	// transport is the HTTP transport; nil means a clone of the default.
	transport http.RoundTripper
	// reconnectDelay is the first pause before reconnecting a dropped
	// event stream; it doubles up to reconnectMax.
	reconnectDelay time.Duration
	reconnectMax   time.Duration
	// streamIdle is how long an event stream may stay silent (the server
	// sends a keep-alive comment every 15 s) before it is dropped.
	streamIdle time.Duration
	now        func() time.Time
}

func osEnv() *cliEnv {
	return &cliEnv{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		getenv: os.Getenv, environ: os.Environ(),
		tty:            isTerminal(os.Stderr),
		reconnectDelay: 500 * time.Millisecond,
		reconnectMax:   10 * time.Second,
		streamIdle:     45 * time.Second,
		now:            time.Now,
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

// client is an HTTP client of one edgepipe server with one token.
type client struct {
	base  *url.URL
	token string
	http  *http.Client
	env   *cliEnv
	// ffprobe is the configured ffprobe (EDGEPIPE_FFPROBE or "ffprobe").
	ffprobe string
}

// newClient resolves the server URL and token: flags first, then
// EDGEPIPE_URL / EDGEPIPE_TOKEN (or EDGEPIPE_ADMIN_TOKEN), then the
// development token file that `edgepipe serve` writes.
func (e *cliEnv) newClient(f clientFlags, admin bool) (*client, error) {
	cfg, err := app.FromEnv(e.getenv, e.environ)
	if err != nil {
		return nil, err
	}
	raw := firstNonEmpty(*f.url, cfg.Getenv(envURL), defaultURL)
	base, err := parseBaseURL(raw)
	if err != nil {
		return nil, err
	}
	tok := *f.token
	file := filepath.Join(cfg.DataDir, devTokenFile)
	if admin {
		tok, file = firstNonEmpty(tok, cfg.AdminToken), filepath.Join(cfg.DataDir, devAdminFile)
	} else {
		tok = firstNonEmpty(tok, cfg.Getenv(envToken))
	}
	if tok == "" {
		if tok, err = readTokenFile(file); err != nil {
			return nil, err
		}
	}
	if strings.IndexFunc(tok, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return nil, fmt.Errorf("token: must be printable ASCII without spaces")
	}
	tr := e.transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = requestTimout
		tr = t
	}
	hc := &http.Client{
		Transport: tr,
		// Only the result download redirects (to a presigned URL). The
		// presigned URL carries its own credentials; sending ours along
		// would leak the token to the object store and make S3 refuse
		// the request for having two kinds of authentication.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("stopped after 5 redirects")
			}
			req.Header.Del("Authorization")
			return nil
		},
	}
	return &client{base: base, token: tok, http: hc, env: e, ffprobe: firstNonEmpty(cfg.Getenv(envFFprobe), "ffprobe")}, nil
}

func parseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("server URL %q: want http(s)://host[:port][/prefix] without credentials or query", raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
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

// endpoint is the URL of an API path below the base URL. Segments are
// escaped, so an id can never reach another route.
func (c *client) endpoint(segments ...string) string {
	var b strings.Builder
	b.WriteString(c.base.String())
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// request sends one request with the token. A 4xx/5xx answer is returned as
// an *apiError (the body consumed and closed).
func (c *client) request(ctx context.Context, method, target string, hdr http.Header, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", "edgepipe-cli/"+version)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// transportError keeps the URL (not secret, but noisy) out of connection
// errors while saying what was tried.
func transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if errors.Is(ue.Err, context.Canceled) || errors.Is(ue.Err, context.DeadlineExceeded) {
			return ue.Err
		}
		host := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			host = u.Host
		}
		return fmt.Errorf("cannot reach %s: %w", host, unwrapNet(ue.Err))
	}
	return err
}

// unwrapNet drops the "dial tcp 127.0.0.1:1:" prefixes from net errors,
// which repeat the address already named.
func unwrapNet(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// doJSON sends a request (body is JSON when not nil) and decodes a 2xx JSON
// answer into out.
func (c *client) doJSON(ctx context.Context, method, target string, hdr http.Header, body []byte, out any) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimout)
	defer cancel()
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Accept", "application/json")
	if body != nil {
		hdr.Set("Content-Type", "application/json")
	}
	resp, err := c.request(ctx, method, target, hdr, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if out == nil {
		return resp, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(out); err != nil {
		return resp, fmt.Errorf("%s %s: unreadable answer (HTTP %d): %w", method, pathOf(target), resp.StatusCode, err)
	}
	return resp, nil
}

func pathOf(target string) string {
	if u, err := url.Parse(target); err == nil {
		return u.EscapedPath()
	}
	return target
}

// getJob is GET /v1/jobs/{id}.
func (c *client) getJob(ctx context.Context, id string) (api.JobResource, error) {
	var j api.JobResource
	_, err := c.doJSON(ctx, http.MethodGet, c.endpoint("v1", "jobs", id), nil, nil, &j)
	return j, err
}

// apiError is an error answer of the API.
type apiError struct {
	Status  int
	Problem api.Problem // zero unless the body was problem+json
	// Text is the start of a body that was not a problem (a proxy's page).
	Text string
}

func (e *apiError) Error() string { return formatProblem(e.Status, e.Problem, e.Text) }

// readAPIError reads an error answer. Only bodies that say they are
// problem+json (or JSON) are parsed as a problem.
func readAPIError(resp *http.Response) error {
	e := &apiError{Status: resp.StatusCode}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == api.ProblemContentType || mt == "application/json" {
		if json.Unmarshal(body, &e.Problem) == nil && (e.Problem.Code != "" || e.Problem.Title != "") {
			return e
		}
		e.Problem = api.Problem{}
	}
	e.Text = string(body)
	return e
}

// Limits of the one-line error.
const (
	maxFieldErrors = 5
	maxPartLen     = 300
)

// formatProblem makes the one-line text of an error answer:
//
//	<title>: <detail> (<code>)
//	The request is invalid: scenes[0].duration_ms: must be …; options.fps: … (validation_failed)
//	Internal error: an internal error occurred; it has been logged (internal_error, request id abc)
//	HTTP 502 Bad Gateway: <start of the body>
//
// Field errors replace the detail (which only says "see errors"). Every
// piece comes from the server, so control characters are removed and each
// piece is shortened: the result is always a single printable line.
func formatProblem(status int, p api.Problem, text string) string {
	if p.Code == "" && p.Title == "" {
		head := fmt.Sprintf("HTTP %d", status)
		if st := http.StatusText(status); st != "" {
			head += " " + st
		}
		if t := clean(text, 200); t != "" && !looksLikeHTML(text) {
			return head + ": " + t
		}
		return head
	}
	title := clean(p.Title, maxPartLen)
	if title == "" {
		title = firstNonEmpty(http.StatusText(status), fmt.Sprintf("HTTP %d", status))
	}
	detail := clean(p.Detail, maxPartLen)
	if len(p.Errors) > 0 {
		parts := make([]string, 0, min(len(p.Errors), maxFieldErrors)+1)
		for i, fe := range p.Errors {
			if i == maxFieldErrors {
				parts = append(parts, fmt.Sprintf("and %d more", len(p.Errors)-maxFieldErrors))
				break
			}
			f, m := clean(fe.Field, 100), clean(fe.Message, 200)
			switch {
			case f == "":
				parts = append(parts, m)
			case m == "":
				parts = append(parts, f)
			default:
				parts = append(parts, f+": "+m)
			}
		}
		detail = strings.Join(parts, "; ")
	}
	var b strings.Builder
	b.WriteString(title)
	if detail != "" {
		b.WriteString(": ")
		b.WriteString(detail)
	}
	var tags []string
	if c := clean(p.Code, 64); c != "" {
		tags = append(tags, c)
	} else {
		tags = append(tags, fmt.Sprintf("HTTP %d", status))
	}
	if rid := clean(p.RequestID, 64); rid != "" {
		tags = append(tags, "request id "+rid)
	}
	fmt.Fprintf(&b, " (%s)", strings.Join(tags, ", "))
	return b.String()
}

// clean makes server text safe for one terminal line: invalid UTF-8 and
// control characters (escape sequences included) become spaces, runs of
// white space collapse, and the text is cut at limit runes.
func clean(s string, limit int) string {
	s = strings.ToValidUTF8(s, " ")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > limit {
		r := []rune(s)
		s = string(r[:limit-1]) + "…"
	}
	return s
}

func looksLikeHTML(s string) bool {
	t := strings.ToLower(strings.TrimSpace(s))
	return strings.HasPrefix(t, "<!doctype") || strings.HasPrefix(t, "<html")
}

// parseArgs parses flags that may come before or after the positional
// arguments ("submit FILE --wait" as well as "submit --wait FILE"); "--"
// ends the flags.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
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
