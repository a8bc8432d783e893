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
