package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

func TestSubmitStatusCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long := strings.Repeat("k", MaxIdempotencyKeyLen)
	cases := []struct {
		name   string
		hdr    map[string]string
		body   string
		status int
		code   string
		field  string
	}{
		{"accepted", submitHeaders(tokAcme, "k-ok"), validBody, 202, "", ""},
		{"charset utf-8 accepted", map[string]string{"Authorization": "Bearer " + tokAcme, "Content-Type": "application/json; charset=UTF-8", "Idempotency-Key": "k-cs"}, validBody, 202, "", ""},
		{"bearer scheme is case-insensitive", map[string]string{"Authorization": "bearer " + tokAcme, "Content-Type": "application/json", "Idempotency-Key": "k-lc"}, validBody, 202, "", ""},
		{"255-byte key", submitHeaders(tokAcme, long), validBody, 202, "", ""},
		{"no token", map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k"}, validBody, 401, "unauthorized", ""},
		{"unknown token", submitHeaders("tok-nobody-0123456789abcdef", "k"), validBody, 401, "unauthorized", ""},
		{"admin token is not a tenant", submitHeaders(tokAdmin, "k"), validBody, 401, "unauthorized", ""},
		{"basic auth", map[string]string{"Authorization": "Basic YTpi", "Content-Type": "application/json", "Idempotency-Key": "k"}, validBody, 401, "unauthorized", ""},
		{"bearer without token", map[string]string{"Authorization": "Bearer ", "Content-Type": "application/json", "Idempotency-Key": "k"}, validBody, 401, "unauthorized", ""},
		{"no content type", map[string]string{"Authorization": "Bearer " + tokAcme, "Idempotency-Key": "k"}, validBody, 415, "unsupported_media_type", ""},
		{"text/plain", map[string]string{"Authorization": "Bearer " + tokAcme, "Content-Type": "text/plain", "Idempotency-Key": "k"}, validBody, 415, "unsupported_media_type", ""},
		{"form", map[string]string{"Authorization": "Bearer " + tokAcme, "Content-Type": "application/x-www-form-urlencoded", "Idempotency-Key": "k"}, validBody, 415, "unsupported_media_type", ""},
		{"latin1 json", map[string]string{"Authorization": "Bearer " + tokAcme, "Content-Type": "application/json; charset=latin1", "Idempotency-Key": "k"}, validBody, 415, "unsupported_media_type", ""},
		{"missing key", map[string]string{"Authorization": "Bearer " + tokAcme, "Content-Type": "application/json"}, validBody, 400, "idempotency_key_missing", ""},
		{"256-byte key", submitHeaders(tokAcme, long+"k"), validBody, 400, "idempotency_key_invalid", ""},
		{"non-ASCII key", submitHeaders(tokAcme, "schlüssel"), validBody, 400, "idempotency_key_invalid", ""},
		{"control character in key", submitHeaders(tokAcme, "a\x01b"), validBody, 400, "idempotency_key_invalid", ""},
		{"malformed JSON", submitHeaders(tokAcme, "k1"), `{"operation":`, 400, "validation_failed", "body"},
		{"empty body", submitHeaders(tokAcme, "k2"), ``, 400, "validation_failed", "body"},
		{"array body", submitHeaders(tokAcme, "k2b"), `[]`, 400, "validation_failed", "body"},
		{"trailing data", submitHeaders(tokAcme, "k3"), validBody + `{}`, 400, "validation_failed", "body"},
		{"unknown field", submitHeaders(tokAcme, "k4"), withField("priority", 1), 400, "validation_failed", "priority"},
		{"unknown operation", submitHeaders(tokAcme, "k5"), withField("operation", "render_audio"), 400, "validation_failed", "operation"},
		{"no scenes", submitHeaders(tokAcme, "k6"), withField("scenes", []any{}), 400, "validation_failed", "scenes"},
		{"scene too short", submitHeaders(tokAcme, "k7"), withField("scenes", []any{map[string]any{"image_prompt": "x", "narration": "y", "duration_ms": 10}}), 400, "validation_failed", "scenes[0].duration_ms"},
		{"wrong type", submitHeaders(tokAcme, "k8"), withField("scenes", "many"), 400, "validation_failed", "scenes"},
		{"bad instance id", submitHeaders(tokAcme, "k9"), withField("instance_id", "has space"), 400, "invalid_instance_id", "instance_id"},
		{"instance id too long", submitHeaders(tokAcme, "k10"), withField("instance_id", strings.Repeat("a", 65)), 400, "invalid_instance_id", "instance_id"},
		{"empty instance id", submitHeaders(tokAcme, "k11"), withField("instance_id", ""), 400, "invalid_instance_id", "instance_id"},
		{"webhook not http", submitHeaders(tokAcme, "k12"), withField("webhook_url", "ftp://hooks.example.com/x"), 400, "validation_failed", "webhook_url"},
		{"webhook with credentials", submitHeaders(tokAcme, "k13"), withField("webhook_url", "https://u:p@hooks.example.com/x"), 400, "validation_failed", "webhook_url"},
		{"webhook loopback literal", submitHeaders(tokAcme, "k14"), withField("webhook_url", "http://127.0.0.1:8080/x"), 400, "validation_failed", "webhook_url"},
		{"webhook ipv6 loopback", submitHeaders(tokAcme, "k15"), withField("webhook_url", "http://[::1]/x"), 400, "validation_failed", "webhook_url"},
		{"webhook mapped loopback", submitHeaders(tokAcme, "k15b"), withField("webhook_url", "http://[::ffff:127.0.0.1]/x"), 400, "validation_failed", "webhook_url"},
		{"webhook private name", submitHeaders(tokAcme, "k16"), withField("webhook_url", "https://internal.example.com/x"), 400, "validation_failed", "webhook_url"},
		{"webhook metadata name", submitHeaders(tokAcme, "k17"), withField("webhook_url", "https://metadata.example.com/x"), 400, "validation_failed", "webhook_url"},
		{"webhook one private record", submitHeaders(tokAcme, "k18"), withField("webhook_url", "https://mixed.example.com/x"), 400, "validation_failed", "webhook_url"},
		{"webhook localhost", submitHeaders(tokAcme, "k19"), withField("webhook_url", "http://localhost/x"), 400, "validation_failed", "webhook_url"},
		{"webhook unresolvable", submitHeaders(tokAcme, "k20"), withField("webhook_url", "https://nowhere.example.com/x"), 400, "validation_failed", "webhook_url"},
		{"webhook public", submitHeaders(tokAcme, "k21"), withField("webhook_url", "https://hooks.example.com/x"), 202, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := e.do(t, req{method: http.MethodPost, path: "/v1/jobs", body: tc.body, hdr: tc.hdr})
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.status == 202 {
				j := decode[JobResource](t, w)
				if w.Header().Get("Location") != "/v1/jobs/"+j.ID || j.Status != pipeline.StatusPending {
					t.Fatalf("Location %q, job %+v", w.Header().Get("Location"), j)
				}
				return
			}
			p := problemOf(t, w)
			if p.Code != tc.code {
				t.Fatalf("code %q, want %q (%+v)", p.Code, tc.code, p)
			}
			if tc.field != "" && !hasField(p, tc.field) {
				t.Fatalf("errors %+v lack field %q", p.Errors, tc.field)
			}
			if tc.status == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}

func hasField(p Problem, field string) bool {
	for _, f := range p.Errors {
		if f.Field == field {
			return true
		}
	}
	return false
}

func TestSubmitBodyTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxBodyBytes = 4096 })
	big := withField("title", strings.Repeat("x", 5000))
	// Declared length over the limit: refused before reading.
	w := e.submit(t, tokAcme, "big-1", big)
	if w.Code != http.StatusRequestEntityTooLarge || problemOf(t, w).Code != "payload_too_large" {
		t.Fatalf("declared: %d %s", w.Code, w.Body)
	}
	// Chunked (no declared length): refused while reading.
	hr := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(big))
	hr.ContentLength = -1
	for k, v := range submitHeaders(tokAcme, "big-2") {
		hr.Header.Set(k, v)
	}
	w = httptest.NewRecorder()
	e.h.ServeHTTP(w, hr)
	if w.Code != http.StatusRequestEntityTooLarge || problemOf(t, w).Code != "payload_too_large" {
		t.Fatalf("chunked: %d %s", w.Code, w.Body)
	}
	// Nothing was created by either.
	jobs, _, _ := e.store.ListJobs(context.Background(), pipeline.ListFilter{Tenant: "acme"})
	if len(jobs) != 0 {
		t.Fatalf("%d jobs created by refused requests", len(jobs))
	}
}

func TestSubmitIdempotentReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.submit(t, tokAcme, "key-1", validBody)
	if first.Code != 202 || first.Header().Get(HeaderIdempotentReplayed) != "" {
		t.Fatalf("first: %d replayed=%q", first.Code, first.Header().Get(HeaderIdempotentReplayed))
	}
	j1 := decode[JobResource](t, first)
	if !strings.HasPrefix(j1.ID, "v1-") || len(j1.ID) != len("v1-")+ulid.EncodedSize || j1.Version != "v1" {
		t.Fatalf("minted id %q version %q", j1.ID, j1.Version)
	}

	// The same request, and the same request spelled differently (white
	// space the storyboard normalizes away; a webhook, which is not part of
	// the fingerprint) are replays of the first.
	for _, body := range []string{
		validBody,
		strings.Replace(validBody, `"A story"`, `"  A story  "`, 1),
		withField("webhook_url", "https://hooks.example.com/late"),
	} {
		w := e.submit(t, tokAcme, "key-1", body)
		if w.Code != first.Code || w.Header().Get(HeaderIdempotentReplayed) != "true" {
			t.Fatalf("replay: %d replayed=%q %s", w.Code, w.Header().Get(HeaderIdempotentReplayed), w.Body)
		}
		if j := decode[JobResource](t, w); j.ID != j1.ID || w.Header().Get("Location") != first.Header().Get("Location") {
			t.Fatalf("replay returned job %s at %s, want %s", j.ID, w.Header().Get("Location"), j1.ID)
		}
	}

	// The key belongs to the tenant: another tenant's same key is a new job.
	w := e.submit(t, tokGlobex, "key-1", validBody)
	if w.Code != 202 || w.Header().Get(HeaderIdempotentReplayed) != "" || decode[JobResource](t, w).ID == j1.ID {
		t.Fatalf("other tenant: %d %q %s", w.Code, w.Header().Get(HeaderIdempotentReplayed), w.Body)
	}
}

func TestSubmitKeyReusedWithDifferentRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mustSubmit(t, tokAcme, "key-1")
	for name, body := range map[string]string{
		"other title":            withField("title", "Another story"),
		"other options":          withField("options", map[string]any{"resolution": "1920x1080", "fps": 30}),
		"same body, instance id": withField("instance_id", "v1-mine"),
	} {
		w := e.submit(t, tokAcme, "key-1", body)
		if w.Code != http.StatusUnprocessableEntity {
			t.Fatalf("%s: %d %s", name, w.Code, w.Body)
		}
		if p := problemOf(t, w); p.Code != "idempotency_key_reused" || strings.Contains(p.Detail, "v1-") {
			t.Fatalf("%s: %+v", name, p)
		}
	}
	// A pinned instance id is part of the fingerprint both ways.
	e.submit(t, tokAcme, "key-2", withField("instance_id", "v1-pinned"))
	if w := e.submit(t, tokAcme, "key-2", withField("instance_id", "v1-pinned-2")); w.Code != 422 {
		t.Fatalf("other instance id: %d %s", w.Code, w.Body)
	}
	if w := e.submit(t, tokAcme, "key-2", validBody); w.Code != 422 {
		t.Fatalf("instance id dropped: %d %s", w.Code, w.Body)
	}
}

func TestSubmitCallerInstanceID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		b, _ := routing.NewBindings("v1")
		r, err := routing.NewRouter(routing.Config{Bindings: b})
		if err != nil {
			t.Fatal(err)
		}
		c.Router = r
	})
	cases := []struct {
		id      string
		status  pipeline.Status
		version string
	}{
		{"v1-mine_1", pipeline.StatusPending, "v1"},
		{"plain-id", pipeline.StatusPending, "v1"},      // no prefix: the default version
		{"v2-later", pipeline.StatusDeadLettered, "v2"}, // not bound here
		{"v3-future", pipeline.StatusDeadLettered, "v3"},
	}
	for i, tc := range cases {
		w := e.submit(t, tokAcme, "inst-"+tc.id, withField("instance_id", tc.id))
		if w.Code != 202 {
			t.Fatalf("%s: %d %s", tc.id, w.Code, w.Body)
		}
		j := decode[JobResource](t, w)
		if j.ID != tc.id || j.Status != tc.status || j.Version != tc.version {
			t.Fatalf("case %d %s: got id %s status %s version %q", i, tc.id, j.ID, j.Status, j.Version)
		}
		if tc.status == pipeline.StatusDeadLettered {
			if j.Error == nil || j.Error.Code != pipeline.ReasonUnboundVersion || !j.RequiresAction {
				t.Fatalf("%s: dead letter not visible in status: %+v", tc.id, j)
			}
			// The status is what GET shows too.
			if g := decode[JobResource](t, e.get(t, tokAcme, "/v1/jobs/"+tc.id)); g.Status != pipeline.StatusDeadLettered || g.Error.Code != "unbound_version" {
				t.Fatalf("%s: GET %+v", tc.id, g)
			}
		}
	}
	// Resubmitting a pinned id with its key is a replay, not a creation.
	for _, tc := range cases[:3] {
		w := e.submit(t, tokAcme, "inst-"+tc.id, withField("instance_id", tc.id))
		if w.Code != 202 || w.Header().Get(HeaderIdempotentReplayed) != "true" || decode[JobResource](t, w).ID != tc.id {
			t.Fatalf("replay of %s: %d replayed=%q %s", tc.id, w.Code, w.Header().Get(HeaderIdempotentReplayed), w.Body)
		}
	}
	// An id is unique per tenant: the same tenant cannot reuse it with
	// another key (another tenant can: TestInstanceIDsArePerTenant).
	if w := e.submit(t, tokAcme, "another-key", withField("instance_id", "v1-mine_1")); w.Code != http.StatusConflict || problemOf(t, w).Code != "instance_id_taken" {
		t.Fatalf("taken id: %d %s", w.Code, w.Body)
	}
	dls, _ := e.store.ListDeadLetters(context.Background(), false, 0, 0)
	if len(dls) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dls))
	}
	for _, d := range dls {
		if d.Reason != pipeline.ReasonUnboundVersion {
			t.Fatalf("dead letter %+v", d)
		}
		if d.JobID == "v3-future" && d.Queue != "render-v3" {
			t.Fatalf("dead letter queue %q, want render-v3", d.Queue)
		}
	}
}

// Twenty clients submitting one key at the same moment create one job: one
// answer is the creation, the others replay it. Both id paths: minted ids
// go through the group commit, caller-chosen ones do not.
func TestSubmitConcurrentSameKeyCreatesOneJob(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{"minted id": validBody, "caller id": withField("instance_id", "v1-raced")} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const n = 20
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				res   = make([]*httptest.ResponseRecorder, n)
			)
			for i := range n {
				wg.Go(func() {
					<-start
					res[i] = e.submit(t, tokAcme, "race-key", body)
				})
			}
			close(start)
			wg.Wait()
			ids := map[string]bool{}
			created := 0
			for i, w := range res {
				if w.Code != 202 {
					t.Fatalf("request %d: %d %s", i, w.Code, w.Body)
				}
				if w.Header().Get(HeaderIdempotentReplayed) == "" {
					created++
				}
				ids[decode[JobResource](t, w).ID] = true
			}
			if created != 1 || len(ids) != 1 {
				t.Fatalf("%d creations and %d distinct ids, want 1 and 1", created, len(ids))
			}
			jobs, _, err := e.store.ListJobs(context.Background(), pipeline.ListFilter{Tenant: "acme"})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("%d jobs in the store (%v), want 1", len(jobs), err)
			}
			total, _, _ := e.store.QueueDepth(context.Background(), "render-v1")
			if total != 1 {
				t.Fatalf("%d queue messages, want 1", total)
			}
		})
	}
}

// Many different submissions at once share commits; a bad one among them
// (a reused key) gets its 422 without costing the others anything.
func TestSubmitConcurrentDistinctKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.mustSubmit(t, tokAcme, "taken")
	const n = 40
	var wg sync.WaitGroup
	start := make(chan struct{})
	res := make([]*httptest.ResponseRecorder, n)
	for i := range n {
		wg.Go(func() {
			<-start
			if i == n/2 {
				res[i] = e.submit(t, tokAcme, "taken", withField("title", "different"))
				return
			}
			res[i] = e.submit(t, tokAcme, fmt.Sprintf("key-%d", i), validBody)
		})
	}
	close(start)
	wg.Wait()
	ids := map[string]bool{}
	for i, w := range res {
		if i == n/2 {
			if w.Code != 422 {
				t.Fatalf("reused key: %d %s", w.Code, w.Body)
			}
			continue
		}
		if w.Code != 202 || w.Header().Get(HeaderIdempotentReplayed) != "" {
			t.Fatalf("request %d: %d replayed=%q %s", i, w.Code, w.Header().Get(HeaderIdempotentReplayed), w.Body)
		}
		ids[decode[JobResource](t, w).ID] = true
	}
	jobs, _, _ := e.store.ListJobs(context.Background(), pipeline.ListFilter{Tenant: "acme", Limit: 500})
	if len(ids) != n-1 || len(jobs) != n {
		t.Fatalf("%d distinct ids answered, %d jobs stored; want %d and %d", len(ids), len(jobs), n-1, n)
	}
}

func TestSubmitPrivateWebhookAllowedByConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.AllowPrivateWebhooks = true })
	for i, u := range []string{"http://127.0.0.1:9000/hook", "https://internal.example.com/x", "http://localhost/x"} {
		w := e.submit(t, tokAcme, "wh-"+string(rune('a'+i)), withField("webhook_url", u))
		if w.Code != 202 {
			t.Fatalf("%s: %d %s", u, w.Code, w.Body)
		}
	}
	// Form is still checked.
	if w := e.submit(t, tokAcme, "wh-z", withField("webhook_url", "file:///etc/passwd")); w.Code != 400 {
		t.Fatalf("file URL: %d", w.Code)
	}
}

// A malformed version prefix can never become valid, so it is refused at
// submission with the rule, and nothing is stored (no job, no dead letter
// nobody could clear). A well-formed prefix of a version not bound here is
// accepted and dead-lettered: binding the version makes it redrivable.
func TestSubmitMalformedVersionPrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct{ id, why string }{
		{"V2-x", "lowercase"},
		{"v02-x", "must not start with 0"},
		{"v0-x", "must not start with 0"},
		{"v2-", "nothing follows"},
		{"v99999999999999999999-x", "more than 4 digits"},
		{"v2_x", "must end with '-'"},
		{"v-x", "no version number"},
	} {
		w := e.submit(t, tokAcme, "key-"+tc.id, withField("instance_id", tc.id))
		if w.Code != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", tc.id, w.Code, w.Body)
		}
		p := problemOf(t, w)
		if p.Code != "invalid_instance_id" || !strings.Contains(p.Detail, tc.why) || !strings.Contains(p.Detail, InstanceIDRule) ||
			len(p.Errors) != 1 || p.Errors[0].Field != "instance_id" || !strings.Contains(p.Errors[0].Message, tc.why) {
			t.Fatalf("%s: %+v", tc.id, p)
		}
		if _, err := e.store.GetJob(context.Background(), tc.id); !errors.Is(err, pipeline.ErrNotFound) {
			t.Fatalf("%s was stored: %v", tc.id, err)
		}
	}
	// Other field errors are still listed next to the id's.
	w := e.submit(t, tokAcme, "key-both", `{"operation":"render_audio","instance_id":"V2-x","scenes":[]}`)
	if p := problemOf(t, w); p.Code != "invalid_instance_id" || !hasField(p, "instance_id") || !hasField(p, "operation") || !hasField(p, "scenes") {
		t.Fatalf("several errors: %+v", p)
	}
	if dls, _ := e.store.ListDeadLetters(context.Background(), true, 0, 0); len(dls) != 0 {
		t.Fatalf("dead letters for refused ids: %+v", dls)
	}
	// Well-formed but unbound: 202 and dead-lettered, as before.
	w = e.submit(t, tokAcme, "key-v3", withField("instance_id", "v3-x"))
	if w.Code != http.StatusAccepted {
		t.Fatalf("v3-x: %d %s", w.Code, w.Body)
	}
	if j := decode[JobResource](t, w); j.Status != pipeline.StatusDeadLettered || j.Error == nil || j.Error.Code != pipeline.ReasonUnboundVersion {
		t.Fatalf("v3-x: %+v", j)
	}
}

// Every 400 of a submission names the exact JSON path of what is wrong, and
// says what is wrong with it.
func TestSubmitFieldPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	scene := `{"image_prompt":"x","narration":"y","duration_ms":1000}`
	body := func(scenes ...string) string {
		return `{"operation":"render_video","scenes":[` + strings.Join(scenes, ",") + `]}`
	}
	cases := []struct {
		name, body string
		want       []pipeline.FieldError // field, and a fragment of the message
	}{
		{"unknown nested field", body(scene, scene, `{"image_prompt":"x","narration":"y","duration_ms":1000,"voice":"alto"}`),
			[]pipeline.FieldError{{Field: "scenes[2].voice", Message: "is not a known field (known: duration_ms, image_prompt, narration, video_prompt)"}}},
		{"unknown option", `{"operation":"render_video","scenes":[` + scene + `],"options":{"fps":25,"bitrate":9}}`,
			[]pipeline.FieldError{{Field: "options.bitrate", Message: "is not a known field"}}},
		{"field names are exact", `{"operation":"render_video","Title":"x","scenes":[` + scene + `]}`,
			[]pipeline.FieldError{{Field: "Title", Message: "is not a known field"}}},
		{"unknown top-level field", `{"operation":"render_video","scenes":[` + scene + `],"priority":1}`,
			[]pipeline.FieldError{{Field: "priority", Message: "is not a known field"}}},
		{"int out of range", body(scene, `{"image_prompt":"x","narration":"y","duration_ms":99999999999999999999}`),
			[]pipeline.FieldError{{Field: "scenes[1].duration_ms", Message: "is out of range: 99999999999999999999 is not from -9223372036854775808 to 9223372036854775807"}}},
		{"negative int out of range", `{"operation":"render_video","scenes":[` + scene + `],"options":{"fps":-99999999999999999999}}`,
			[]pipeline.FieldError{{Field: "options.fps", Message: "is out of range"}}},
		{"fraction for an int", body(`{"image_prompt":"x","narration":"y","duration_ms":1500.5}`),
			[]pipeline.FieldError{{Field: "scenes[0].duration_ms", Message: "must be a whole number written without a fraction or exponent, not 1500.5"}}},
		{"exponent for an int", body(`{"image_prompt":"x","narration":"y","duration_ms":1e309}`),
			[]pipeline.FieldError{{Field: "scenes[0].duration_ms", Message: "must be a whole number"}}},
		{"string for an int", body(`{"image_prompt":"x","narration":"y","duration_ms":"1000"}`),
			[]pipeline.FieldError{{Field: "scenes[0].duration_ms", Message: "must be a whole number, not a string"}}},
		{"number for a string", body(`{"image_prompt":7,"narration":"y","duration_ms":1000}`),
			[]pipeline.FieldError{{Field: "scenes[0].image_prompt", Message: "must be a string, not a number"}}},
		{"object for an array", `{"operation":"render_video","scenes":{"0":` + scene + `}}`,
			[]pipeline.FieldError{{Field: "scenes", Message: "must be an array, not an object"}}},
		{"array for an object", body(`[1]`),
			[]pipeline.FieldError{{Field: "scenes[0]", Message: "must be an object, not an array"}}},
		{"duplicate top-level key", `{"operation":"render_video","title":"a","title":"b","scenes":[` + scene + `]}`,
			[]pipeline.FieldError{{Field: "title", Message: "appears more than once"}}},
		{"duplicate nested key", body(`{"image_prompt":"x","narration":"y","duration_ms":1000,"duration_ms":2000}`),
			[]pipeline.FieldError{{Field: "scenes[0].duration_ms", Message: "appears more than once"}}},
		{"duplicate key inside an unknown field", `{"operation":"render_video","scenes":[` + scene + `],"x":{"a":1,"a":2}}`,
			[]pipeline.FieldError{{Field: "x", Message: "is not a known field"}, {Field: "x.a", Message: "appears more than once"}}},
		{"several at once", body(`{"image_prompt":"x","narration":"y","duration_ms":1000,"voice":1}`, `{"image_prompt":"x","narration":"y","duration_ms":1e3}`),
			[]pipeline.FieldError{{Field: "scenes[0].voice", Message: "is not a known field"}, {Field: "scenes[1].duration_ms", Message: "must be a whole number"}}},
		{"semantic error keeps its path", body(scene, `{"image_prompt":"x","narration":"y","duration_ms":10}`),
			[]pipeline.FieldError{{Field: "scenes[1].duration_ms", Message: ""}}},
		{"not an object", `[1,2]`, []pipeline.FieldError{{Field: "body", Message: "must be an object, not an array"}}},
		{"malformed", `{"operation":"render_video",}`, []pipeline.FieldError{{Field: "body", Message: "malformed JSON at byte"}}},
		{"truncated", `{"operation":"render_video","scenes":[`, []pipeline.FieldError{{Field: "body", Message: ""}}},
		{"too deep", `{"operation":"render_video","scenes":[` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `]}`,
			[]pipeline.FieldError{{Field: "body", Message: "nests more than"}}},
		{"trailing data", `{"operation":"render_video","scenes":[` + scene + `]} {}`, []pipeline.FieldError{{Field: "body", Message: "unexpected data after"}}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := e.submit(t, tokAcme, fmt.Sprintf("paths-%d", i), tc.body)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			p := problemOf(t, w)
			if p.Code != "validation_failed" || len(p.Errors) != len(tc.want) {
				t.Fatalf("got %+v, want errors %+v", p, tc.want)
			}
			for j, want := range tc.want {
				if got := p.Errors[j]; got.Field != want.Field || !strings.Contains(got.Message, want.Message) || got.Message == "" {
					t.Fatalf("error %d: got %+v, want %+v", j, got, want)
				}
			}
		})
	}
}

// A job the caller gave no instance id gets one whose body is a ULID minted
// at submission by the server's clock: the version prefix, then the
// submission's millisecond (the job's created_at) and 80 random bits, so
// one version's ids sort by submission time (and the job store appends
// them to its indexes instead of scattering them).
func TestSubmitMintsTimeOrderedIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	entropies := map[string]bool{}
	for i := range 3 {
		j := e.mustSubmit(t, tokAcme, fmt.Sprintf("k-ulid-%d", i))
		version, body, ok := strings.Cut(j.ID, "-")
		if !ok || version != j.Version {
			t.Fatalf("id %q does not start with its version %q", j.ID, j.Version)
		}
		u, err := ulid.ParseStrict(body)
		if err != nil || len(body) != ulid.EncodedSize {
			t.Fatalf("id body %q is not a ULID: %v", body, err)
		}
		if ms := int64(u.Time()); ms != e.clock.Now().UnixMilli() || ms != j.CreatedAt.UnixMilli() {
			t.Errorf("id %q carries ms %d; the clock says %d, created_at %d", j.ID, ms, e.clock.Now().UnixMilli(), j.CreatedAt.UnixMilli())
		}
		entropies[string(u.Entropy())] = true
		ids = append(ids, body)
		e.clock.Advance(time.Millisecond)
	}
	if !slices.IsSorted(ids) || len(entropies) != 3 || entropies[string(make([]byte, 10))] {
		t.Errorf("id bodies minted a millisecond apart do not sort in that order, or repeat their random part: %v", ids)
	}
}
