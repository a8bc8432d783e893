// Package fake is a real HTTP server that imitates the three external AI
// providers edgepipe calls — image, speech and video generation — with the
// billing behaviour that makes retries dangerous (docs/design.md §6), a ledger that
// shows what was paid for, and seeded fault injection. edgepipe runs it
// in-process on a loopback port by default; `edgepipe fake-provider` runs it
// standalone.
//
// The three operations deliberately have the three contracts of docs/design.md §6:
//
//   - images are synchronous and honour Idempotency-Key for real (tested), so
//     a client may retry them with the same key;
//   - speech is synchronous and ignores Idempotency-Key: every committed
//     request is billed, even a retry with the same key (the provider of the
//     double-billed voice incident);
//   - videos are asynchronous jobs with an id, recovered by polling.
//
// # HTTP API
//
// Requests are JSON (Content-Type application/json or none; unknown fields
// are refused). Provider calls may carry Idempotency-Key and X-Unit-Id (the
// job/scene unit the caller bills against; it only feeds the ledger). Errors
// are {"error":{"code":"...","message":"..."}} with the codes in api.go.
//
//	POST /v1/images  {"prompt","width","height","model"?}
//	    200 image/png, width×height, the prompt drawn on a colour derived
//	    from its hash. Same Idempotency-Key + same body → the same bytes,
//	    header Idempotent-Replayed: true, not billed. Same key, different
//	    body → 422 idempotency_key_reused. Sides in [16,2048].
//	POST /v1/speech  {"text","voice"?,"sample_rate"? (48000)}
//	    200 audio/wav, 16-bit PCM mono, clamp(55 ms × runes(text), 300 ms,
//	    60 s) long (SpeechDuration), a soft tone per character. Billed on
//	    every committed request.
//	POST /v1/videos  {"prompt","duration_ms","width","height","fps"? (25)}
//	    202 {"id":"vid_…","status":"queued"}, Location /v1/videos/{id}.
//	    Billed when the job is created. 503 video_unavailable without ffmpeg.
//	    Even sides in [16,1920], duration_ms in [100,60000], fps in [1,60].
//	GET  /v1/videos/{id}          {"id","status","error"?}; status queued →
//	    running → succeeded (or failed with error.code generation_failed or
//	    render_failed) once Config.VideoProcessing passed on the server clock.
//	GET  /v1/videos/{id}/content  200 video/mp4 (H.264 yuv420p, no audio,
//	    VideoFrames(duration_ms,fps) frames); 409 not_ready / job_failed.
//	GET  /ledger        LedgerSnapshot as JSON.
//	POST /ledger/reset  204; zeroes the ledger (idempotency store kept).
//	GET  /faults, PUT /faults {"spec":"..."}  read / replace the fault spec.
//	GET  /healthz       {"status":"ok","video":bool,"video_error"?}.
//
// # Faults
//
// See FaultsHelp for the spec syntax. One generator, seeded by Config.Seed,
// decides every faultable request (the three POSTs), drawing a fixed number
// of values per request under a mutex. A sequential run with a fixed seed is
// therefore reproducible; concurrent requests take draws in arrival order,
// which is not. A call is billed when the provider commits it; after_commit
// (500) and drop (connection closed, no response) happen after that, so the
// client sees a failure for a call that was paid for.
//
// Beware: Go's http.Transport silently resends a POST that carries an
// Idempotency-Key header when a reused keep-alive connection is closed
// before the response (net/http Request.isReplayable). Against a provider
// that ignores the key (speech here) that resend is a second bill the caller
// never sees. TestGoTransportResendsDroppedPOSTWithIdempotencyKey pins this.
package fake
