package sqlite

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"edgepipe/pipeline"
	"edgepipe/webhook"
)

// The dispatcher's store (it lives in webhook, which this driver must not
// import outside tests).
var _ webhook.Store = (*Store)(nil)

var webhookT0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func openWebhookStore(t *testing.T) (*Store, *pipeline.ManualClock) {
	t.Helper()
	clock := pipeline.NewManualClock(webhookT0)
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "wh.db"), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clock
}

// canceledJobWithWebhook creates a job with a webhook URL and cancels it, so
// the settling transaction writes one outbox row.
func canceledJobWithWebhook(t *testing.T, s *Store, id string) {
	t.Helper()
	ctx := context.Background()
	_, created, err := s.CreateJob(ctx, pipeline.NewJob{
		ID: id, Tenant: "acme", Operation: "render_video", IdempotencyKey: "k-" + id, RequestFingerprint: "fp",
		Input: json.RawMessage(`{}`), Version: "v1", Queue: "render-v1", WebhookURL: "https://hooks.example.test/" + id,
	})
	if err != nil || !created {
		t.Fatalf("create %s: %v %v", id, created, err)
	}
	if _, err := s.RequestCancel(ctx, "acme", id); err != nil {
		t.Fatal(err)
	}
}

func claimOneWebhook(t *testing.T, s *Store) webhook.Delivery {
	t.Helper()
	ds, err := s.ClaimWebhooks(context.Background(), 10, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	return ds[0]
}

// The outbox statements reach rows through an index, like every other write
// path (see TestWriteQueryPlansUseIndexes).
func TestWebhookQueryPlansUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openWebhookStore(t)
	canceledJobWithWebhook(t, s, "v1-p")
	d := claimOneWebhook(t, s)
	if err := s.MarkWebhookDelivered(ctx, d); err != nil {
		t.Fatal(err)
	}
	var outbox []string
	for _, q := range s.stmts.seenQueries() {
		if strings.Contains(q, "webhook_outbox") {
			outbox = append(outbox, q)
		}
	}
	outbox = append(outbox,
		`SELECT `+webhookColumns+` FROM webhook_outbox WHERE job_id = ? ORDER BY id`,
		`SELECT count(*) FROM webhook_outbox WHERE status = ?`)
	if len(outbox) < 4 {
		t.Fatalf("only %d outbox statements seen", len(outbox))
	}
	conn, err := s.write.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range outbox {
		var plan []string
		err := conn.Raw(func(dc any) error {
			st, err := dc.(*sqlite3.SQLiteConn).Prepare("EXPLAIN QUERY PLAN " + q)
			if err != nil {
				return err
			}
			defer st.Close()
			rows, err := st.Query(make([]driver.Value, st.NumInput())) //nolint:staticcheck // raw driver API on purpose
			if err != nil {
				return err
			}
			defer rows.Close()
			vals := make([]driver.Value, 4)
			for {
				if err := rows.Next(vals); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if s, ok := vals[3].(string); ok {
					plan = append(plan, s)
				}
			}
		})
		if err != nil {
			t.Fatalf("explain %q: %v", q, err)
		}
		for _, line := range plan {
			if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "USING") {
				t.Errorf("full scan:\n%s\nplan: %s", strings.Join(strings.Fields(q), " "), strings.Join(plan, " | "))
			}
		}
	}
}

// clipWebhookText cuts a receiver's text to n bytes on a rune boundary and
// never panics, whatever bytes the receiver sent.
func TestClipWebhookText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 4, ""},
		{"abcd", 4, "abcd"},             // exactly n
		{"abcde", 4, "abcd"},            // one over
		{"abcé", 4, "abc"},              // 'é' straddles the cut
		{"abé", 4, "abé"},               // 'é' ends at the cut
		{"abéz", 4, "abé"},              // cut right after a rune
		{"\x80\x80\x80\x80\x80", 3, ""}, // no rune start at all
	}
	for _, tt := range tests {
		if got := clipWebhookText(tt.in, tt.n); got != tt.want {
			t.Errorf("clipWebhookText(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
