package postgres

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"edgepipe/pipeline"
)

// Wake-ups on commit. The store sends NOTIFY on NotifyChannel, with the
// queue's name as payload, inside every transaction that makes a message
// visible now (a submission, a release, a redrive, an operator's retry);
// Postgres delivers it only if and when that transaction commits. A
// Listener turns those notifications into calls of its Wake function, so a
// worker can fetch at once instead of at its next poll. Polling stays the
// fallback: a notification can be lost (a listener reconnecting) and a
// delayed message (retry_wait) is not announced at all.
//
// internal/app wires Listener.Wake to pipeline.WorkerConfig.Wake for the
// queues a worker consumes (docs/design.md §10).

// NotifyChannel is the LISTEN/NOTIFY channel of queue wake-ups.
const NotifyChannel = "edgepipe_queue"

// notifyQueue announces that queue has a message visible now, on commit.
func notifyQueue(ctx context.Context, tx dbtx, queue string) error {
	if queue == "" {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, queue)
	return err
}

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// URL is the database's connection string. Required.
	URL string
	// Wake is called with the queue named by each notification. It must
	// not block for long (a buffered, non-blocking send is typical).
	Wake func(queue string)
	// Retry is how long to wait before reconnecting after the connection
	// failed. Default 1 s.
	Retry  time.Duration
	Logger *slog.Logger
}

// Listener keeps a connection LISTENing on NotifyChannel and calls Wake
// for every notification. It has the pipeline.Service lifecycle.
type Listener struct {
	cfg ListenerConfig
	svc pipeline.Service
	// ready is closed once the first LISTEN succeeded (tests wait on it).
	ready chan struct{}
}

// NewListener validates cfg and returns a stopped Listener.
func NewListener(cfg ListenerConfig) (*Listener, error) {
	if cfg.URL == "" || cfg.Wake == nil {
		return nil, errors.Join(pipeline.ErrInvalidInput, errors.New("postgres: a listener needs a database URL and a wake function"))
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Listener{cfg: cfg, ready: make(chan struct{})}, nil
}

// Start begins listening in the background.
func (l *Listener) Start(ctx context.Context) error { return l.svc.Start(ctx, l.run) }

// Stop ends the listening connection.
func (l *Listener) Stop(ctx context.Context) error { return l.svc.Stop(ctx) }

// Ready is closed once the listener first listens.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

func (l *Listener) run(ctx context.Context) {
	first := true
	for ctx.Err() == nil {
		err := l.listen(ctx, &first)
		if ctx.Err() != nil {
			return
		}
		// The message is only a hint (polling covers the gap); say why
		// without the URL, which may hold a password.
		l.cfg.Logger.Warn("postgres: listener lost its connection; reconnecting", "error_class", errorClass(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.cfg.Retry):
		}
	}
}

func (l *Listener) listen(ctx context.Context, first *bool) error {
	conn, err := pgx.Connect(ctx, l.cfg.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx)) // closes even when ctx ended the listen
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	if *first {
		*first = false
		close(l.ready)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.cfg.Wake(n.Payload)
	}
}

// errorClass names an error's kind for a log line that must not quote it.
func errorClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(translate(err), ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}
