package workersaitest_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image/jpeg"
	"io"
	"net/http"
	"strings"
	"testing"

	"edgepipe/provider/workersai/workersaitest"
)

const (
	account = "023e105f4ecef8ad9ca31a8372d0c353"
	token   = "cf-emulator-token-01"
)

func post(t *testing.T, url, auth, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// TestAnswersErrorsAndDrops: the emulator answers flux with a decodable
// JPEG in the envelope, refuses a wrong token and an unknown model with the
// documented codes, and records a dropped call, which gets no answer.
func TestAnswersErrorsAndDrops(t *testing.T) {
	t.Parallel()
	s := workersaitest.New(account, token)
	t.Cleanup(s.Close)
	s.Drop = func(c workersaitest.Call) bool { return c.Prompt == "drop me" }
	run := s.BaseURL() + "/accounts/" + account + "/ai/run/"
	for _, tc := range []struct {
		name, model, auth, prompt string
		status                    int
		code                      float64
	}{
		{"image", workersaitest.ModelImage, "Bearer " + token, "a fox", 200, 0},
		{"bad token", workersaitest.ModelImage, "Bearer nope", "a fox", 401, 10000},
		{"unknown model", "@cf/x/y", "Bearer " + token, "a fox", 400, 5007},
		{"dropped", workersaitest.ModelSpeech, "Bearer " + token, "drop me", 0, 0},
	} {
		resp, err := post(t, run+tc.model, tc.auth, `{"prompt":"`+tc.prompt+`"}`)
		if tc.status == 0 {
			if err == nil {
				resp.Body.Close()
				t.Errorf("%s: answered %d, want the connection dropped", tc.name, resp.StatusCode)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var env struct {
			Result  map[string]string `json:"result"`
			Success bool              `json:"success"`
			Errors  []struct {
				Code float64 `json:"code"`
			} `json:"errors"`
		}
		if resp.StatusCode != tc.status || json.Unmarshal(b, &env) != nil {
			t.Fatalf("%s: %d %s", tc.name, resp.StatusCode, b)
		}
		if tc.code != 0 && (env.Success || len(env.Errors) != 1 || env.Errors[0].Code != tc.code) {
			t.Errorf("%s: %s, want error code %v", tc.name, b, tc.code)
		}
		if tc.status == 200 {
			raw, _ := base64.StdEncoding.DecodeString(env.Result["image"])
			if _, err := jpeg.Decode(bytes.NewReader(raw)); err != nil || !env.Success {
				t.Errorf("%s: result.image is not a JPEG: %v", tc.name, err)
			}
		}
	}
	calls := s.Calls()
	if len(calls) != 4 || !calls[3].Dropped || calls[0].Dropped || s.Received(workersaitest.ModelSpeech, "drop me") != 1 {
		t.Errorf("ledger %+v", calls)
	}
}
