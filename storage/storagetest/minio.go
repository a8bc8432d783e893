package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// MinIOServer is a MinIO server started for one test.
type MinIOServer struct {
	// Endpoint is the server's base URL, e.g. http://127.0.0.1:41234.
	Endpoint  string
	AccessKey string
	SecretKey string
}

// MinIOBinary finds the minio server binary: $EDGEPIPE_MINIO_BIN, else
// "minio" on PATH, else edgepipe-bin/minio under the user cache directory
// (where the project's setup script puts it) or /root/.cache. It returns ""
// when there is none.
func MinIOBinary() string {
	if p := os.Getenv("EDGEPIPE_MINIO_BIN"); p != "" {
		return p // explicit: a wrong path should fail loudly, not fall back
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	var candidates []string
	if dir, err := os.UserCacheDir(); err == nil {
		candidates = append(candidates, filepath.Join(dir, "edgepipe-bin", "minio"))
	}
	candidates = append(candidates, "/root/.cache/edgepipe-bin/minio")
	for _, p := range candidates {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// StartMinIO starts a throwaway MinIO server on a free loopback port with
// its data in a t.TempDir(), waits until it is live, and stops it when the
// test ends. Without a binary (see MinIOBinary) the test is skipped, except
// when the CI environment variable is set: a suite skipped in CI would pass
// without having run, so there it fails.
func StartMinIO(t testing.TB) MinIOServer {
	t.Helper()
	bin := MinIOBinary()
	if bin == "" {
		msg := "no minio binary: set EDGEPIPE_MINIO_BIN, put minio on PATH, or install it to ~/.cache/edgepipe-bin/minio"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI is set, so the S3 suite may not be skipped)")
		}
		t.Skip("SKIPPING S3 suite: " + msg)
	}
	var lastErr error
	// A port picked free can be taken before minio binds it; try again then.
	for range 3 {
		srv, err := startMinIO(t, bin)
		if err == nil {
			return srv
		}
		lastErr = err
	}
	t.Fatalf("start minio (%s): %v", bin, lastErr)
	return MinIOServer{}
}

func startMinIO(t testing.TB, bin string) (MinIOServer, error) {
	port, err := freePort()
	if err != nil {
		return MinIOServer{}, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv := MinIOServer{
		Endpoint:  "http://" + addr,
		AccessKey: "edgepipe-" + randHex(4),
		SecretKey: randHex(16),
	}
	home := t.TempDir()
	data := t.TempDir()

	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, data) //nolint:noctx // outlives this call: stop kills it at the end of the tests
	cmd.Env = append(os.Environ(),
		"HOME="+home, // minio refuses to start without one
		"MINIO_ROOT_USER="+srv.AccessKey,
		"MINIO_ROOT_PASSWORD="+srv.SecretKey,
		"MINIO_BROWSER=off", // no console, so no second port to pick
		"MINIO_UPDATE=off",
	)
	out := &tailBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return MinIOServer{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited //nolint:errcheck // killed on purpose: its exit status says nothing
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := waitLive(ctx, srv.Endpoint, exited); err != nil {
		stop()
		return MinIOServer{}, fmt.Errorf("%w; output:\n%s", err, out.String())
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("minio output (tail):\n%s", out.String())
		}
	})
	return srv, nil
}

func waitLive(ctx context.Context, endpoint string, exited <-chan error) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/minio/health/live", nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("minio exited before it was live: %w", err)
		case <-ctx.Done():
			return errors.New("minio not live after 60s")
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tailBuffer keeps the last max bytes written, so a chatty server cannot
// grow test memory without bound.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = append(w.b[:0], w.b[len(w.b)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
