package api

import (
	"net/http"
	"time"
)

// streamWriteTimeout is how long one write of a long response (an event
// stream, a download) may block. The http.Server's WriteTimeout, if any,
// bounds a whole response and would cut these off; instead each write gets
// its own deadline, so a stalled client still frees the handler.
const streamWriteTimeout = 30 * time.Second

// extendWriteDeadline moves the connection's write deadline to
// streamWriteTimeout from now. Writers that cannot set deadlines (test
// recorders) are fine without.
func extendWriteDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(streamWriteTimeout))
}

// deadlineWriter extends the write deadline before every write.
type deadlineWriter struct {
	http.ResponseWriter
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	extendWriteDeadline(d.ResponseWriter)
	return d.ResponseWriter.Write(p)
}

func (d deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// clearReadDeadline lifts the connection's read deadline for a long
// response. http.Server's ReadTimeout is a deadline for reading the whole
// request, but it stays on the connection while the handler runs, and when
// it passes, net/http's background read fails and cancels the request's
// context: a download or event stream would be cut off at ReadTimeout.
// Long responses bound themselves instead: per-write deadlines (a stalled
// client) and, for streams, a maximum age.
func (s *Server) clearReadDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}
