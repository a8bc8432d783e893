package provider

import (
	"context"
	"net/http"
	"testing"

	"edgepipe/pipeline"
)

// TestOnlyTheVerifiedOperationIsReplayable pins the request shape net/http's
// resend decision reads (Request.isReplayable, persistConn.shouldRetryRequest,
// rewindBody): a billable call that is not idempotent_verified has no
// GetBody and no idempotency header, so the transport can neither consider
// it replayable nor rewind it. It also goes through the client without
// keep-alive connections.
func TestOnlyTheVerifiedOperationIsReplayable(t *testing.T) {
	t.Parallel()
	h, err := New(Config{BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		op         string
		call       *call
		replayable bool
	}{
		{pipeline.OpImage, &call{op: pipeline.OpImage, method: http.MethodPost, path: pathImages, unit: "u", key: "k", replayable: contractOf(pipeline.OpImage) == pipeline.ContractIdempotentVerified}, true},
		{pipeline.OpSpeech, &call{op: pipeline.OpSpeech, method: http.MethodPost, path: pathSpeech, unit: "u", key: "k"}, false},
		{pipeline.OpVideoSubmit, &call{op: pipeline.OpVideoSubmit, method: http.MethodPost, path: pathVideos, unit: "u", key: "k"}, false},
	}
	for _, tt := range tests {
		if err := tt.call.setJSON(map[string]string{"x": "y"}); err != nil {
			t.Fatal(err)
		}
		req, err := h.newRequest(context.Background(), tt.call)
		if err != nil {
			t.Fatal(err)
		}
		hasKey := req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
		if (req.GetBody != nil) != tt.replayable || hasKey != tt.replayable {
			t.Errorf("%s: GetBody set %t, key header %t; want both %t", tt.op, req.GetBody != nil, hasKey, tt.replayable)
		}
		if req.ContentLength <= 0 {
			t.Errorf("%s: ContentLength %d, want the body's length (no chunking)", tt.op, req.ContentLength)
		}
		if tt.replayable {
			continue
		}
		tr, ok := h.billClient.Transport.(*http.Transport)
		if !ok || !tr.DisableKeepAlives {
			t.Errorf("%s: billable non-replayable calls must use a transport without keep-alive", tt.op)
		}
	}
}
