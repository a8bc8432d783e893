package app

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	envName   = regexp.MustCompile(`EDGEPIPE_[A-Z0-9_]*[A-Z0-9]`)
	envLit    = regexp.MustCompile(`"(EDGEPIPE_[A-Z0-9_]*[A-Z0-9])"`)
	shorthand = regexp.MustCompile("`(_[A-Z0-9_]*[A-Z0-9])`")
)

// readmeSettings is every EDGEPIPE_* name README mentions; a table row's
// shorthand ("`EDGEPIPE_RETRY_BASE`, `_CAP`") is expanded with the first
// name's prefix.
func readmeSettings(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		names := envName.FindAllString(line, -1)
		for _, n := range names {
			out[n] = true
		}
		if len(names) == 0 || !strings.HasPrefix(line, "|") {
			continue
		}
		first := names[0]
		for _, m := range shorthand.FindAllStringSubmatch(line, -1) {
			// EDGEPIPE_S3_ENDPOINT + _BUCKET → EDGEPIPE_S3_BUCKET: the
			// shorthand replaces the first name's last segment(s).
			for cut := strings.LastIndex(first, "_"); cut > len("EDGEPIPE"); cut = strings.LastIndex(first[:cut], "_") {
				out[first[:cut]+m[1]] = true
			}
		}
	}
	return out
}

// codeSettings is every EDGEPIPE_* string literal in the repository's
// non-test Go code: the settings the code reads.
func codeSettings(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range envLit.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every setting the parsers read (Known is derived from them) and every
// EDGEPIPE_* name the rest of the code names is listed in README, and README
// lists no setting the code does not know.
func TestREADMEListsEverySetting(t *testing.T) {
	t.Parallel()
	readme, code := readmeSettings(t), codeSettings(t)
	for _, n := range readNames() {
		if !readme[n] && !strings.Contains(mustRead(t, "../../README.md"), "`"+n+"`") {
			t.Errorf("the code reads %s, which README does not list", n)
		}
	}
	for n := range code {
		if !slices.Contains(Known, n) {
			t.Errorf("the code names %s, which no parser reads and Known lacks (start-up would refuse it)", n)
		}
	}
	for _, n := range Known {
		if !readme[n] {
			t.Errorf("README does not list %s", n)
		}
	}
	for n := range readme {
		if strings.HasSuffix(n, "_") || slices.Contains(Known, n) {
			continue
		}
		if !code[n] {
			// A shorthand expansion that names nothing is fine; a full
			// name in README that the code does not know is not.
			if strings.Contains(mustRead(t, "../../README.md"), "`"+n+"`") {
				t.Errorf("README lists %s, which the code does not know", n)
			}
		}
	}
}

// Known is derived by running the parsers on an empty environment: that
// must succeed, or a parser would stop before reading its later names and
// start-up would refuse them as unknown.
func TestKnownIsEverythingRead(t *testing.T) {
	t.Parallel()
	empty := func(string) string { return "" }
	if _, err := parse(empty); err != nil {
		t.Fatalf("parse(empty) = %v", err)
	}
	if _, err := ProviderSettings(empty); err != nil {
		t.Fatalf("ProviderSettings(empty) = %v", err)
	}
	if _, err := FakeSettings(empty); err != nil {
		t.Fatalf("FakeSettings(empty) = %v", err)
	}
	if _, err := s3Settings(empty, nil); err != nil {
		t.Fatalf("s3Settings(empty) = %v", err)
	}
	for _, n := range []string{"EDGEPIPE_ADDR", "EDGEPIPE_S3_SIGN_PAYLOAD", "EDGEPIPE_FAKE_SEED", "EDGEPIPE_PROVIDER_VIDEO",
		"EDGEPIPE_REPLICATE_MODEL_VIDEO", "EDGEPIPE_CF_MODEL_SPEECH", "EDGEPIPE_RENDER_PRESET", "EDGEPIPE_URL", "EDGEPIPE_TEST_DEBUG"} {
		if !slices.Contains(Known, n) {
			t.Errorf("Known lacks %s", n)
		}
	}
	if !slices.Contains(readNames(), "WORKFLOW_V2_ROLLOUT_PERCENT") || slices.Contains(Known, "WORKFLOW_V2_ROLLOUT_PERCENT") {
		t.Errorf("WORKFLOW_V2_ROLLOUT_PERCENT is read but is not an EDGEPIPE_* name: read %v", readNames())
	}
	// Every setting is read wherever the parts read it: a value set for
	// each one reaches FromEnv's unknown-name check without an error.
	var environ []string
	for _, n := range Known {
		environ = append(environ, n+"=")
	}
	if _, err := FromEnv(empty, environ); err != nil {
		t.Errorf("FromEnv refuses a known name: %v", err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
