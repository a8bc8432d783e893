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

// Every setting the code reads is known (start-up refuses unknown ones)
// and listed in README, and README lists no setting the code does not
// know.
func TestREADMEListsEverySetting(t *testing.T) {
	t.Parallel()
	readme, code := readmeSettings(t), codeSettings(t)
	for n := range code {
		if !slices.Contains(Known, n) {
			t.Errorf("the code reads %s, which Known lacks (start-up would refuse it)", n)
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

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
