package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// The smallest lease and limit ClaimWebhooks accepts are 1 ms and 1.
func TestWebhookClaimSmallestArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openWebhookStore(t)
	canceledJobWithWebhook(t, s, "v1-wh1")
	if _, err := s.ClaimWebhooks(ctx, 1, time.Millisecond-time.Nanosecond); !errors.Is(err, pipeline.ErrInvalidInput) {
		t.Fatalf("ClaimWebhooks(1, 999.999µs) = %v, want ErrInvalidInput", err)
	}
	ds, err := s.ClaimWebhooks(ctx, 1, time.Millisecond)
	if err != nil || len(ds) != 1 || ds[0].JobID != "v1-wh1" {
		t.Fatalf("ClaimWebhooks(1, 1ms) = %+v, %v; want the one delivery", ds, err)
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
