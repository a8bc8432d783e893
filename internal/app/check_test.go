package app

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		workers int
		want    string // "" → valid
	}{
		{"defaults", nil, 2, ""},
		{"s3 with a bucket", map[string]string{"EDGEPIPE_STORE": "s3", "EDGEPIPE_S3_BUCKET": "media"}, 2, ""},
		{"failpoints", map[string]string{"EDGEPIPE_FAILPOINTS": "x"}, 2, "EDGEPIPE_FAILPOINTS"},
		{"v3 bound", map[string]string{"EDGEPIPE_BINDINGS": "v1,v3"}, 2, "no implementation of v3 (it has v1, v2)"},
		{"v3 bound, no workers", map[string]string{"EDGEPIPE_BINDINGS": "v1,v3"}, 0, ""},
		{"fake faults", map[string]string{"EDGEPIPE_FAKE_FAULTS": "what=ever"}, 1, "EDGEPIPE_FAKE_FAULTS"},
		{"fake faults ignored with a provider URL", map[string]string{"EDGEPIPE_FAKE_FAULTS": "what=ever", "EDGEPIPE_PROVIDER_URL": "http://p"}, 1, ""},
		{"provider timeout", map[string]string{"EDGEPIPE_PROVIDER_URL": "http://p", "EDGEPIPE_PROVIDER_TIMEOUT": "-1s"}, 1, "EDGEPIPE_PROVIDER_TIMEOUT"},
		{"s3 bucket missing", map[string]string{"EDGEPIPE_STORE": "s3"}, 0, "EDGEPIPE_S3_BUCKET"},
		{"s3 bool", map[string]string{"EDGEPIPE_STORE": "s3", "EDGEPIPE_S3_BUCKET": "media", "EDGEPIPE_S3_PATH_STYLE": "maybe"}, 0, "EDGEPIPE_S3_PATH_STYLE"},
		{"s3 concurrency", map[string]string{"EDGEPIPE_STORE": "s3", "EDGEPIPE_S3_BUCKET": "media", "EDGEPIPE_S3_CONCURRENCY": "99"}, 0, "EDGEPIPE_S3_CONCURRENCY"},
		{"s3 keys in pairs", map[string]string{"EDGEPIPE_STORE": "s3", "EDGEPIPE_S3_BUCKET": "media", "EDGEPIPE_S3_ACCESS_KEY": "a"}, 0, "EDGEPIPE_S3_SECRET_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var environ []string
			for k, v := range tc.env {
				environ = append(environ, k+"="+v)
			}
			cfg, err := FromEnv(func(k string) string { return tc.env[k] }, environ)
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			err = cfg.Check(tc.workers)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Check = %v, want %q", err, tc.want)
			}
		})
	}
}

// Versions are listed in version order, not string order.
func TestInVersionOrder(t *testing.T) {
	t.Parallel()
	if got := strings.Join(inVersionOrder([]string{"v10", "v2", "v1", "v3"}), ","); got != "v1,v2,v3,v10" {
		t.Errorf("inVersionOrder = %s, want v1,v2,v3,v10", got)
	}
	if got := len(knownVersions()); got < 2 {
		t.Errorf("knownVersions has %d versions, want every workflow", got)
	}
}
