package fake

// Wire types of the imitated providers. They document the JSON format; a
// client adapter may copy them rather than import a test double.

// ImageRequest is the body of POST /v1/images.
type ImageRequest struct {
	Prompt string `json:"prompt"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Model  string `json:"model,omitempty"` // "" = "fake-image-1"
}

// SpeechRequest is the body of POST /v1/speech.
type SpeechRequest struct {
	Text       string `json:"text"`
	Voice      string `json:"voice,omitempty"`       // "" = "default"
	SampleRate int    `json:"sample_rate,omitempty"` // 0 = 48000
}

// VideoRequest is the body of POST /v1/videos.
type VideoRequest struct {
	Prompt     string `json:"prompt"`
	DurationMS int    `json:"duration_ms"`
	Width      int    `json:"width"`
	Height     int    `json:"height"`
	FPS        int    `json:"fps,omitempty"` // 0 = 25
}

// Video job statuses.
const (
	VideoQueued    = "queued"
	VideoRunning   = "running"
	VideoSucceeded = "succeeded"
	VideoFailed    = "failed"
)

// VideoJob is the body of 202 from POST /v1/videos and of GET /v1/videos/{id}.
type VideoJob struct {
	ID     string     `json:"id"`
	Status string     `json:"status"`
	Error  *ErrorBody `json:"error,omitempty"`
}

// ErrorBody is a machine-readable code and a human message.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ErrorResponse is the body of every 4xx/5xx answer.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// Error codes in ErrorResponse and VideoJob.Error.
const (
	CodeInvalidRequest      = "invalid_request"        // 400
	CodeNotFound            = "not_found"              // 404
	CodeNotReady            = "not_ready"              // 409: video content before the job succeeded
	CodeJobFailed           = "job_failed"             // 409: video content of a failed job
	CodeRequestTooLarge     = "request_too_large"      // 413
	CodeUnsupportedMedia    = "unsupported_media_type" // 415
	CodeIdempotencyMismatch = "idempotency_key_reused" // 422: same key, different body
	CodeRateLimited         = "rate_limited"           // 429
	CodeServerError         = "server_error"           // 500 (injected before/after commit)
	CodeVideoUnavailable    = "video_unavailable"      // 503: no ffmpeg, or server closing
	CodeGenerationFailed    = "generation_failed"      // video job: injected async_fail
	CodeRenderFailed        = "render_failed"          // video job: ffmpeg failed
)

// Headers.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderUnitID             = "X-Unit-Id"
	HeaderIdempotentReplayed = "Idempotent-Replayed" // "true" on an image replay
	// HeaderFault names the injected fault on a faulted answer. Diagnostic
	// only: a real provider gives no such hint, so adapters must not read it.
	HeaderFault = "X-Fake-Fault"
)
