package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
