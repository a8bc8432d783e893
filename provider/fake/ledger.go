package fake

import (
	"maps"
	"sync"
)

// Counts is a number per operation.
type Counts struct {
	Image  int64 `json:"image"`
	Speech int64 `json:"speech"`
	Video  int64 `json:"video"`
}

// Get returns the count of op.
func (c Counts) Get(op Operation) int64 {
	switch op {
	case OpImage:
		return c.Image
	case OpSpeech:
		return c.Speech
	case OpVideo:
		return c.Video
	}
	return 0
}

// Total is the sum over all operations.
func (c Counts) Total() int64 { return c.Image + c.Speech + c.Video }

func (c *Counts) add(op Operation) {
	switch op {
	case OpImage:
		c.Image++
	case OpSpeech:
		c.Speech++
	case OpVideo:
		c.Video++
	}
}

// LedgerSnapshot is what the provider billed, as GET /ledger returns it. A
// call is billed when the provider commits it, before any injected
// after-commit fault, so a client that saw an error may still have paid.
type LedgerSnapshot struct {
	// Billed counts committed calls per operation.
	Billed Counts `json:"billed"`
	// ByUnit counts committed calls per X-Unit-Id header (calls without the
	// header are not listed).
	ByUnit map[string]Counts `json:"by_unit"`
	// ByIdempotencyKey counts committed calls per Idempotency-Key header,
	// whatever the operation (calls without the header are not listed). An
	// image replay is not a committed call.
	ByIdempotencyKey map[string]int64 `json:"by_idempotency_key"`
	// Calls counts every request under /v1/, including polls, rejected,
	// faulted and unknown ones.
	Calls int64 `json:"calls"`
	// Replayed counts image requests answered from the idempotency store.
	Replayed int64 `json:"replayed"`
	// Injected counts faults that took effect, by kind.
	Injected map[FaultKind]int64 `json:"injected"`
}

type ledger struct {
	mu       sync.Mutex
	billed   Counts
	byUnit   map[string]Counts
	byKey    map[string]int64
	calls    int64
	replayed int64
	injected map[FaultKind]int64
}

func newLedger() *ledger {
	l := &ledger{}
	l.reset()
	return l
}

func (l *ledger) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.billed = Counts{}
	l.byUnit = map[string]Counts{}
	l.byKey = map[string]int64{}
	l.calls = 0
	l.replayed = 0
	l.injected = map[FaultKind]int64{}
}

func (l *ledger) bill(op Operation, unit, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.billed.add(op)
	if unit != "" {
		c := l.byUnit[unit]
		c.add(op)
		l.byUnit[unit] = c
	}
	if key != "" {
		l.byKey[key]++
	}
}

func (l *ledger) call() {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
}

func (l *ledger) replay() {
	l.mu.Lock()
	l.replayed++
	l.mu.Unlock()
}

func (l *ledger) inject(k FaultKind) {
	l.mu.Lock()
	l.injected[k]++
	l.mu.Unlock()
}

func (l *ledger) snapshot() LedgerSnapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LedgerSnapshot{
		Billed:           l.billed,
		ByUnit:           maps.Clone(l.byUnit),
		ByIdempotencyKey: maps.Clone(l.byKey),
		Calls:            l.calls,
		Replayed:         l.replayed,
		Injected:         maps.Clone(l.injected),
	}
}
