package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"edgepipe/pipeline"
)

// result is GET /v1/jobs/{id}/result: a redirect to a presigned URL when the
// object store makes them (S3), otherwise the MP4 streamed from the store
// with Range, If-Range and conditional requests handled by
// http.ServeContent. Only a succeeded job has a result (409 before).
func (s *Server) result(c echo.Context) error {
	j, err := s.loadJob(c)
	if err != nil {
		return err
	}
	if j.Status != pipeline.StatusSucceeded || j.ResultKey == "" {
		return problem(http.StatusConflict, "result_not_ready", "the job is "+string(j.Status)+"; a result exists once it has succeeded")
	}
	ctx := c.Request().Context()
	a, err := s.cfg.Store.GetAsset(ctx, j.ResultKey)
	if err != nil {
		if errors.Is(err, pipeline.ErrNotFound) {
			// A succeeded job whose result has no asset row breaks
			// docs/design.md §1.4; do not paper over it with a 404.
			err = errors.New("result asset row missing for " + j.ResultKey)
		}
		return err
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "private, no-store")
	if p, ok := s.cfg.Objects.(Presigner); ok {
		u, err := p.PresignGet(ctx, a.Key, s.cfg.PresignTTL)
		if err != nil {
			return err
		}
		return c.Redirect(http.StatusFound, u)
	}
	ct := a.ContentType
	if ct == "" {
		ct = "video/mp4"
	}
	h.Set(echo.HeaderContentType, ct)
	h.Set(echo.HeaderContentDisposition, `inline; filename="`+j.InstanceID+`.mp4"`)
	if a.SHA256 != "" {
		h.Set("ETag", `"`+a.SHA256+`"`)
	}
	obj := &objectReader{ctx: ctx, store: s.cfg.Objects, key: a.Key, size: a.SizeBytes}
	defer obj.Close()
	// A download may outlast the server's ReadTimeout, which would cancel
	// the request's context; each write has its own deadline instead.
	s.clearReadDeadline(c.Response())
	sw := &serveContentWriter{ResponseWriter: deadlineWriter{c.Response()}}
	http.ServeContent(sw, c.Request(), "", a.CreatedAt, obj)
	if sw.refused != 0 {
		return contentProblem(sw.refused, h, a.SizeBytes)
	}
	return nil
}

// serveContentWriter keeps http.ServeContent's error answers (416, 412,
// written as text/plain by http.Error) from reaching the client, so they go
// out as problem+json through the one error handler like every other error.
type serveContentWriter struct {
	http.ResponseWriter
	refused int
}

func (w *serveContentWriter) WriteHeader(code int) {
	if code >= 400 {
		w.refused = code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *serveContentWriter) Write(p []byte) (int, error) {
	if w.refused != 0 {
		return len(p), nil // http.Error's text body: dropped
	}
	return w.ResponseWriter.Write(p)
}

func (w *serveContentWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// contentProblem is the problem for a status http.ServeContent chose. h is
// the response header, which still holds what ServeContent set.
func contentProblem(code int, h http.Header, size int64) error {
	// No file comes with a problem: its validators and name would
	// describe the problem document as if it were the file.
	for _, k := range []string{echo.HeaderContentDisposition, "ETag", echo.HeaderLastModified} {
		h.Del(k)
	}
	switch code {
	case http.StatusRequestedRangeNotSatisfiable:
		// ServeContent set Content-Range: bytes */size, as RFC 9110 asks.
		return problem(code, "range_not_satisfiable",
			"the Range header asks for bytes outside the result ("+strconv.FormatInt(size, 10)+" bytes) or is malformed")
	case http.StatusPreconditionFailed:
		return problem(code, "precondition_failed", "the result does not match the If-Match or If-Unmodified-Since header")
	}
	return errors.New("serving the result answered " + strconv.Itoa(code))
}

// objectReader is an io.ReadSeeker over a stored object that opens a ranged
// read only when bytes are read, at the current offset. ServeContent seeks
// to learn the size (known from the asset row) and to the start of the
// requested range, so the store is asked for just that part.
type objectReader struct {
	ctx   context.Context
	store pipeline.ObjectStore
	key   string
	size  int64
	off   int64
	rc    io.ReadCloser
}

func (o *objectReader) Read(p []byte) (int, error) {
	if o.off >= o.size {
		return 0, io.EOF
	}
	if o.rc == nil {
		rc, _, err := o.store.Get(o.ctx, o.key, o.off, -1)
		if err != nil {
			return 0, err
		}
		o.rc = rc
	}
	n, err := o.rc.Read(p)
	o.off += int64(n)
	return n, err
}

func (o *objectReader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = o.off + offset
	case io.SeekEnd:
		abs = o.size + offset
	default:
		return 0, errors.New("objectReader: bad whence")
	}
	if abs < 0 {
		return 0, errors.New("objectReader: negative position")
	}
	if abs != o.off && o.rc != nil {
		o.rc.Close()
		o.rc = nil
	}
	o.off = abs
	return abs, nil
}

func (o *objectReader) Close() error {
	if o.rc == nil {
		return nil
	}
	err := o.rc.Close()
	o.rc = nil
	return err
}
