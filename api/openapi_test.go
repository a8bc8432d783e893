package api

import (
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"go.yaml.in/yaml/v3"
)

type openAPIDocument struct {
	OpenAPI string                                 `yaml:"openapi"`
	Paths   map[string]map[string]openAPIOperation `yaml:"paths"`
}

type openAPIOperation struct {
	OperationID string         `yaml:"operationId"`
	Responses   map[string]any `yaml:"responses"`
}

func parseOpenAPI(t *testing.T) openAPIDocument {
	t.Helper()
	var doc openAPIDocument
	if err := yaml.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.yaml does not parse: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi version %q, want 3.1.0", doc.OpenAPI)
	}
	return doc
}

var echoParam = regexp.MustCompile(`:([A-Za-z_]+)`)

// Every route the server has is documented, and every documented operation
// is a route: the document cannot drift from the handlers.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	doc := parseOpenAPI(t)
	e := newEnv(t)
	routes := map[string]bool{}
	for _, r := range e.srv.Echo().Routes() {
		if r.Method == echo.RouteNotFound {
			continue // groups' catch-alls, so their middleware runs on unknown paths too
		}
		routes[strings.ToLower(r.Method)+" "+echoParam.ReplaceAllString(r.Path, "{$1}")] = true
	}
	documented := map[string]bool{}
	ids := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			switch method {
			case "get", "post", "put", "patch", "delete", "head", "options":
			default:
				continue // parameters, summary, …
			}
			documented[method+" "+path] = true
			if op.OperationID == "" || ids[op.OperationID] {
				t.Errorf("%s %s: missing or duplicate operationId %q", method, path, op.OperationID)
			}
			ids[op.OperationID] = true
			if len(op.Responses) == 0 {
				t.Errorf("%s %s documents no responses", method, path)
			}
		}
	}
	var missing, extra []string
	for r := range routes {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for d := range documented {
		if !routes[d] {
			extra = append(extra, d)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes missing from openapi.yaml: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("openapi.yaml documents routes the server lacks: %v", extra)
	}
	if len(routes) < 15 {
		t.Fatalf("only %d routes found; the comparison is not looking at the real router", len(routes))
	}
}

// The status codes the tests prove are documented for their operations.
func TestOpenAPIDocumentsTestedStatusCodes(t *testing.T) {
	t.Parallel()
	doc := parseOpenAPI(t)
	want := map[string][]string{
		"post /v1/jobs":                            {"202", "400", "401", "409", "413", "415", "422"},
		"get /v1/jobs":                             {"200", "400", "401"},
		"get /v1/jobs/{id}":                        {"200", "401", "404"},
		"get /v1/jobs/{id}/events":                 {"200", "400", "404"},
		"post /v1/jobs/{id}/cancellation":          {"202", "404", "409"},
		"get /v1/jobs/{id}/result":                 {"200", "206", "302", "304", "404", "409", "416"},
		"post /v1/admin/jobs/{id}/decision":        {"200", "303", "400", "401", "403", "404", "409", "415"},
		"post /v1/admin/dead-letters/{id}/redrive": {"200", "303", "404", "409", "415"},
		"post /v1/admin/dead-letters/{id}/discard": {"200", "303", "400", "404", "409", "415"},
		"post /v1/admin/dead-letters/redrive":      {"200", "303", "400"},
		"post /v1/admin/dead-letters/discard":      {"200", "303", "400"},
		"get /readyz":                              {"200", "503"},
	}
	for op, codes := range want {
		method, path, _ := strings.Cut(op, " ")
		o, ok := doc.Paths[path][method]
		if !ok {
			t.Errorf("%s not documented", op)
			continue
		}
		for _, c := range codes {
			if _, ok := o.Responses[c]; !ok {
				t.Errorf("%s does not document %s", op, c)
			}
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.do(t, req{method: http.MethodGet, path: "/openapi.yaml"})
	if w.Code != 200 || !slices.Equal(w.Body.Bytes(), openAPIDoc) || w.Header().Get("Content-Type") != "application/yaml" {
		t.Fatalf("%d %s", w.Code, w.Header())
	}
}
