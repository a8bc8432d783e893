package replicate

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// FuzzPredictionParsing feeds untrusted prediction JSON and model strings to
// the parsers: no panic, and a model that parses builds a URL path of
// plain segments.
func FuzzPredictionParsing(f *testing.F) {
	f.Add([]byte(`{"id":"gm3qorzdhgbfurvjtvhg6dckhu","status":"succeeded","output":["https://replicate.delivery/x/out-0.png"]}`), "minimax/video-01")
	f.Add([]byte(`{"output":"https://replicate.delivery/y.mp4","data_removed":true}`), "owner/name:5c7d5dc6")
	f.Add([]byte(`{"title":"Unauthenticated","detail":"x","status":401}`), "../x")
	f.Fuzz(func(t *testing.T, b []byte, model string) {
		_, _ = parseError(b)
		var p prediction
		if json.Unmarshal(b, &p) == nil {
			_, _ = outputURL(p)
		}
		owner, name, version, ok := splitModel(model)
		if !ok {
			return
		}
		for _, s := range []string{owner, name, version} {
			if strings.ContainsAny(s, "/?#%:") || s == ".." || s == "." {
				t.Fatalf("segment %q of %q is not plain", s, model)
			}
		}
		if _, err := url.Parse("https://api.replicate.com/v1/models/" + owner + "/" + name + "/predictions"); err != nil {
			t.Fatal(err)
		}
	})
}
