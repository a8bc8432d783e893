package api

import (
	"errors"
	"io"
	"net"
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
// request; were it still set while the handler runs, net/http's background
// read would fail when it passes and cancel the request's context, cutting a
// download or event stream off at ReadTimeout. net/http (Go 1.26) already
// clears it when it starts that background read after the body; doing it
// here too keeps the exemption from resting on that detail. Long responses
// bound themselves instead: per-write deadlines (a stalled client) and, for
// streams, a maximum age.
func (s *Server) clearReadDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// readBody reads a request body whole. A body that stops arriving before
// the server's ReadTimeout is a 408 problem (the connection is closed after
// it), not an internal error: it says nothing about the server.
func readBody(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, problem(http.StatusRequestTimeout, "request_timeout",
			"the request body did not arrive in time; send it at once").withHeader("Connection", "close")
	}
	return b, err
}
