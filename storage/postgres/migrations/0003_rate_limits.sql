-- Rate limits shared by every worker (docs/design.md §6, issue 14): one
-- token bucket per (provider, operation) and the concurrency slots taken
-- from it. pipeline.DecideRate does the arithmetic; the driver takes the
-- bucket's row lock (SELECT … FOR UPDATE) and writes it back in the same
-- transaction, so concurrent takers on many machines serialise per bucket.
CREATE TABLE rate_buckets (
    provider      TEXT COLLATE "C" NOT NULL,
    op            TEXT COLLATE "C" NOT NULL,
    micro_tokens  BIGINT NOT NULL,           -- millionths of a token at refilled_at
    refilled_at   BIGINT NOT NULL,           -- unix ms
    paused_until  BIGINT NOT NULL DEFAULT 0, -- unix ms; a 429's Retry-After
    PRIMARY KEY (provider, op)
);

-- A slot is held for one call in flight and released after it; one a
-- crashed process never released frees itself at expires_at.
CREATE TABLE rate_slots (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider    TEXT COLLATE "C" NOT NULL,
    op          TEXT COLLATE "C" NOT NULL,
    holder      TEXT NOT NULL,               -- attempt id / scene
    acquired_at BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX rate_slots_bucket ON rate_slots (provider, op, expires_at);
