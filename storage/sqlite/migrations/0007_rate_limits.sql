-- Rate limits shared by every worker (docs/design.md §6, issue 14): one
-- token bucket per (provider, operation) and the concurrency slots taken
-- from it. pipeline.DecideRate does the arithmetic; the driver reads and
-- writes a bucket inside one write transaction.
CREATE TABLE rate_buckets (
    provider      TEXT    NOT NULL,
    op            TEXT    NOT NULL,
    micro_tokens  INTEGER NOT NULL,          -- millionths of a token at refilled_at
    refilled_at   INTEGER NOT NULL,          -- unix ms
    paused_until  INTEGER NOT NULL DEFAULT 0, -- unix ms; a 429's Retry-After
    PRIMARY KEY (provider, op)
);

-- A slot is held for one call in flight and released after it; one a
-- crashed process never released frees itself at expires_at.
CREATE TABLE rate_slots (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    provider    TEXT    NOT NULL,
    op          TEXT    NOT NULL,
    holder      TEXT    NOT NULL,             -- attempt id / scene
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX rate_slots_bucket ON rate_slots (provider, op, expires_at);
