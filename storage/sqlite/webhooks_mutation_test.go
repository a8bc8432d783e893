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
