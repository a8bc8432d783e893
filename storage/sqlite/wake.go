package sqlite

import "sync"

// Wake-ups on commit, in this process. SQLite has no LISTEN/NOTIFY, but
// the API and the workers of one `edgepipe serve` share one Store: every
// write transaction that makes a message visible now (a submission, a
// release, a redrive, an operator's retry) calls the Store's listeners with
// the queue's name once it has committed, never before and never for a
// transaction that rolled back. A worker in another process on the same
// file hears nothing and finds the message at its next poll, which stays
// the fallback, as does a delayed message (retry_wait), announced by
// nobody. storage/postgres announces its commits with NOTIFY (an operator's
// Enqueue and a retry already due are announced here only).

// listeners are the functions Store.Listen registered.
type listeners struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(queue string)
}

// Listen registers wake, called with a queue's name after each commit that
// made a message visible on it now, until the returned stop is called.
// wake runs on the committing goroutine (the group committer's, for a
// submission), so it must not block: a buffered, non-blocking send is
// typical. A wake that runs while stop is called may still be called once.
func (s *Store) Listen(wake func(queue string)) (stop func()) {
	l := &s.wake
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fns == nil {
		l.fns = map[int]func(string){}
	}
	id := l.next
	l.next++
	l.fns[id] = wake
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.fns, id)
	}
}

// announce calls every listener with each queue. The listeners are
// called after the lock is released, so one that registers or stops a
// listener, or commits through the store, cannot deadlock the committer.
func (l *listeners) announce(queues []string) {
	if len(queues) == 0 {
		return
	}
	l.mu.Lock()
	fns := make([]func(string), 0, len(l.fns))
	for _, fn := range l.fns {
		fns = append(fns, fn)
	}
	l.mu.Unlock()
	for _, fn := range fns {
		for _, q := range queues {
			fn(q)
		}
	}
}
