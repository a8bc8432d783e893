package render

import (
	"errors"
	"fmt"
)

// Sentinels. Input mistakes wrap pipeline.ErrInvalidInput instead.
var (
	// ErrBinaryNotFound: ffmpeg or ffprobe is not installed where configured.
	ErrBinaryNotFound = errors.New("render: binary not found")
	// ErrBinaryUnusable: the binary exists but does not run or lacks a
	// required encoder.
	ErrBinaryUnusable = errors.New("render: binary unusable")
	// ErrProcessFailed: ffmpeg or ffprobe exited non-zero (see *ProcessError).
	ErrProcessFailed = errors.New("render: process failed")
	// ErrClipMismatch: clips differ in a codec parameter, so they cannot be
	// joined by stream copy (see *ClipMismatchError).
	ErrClipMismatch = errors.New("render: clips cannot be joined by stream copy")
	// ErrProbeOutput: ffprobe's output could not be understood.
	ErrProbeOutput = errors.New("render: unreadable ffprobe output")
	// ErrIntegrity: the store recorded a different size or digest than the
	// bytes Join produced.
	ErrIntegrity = errors.New("render: stored object does not match the render")
)

// BinaryError says which binary is missing or broken and how to fix it. Its
// message is meant for the operator reading the startup log.
type BinaryError struct {
	Tool    string // "ffmpeg" or "ffprobe"
	Path    string // as configured
	Env     string // the variable that overrides Path
	Problem string // what is wrong, e.g. "not found" or "lacks encoder libx264"
	Err     error  // ErrBinaryNotFound or ErrBinaryUnusable, or a cause wrapping one
}

func (e *BinaryError) Error() string {
	return fmt.Sprintf("%s %s at %q: install the Debian package \"ffmpeg\" (apt-get install ffmpeg), which provides ffmpeg and ffprobe, or set %s to a working binary",
		e.Tool, e.Problem, e.Path, e.Env)
}

func (e *BinaryError) Unwrap() error { return e.Err }

// ProcessError is a non-zero exit of ffmpeg or ffprobe. Summary holds the
// last meaningful stderr lines, bounded in size, with the file paths this
// package passed replaced by placeholders; it is safe to log, but the API
// should show a fixed message rather than Summary.
type ProcessError struct {
	Tool     string // "ffmpeg" or "ffprobe"
	Op       string // "scene", "normalize", "join", "probe"
	ExitCode int    // -1 when killed by a signal
	Summary  string
}

// FFmpegError is the name the design uses for a failed ffmpeg run.
type FFmpegError = ProcessError

func (e *ProcessError) Error() string {
	if e.Summary == "" {
		return fmt.Sprintf("render: %s %s failed (exit %d)", e.Tool, e.Op, e.ExitCode)
	}
	return fmt.Sprintf("render: %s %s failed (exit %d): %s", e.Tool, e.Op, e.ExitCode, e.Summary)
}

func (e *ProcessError) Unwrap() error { return ErrProcessFailed }

// ClipMismatchError names the first clip that differs from clip 0.
type ClipMismatchError struct {
	Index int    // position in the clip list
	Field string // e.g. "video width", "stream layout"
	Want  string // clip 0's value (or the configured value)
	Got   string
}

func (e *ClipMismatchError) Error() string {
	return fmt.Sprintf("render: clip %d: %s is %s, want %s", e.Index, e.Field, e.Got, e.Want)
}

func (e *ClipMismatchError) Unwrap() error { return ErrClipMismatch }
