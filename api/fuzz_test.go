package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"edgepipe/pipeline"
	"edgepipe/routing"
)

// FuzzSubmit throws random bodies and headers at POST /v1/jobs through the
// whole echo stack: whatever arrives, the answer is never a 5xx (a panic
// would be one, via the recover middleware), every error is a problem
// document, and a 202 is a job its owner can read back.
//
//	go test ./api -run '^$' -fuzz FuzzSubmit -fuzztime 60s
func FuzzSubmit(f *testing.F) {
	seeds := []struct {
		body, key, ct string
		tok           uint8
		auth          string
	}{
		{validBody, "seed-1", "application/json", 0, ""},
		{withField("instance_id", "v2-abc"), "seed-2", "application/json; charset=utf-8", 0, ""},
		{withField("instance_id", "V2-x"), "seed-3", "application/json", 1, ""},
		{withField("webhook_url", "https://hooks.example.com/h"), "seed-4", "application/json", 0, ""},
		{withField("webhook_url", "http://[fe80::1%25eth0]/"), "seed-5", "application/json", 0, ""},
		{`{"operation":"render_video","scenes":[{"image_prompt":"\u0000","narration":"","duration_ms":1e309}]}`, "k", "application/json", 0, ""},
		{`{"scenes":null,"options":{"fps":-1,"resolution":"0x0"}}`, "k", "application/json", 0, ""},
		{`[1,2,3]`, "k", "application/json", 0, ""},
		{withField("instance_id", "v99999999999999999999-x"), "seed-6", "application/json", 0, ""},
		{withField("instance_id", "v2-"), "seed-7", "application/json", 0, ""},
		{`{"operation":"render_video","title":"a","title":"b","scenes":[{"image_prompt":"x","narration":"y","duration_ms":1000,"voice":1}]}`, "seed-8", "application/json", 0, ""},
		{`{"operation":"render_video","scenes":[{"image_prompt":"x","narration":"y","duration_ms":1e400}],"options":{"fps":99999999999999999999}}`, "seed-9", "application/json", 0, ""},
		{`{"operation":"render_video","title":"` + strings.Repeat("é", 300) + `"}`, "k", "application/json", 0, ""},
		{`{"scenes":[` + strings.Repeat(`{"image_prompt":"x","narration":"y","duration_ms":600},`, 60) + `{}]}`, "k", "application/json", 0, ""},
		{validBody, "", "application/json", 0, ""},
		{validBody, "k", "text/plain", 0, ""},
		{validBody, "k", "application/json", 3, "Bearer \x00"},
		{validBody, "k", "application/json;;;charset", 0, ""},
		{"\xff\xfe", "\x7f", "application/json", 2, ""},
	}
	for _, s := range seeds {
		f.Add(s.body, s.key, s.ct, s.tok, s.auth)
	}
	e := newEnv(f, func(c *Config) { c.MaxBodyBytes = 64 << 10 })
	f.Fuzz(func(t *testing.T, body, key, ct string, tok uint8, auth string) {
		hr := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(body))
		switch tok % 4 {
		case 0:
			hr.Header.Set("Authorization", "Bearer "+tokAcme)
		case 1:
			hr.Header.Set("Authorization", "Bearer "+tokGlobex)
		case 2:
			hr.Header.Set("Authorization", "Bearer "+tokAdmin)
		default:
			hr.Header["Authorization"] = []string{auth}
		}
		hr.Header["Content-Type"] = []string{ct}
		if key != "" {
			hr.Header["Idempotency-Key"] = []string{key}
		}
		w := httptest.NewRecorder()
		// No checkContract here: kin-openapi's lazily built caches make
		// its coverage differ between runs of one input, which keeps the
		// fuzzer minimizing instead of fuzzing. The API tests hold the
		// answers to openapi.yaml.
		e.h.ServeHTTP(w, hr)
		if w.Code >= 500 {
			t.Fatalf("%d for body %q key %q ct %q: %s", w.Code, body, key, ct, w.Body)
		}
		switch w.Code {
		case http.StatusAccepted:
			j := decode[JobResource](t, w)
			tokFor := map[uint8]string{0: tokAcme, 1: tokGlobex}[tok%4]
			if g := e.get(t, tokFor, "/v1/jobs/"+j.ID); g.Code != 200 || decode[JobResource](t, g).ID != j.ID {
				t.Fatalf("accepted job %s cannot be read back: %d", j.ID, g.Code)
			}
		case 400, 401, 409, 413, 415, 422:
			problemOf(t, w)
		default:
			t.Fatalf("unexpected status %d: %s", w.Code, w.Body)
		}
	})
}

// FuzzDecodeStrictJSON holds the strict decoder of request bodies to
// encoding/json: it never panics, it accepts nothing encoding/json (with
// DisallowUnknownFields) refuses, what it accepts decodes to the same value,
// and every problem it reports names a field.
//
//	go test ./api -run '^$' -fuzz FuzzDecodeStrictJSON -fuzztime 60s
func FuzzDecodeStrictJSON(f *testing.F) {
	for _, s := range []string{
		validBody, `{}`, `[]`, `null`, `{"title":"a","title":"b"}`, `{"scenes":[{"voice":1}]}`,
		`{"options":{"fps":1e3}}`, `{"options":{"fps":99999999999999999999}}`, `{"scenes":[[[[]]]]}`,
		`{"Title":"x"}`, `{"title":"\ud800"}`, `{"scenes":null,"options":null}`, `{"operation":"render_video"} x`,
		`{"scenes":[{"duration_ms":-0}]}`, `{"scenes":[{"duration_ms":1.0}]}`, `{"instance_id":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var strict submitRequest
		err := decodeStrictJSON(body, &strict)
		var std submitRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		stdErr := dec.Decode(&std)
		if stdErr == nil {
			if _, tokErr := dec.Token(); !errors.Is(tokErr, io.EOF) {
				stdErr = errors.New("trailing data")
			}
		}
		if err != nil {
			var ve *pipeline.ValidationError
			if !errors.As(err, &ve) || len(ve.Fields) == 0 {
				t.Fatalf("%q: %v is not a field error", body, err)
			}
			for _, fe := range ve.Fields {
				if fe.Field == "" || fe.Message == "" {
					t.Fatalf("%q: empty field error %+v", body, fe)
				}
			}
			return
		}
		if stdErr != nil {
			t.Fatalf("%q: strict decoding accepted what encoding/json refuses: %v", body, stdErr)
		}
		if !reflect.DeepEqual(strict, std) {
			t.Fatalf("%q: strict %+v, encoding/json %+v", body, strict, std)
		}
	})
}

// FuzzSubmitInstanceID submits a valid storyboard under arbitrary
// instance ids: an id the routing grammar accepts is a 202 job with exactly
// that id and its prefix's version (dead-lettered when unbound); anything
// else is a 400 invalid_instance_id naming the field, and nothing is stored.
//
//	go test ./api -run '^$' -fuzz FuzzSubmitInstanceID -fuzztime 60s
func FuzzSubmitInstanceID(f *testing.F) {
	for _, id := range []string{"v1-a", "v2-b", "v3-x", "plain", "V2-x", "v02-x", "v0-x", "v2-", "v99999999999999999999-x",
		"v2_x", "v-x", "-x", "_", "v9999-z", "v10000-z", "a b", "é", strings.Repeat("a", 64), strings.Repeat("a", 65), ""} {
		f.Add(id)
	}
	e := newEnv(f)
	n := 0
	f.Fuzz(func(t *testing.T, id string) {
		n++
		b, _ := json.Marshal(id)
		body := strings.Replace(validBody, `{"operation":"render_video",`, `{"operation":"render_video","instance_id":`+string(b)+`,`, 1)
		hr := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(body))
		for k, v := range submitHeaders(tokAcme, "fuzz-id-"+strconv.Itoa(n)) {
			hr.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, hr) // no checkContract: see FuzzSubmit
		parsed, perr := routing.ParseInstanceID(id)
		switch {
		case perr == nil && w.Code == http.StatusAccepted:
			j := decode[JobResource](t, w)
			if j.ID != id || j.Version != parsed.VersionOrDefault() {
				t.Fatalf("%q: job %s version %s, want version %s", id, j.ID, j.Version, parsed.VersionOrDefault())
			}
		case perr == nil && w.Code == http.StatusConflict:
			// Taken by an earlier input of this run (the same id twice).
			if p := problemOf(t, w); p.Code != "instance_id_taken" {
				t.Fatalf("%q: %+v", id, p)
			}
		case perr != nil && w.Code == http.StatusBadRequest:
			p := problemOf(t, w)
			if p.Code != "invalid_instance_id" || !hasField(p, "instance_id") || !strings.Contains(p.Detail, InstanceIDRule) {
				t.Fatalf("%q: %+v", id, p)
			}
			if _, err := e.store.GetJob(context.Background(), id); err == nil {
				t.Fatalf("%q refused but stored", id)
			}
		default:
			t.Fatalf("%q (grammar: %v): %d %s", id, perr, w.Code, w.Body)
		}
	})
}

// FuzzInstanceIDPattern holds openapi.yaml's instance_id pattern to the
// grammar routing enforces, so a client validating with the document
// refuses exactly the ids the server refuses.
//
//	go test ./api -run '^$' -fuzz FuzzInstanceIDPattern -fuzztime 60s
func FuzzInstanceIDPattern(f *testing.F) {
	for _, id := range []string{"v1-a", "v2-b", "v3-x", "v9999-z", "v10000-z", "plain", "V2-x", "v02-x", "v0-x", "v2-",
		"v99999999999999999999-x", "v2_x", "v-x", "V-x", "v", "V", "v2", "v2a-b", "vx", "Vx-1", "-x", "_", "a b", "é", "v1--x", "v1-_"} {
		f.Add(id)
	}
	doc, _, err := loadContract()
	if err != nil {
		f.Fatal(err)
	}
	schema := doc.Components.Schemas["SubmitRequest"].Value.Properties["instance_id"].Value
	pattern := regexp.MustCompile(schema.Pattern)
	f.Fuzz(func(t *testing.T, id string) {
		_, perr := routing.ParseInstanceID(id)
		documented := utf8.ValidString(id) && len(id) <= int(*schema.MaxLength) && pattern.MatchString(id)
		if documented != (perr == nil) {
			t.Fatalf("%q: openapi.yaml says valid=%v, routing says %v", id, documented, perr)
		}
	})
}
