package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestResultAndSaveResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t)
	c := s.client(t, tokAcme)
	content := []byte("the rendered mp4's bytes")
	j := mustSubmit(t, c, "k", board(1))
	s.runJob(t, content)
	j, err := c.Get(ctx, j.ID)
	if err != nil || j.Result == nil {
		t.Fatalf("job %+v %v", j, err)
	}
	sum := sha256.Sum256(content)
	if j.Result.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("result %+v", j.Result)
	}

	r, err := c.Result(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != string(content) {
		t.Fatalf("result %q %v", got, err)
	}

	dir := t.TempDir()
	dest := filepath.Join(dir, "out.mp4")
	if err := c.SaveResult(ctx, j.ID, dest, j.Result.SHA256); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dest); err != nil || string(b) != string(content) {
		t.Fatalf("saved %q %v", b, err)
	}
	// A hash that does not match keeps nothing, not even the old file's
	// replacement half-written.
	other := filepath.Join(dir, "other.mp4")
	err = c.SaveResult(ctx, j.ID, other, strings.Repeat("0", 64))
	var me *SHA256MismatchError
	if !errors.As(err, &me) || me.Got != j.Result.SHA256 {
		t.Fatalf("mismatch: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
	if _, err := c.Result(ctx, "v1-missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing job: %v", err)
	}
}

// TestResultRedirectDropsToken: the result redirects to a presigned URL
// elsewhere, which must not see the API token.
func TestResultRedirectDropsToken(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var auth []string
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		io.WriteString(w, "presigned bytes")
	}))
	defer store.Close()
	s := newServer(t)
	s.setWrap(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		http.Redirect(w, r, store.URL+"/bucket/key.mp4?X-Amz-Signature=abc", http.StatusFound)
	})
	c := s.client(t, tokAcme)
	r, err := c.Result(context.Background(), "v1-x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	mu.Lock()
	defer mu.Unlock()
	if string(b) != "presigned bytes" || len(auth) != 1 || auth[0] != "" {
		t.Errorf("got %q; the object store saw Authorization %q", b, auth)
	}
}
