-- edgepipe schema, version 1.
-- Every *_at column is a Unix time in milliseconds (UTC); integers compare and
-- index faster than text and leave no room for time-zone mistakes.

CREATE TABLE jobs (
    id                  TEXT PRIMARY KEY,          -- the workflow instance id, e.g. v1-01J...
    tenant              TEXT NOT NULL,
    operation           TEXT NOT NULL,
    idempotency_key     TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,             -- SHA-256 of the canonical request
    input_json          TEXT NOT NULL,             -- the request as accepted
    frozen_input_json   TEXT,                      -- set once by prepare; later attempts read only this
    workflow_version    TEXT NOT NULL,             -- from the id prefix, never changes
    queue               TEXT NOT NULL,             -- e.g. render-v1, or '' when dead-lettered at submission
    status              TEXT NOT NULL CHECK (status IN
        ('pending','running','retry_wait','needs_review','succeeded','failed','canceled','dead_lettered')),
    status_changed_at   INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_run_at         INTEGER,                   -- retry_wait: not before this time
    attempt_id          TEXT,                      -- the current (or last) attempt; fences every write
    lease_owner         TEXT,
    lease_expires_at    INTEGER,
    stage               TEXT NOT NULL DEFAULT '',  -- last stage that really finished
    units_total         INTEGER NOT NULL DEFAULT 0,
    units_done          INTEGER NOT NULL DEFAULT 0,
    last_error_class    TEXT NOT NULL DEFAULT '',
    last_error_code     TEXT NOT NULL DEFAULT '',
    last_error_message  TEXT NOT NULL DEFAULT '',  -- safe text only, never raw provider output
    requires_action     INTEGER NOT NULL DEFAULT 0 CHECK (requires_action IN (0,1)),
    cancel_requested_at INTEGER,
    result_key          TEXT,
    webhook_url         TEXT NOT NULL DEFAULT ''
);
-- DESIGN §3: the idempotency key is scoped to (tenant, operation); this index
-- is what makes two concurrent submissions create one job.
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, operation, idempotency_key);
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, id);
-- Operators look for jobs that need a human; nothing else filters by status
-- at scale, and an index on (status, …) would be rewritten twice per job.
CREATE INDEX jobs_attention ON jobs (updated_at) WHERE requires_action = 1;

-- The second wall behind pipeline.CheckTransition: the same table, in SQL.
-- A status may stay the same (progress updates, lease takeover) or move along
-- one of these edges, nothing else.
CREATE TRIGGER jobs_status_transition
BEFORE UPDATE OF status ON jobs
WHEN NEW.status <> OLD.status AND (OLD.status || '>' || NEW.status) NOT IN (
    'pending>running', 'pending>canceled', 'pending>dead_lettered',
    'running>pending', 'running>retry_wait', 'running>needs_review', 'running>succeeded',
    'running>failed', 'running>canceled', 'running>dead_lettered',
    'retry_wait>running', 'retry_wait>canceled', 'retry_wait>dead_lettered',
    'needs_review>pending', 'needs_review>failed', 'needs_review>canceled',
    'dead_lettered>pending')
BEGIN
    SELECT RAISE(ABORT, 'edgepipe: invalid job status transition');
END;

-- A finished job keeps its attempt history as it was.
CREATE TRIGGER jobs_terminal_frozen
BEFORE UPDATE ON jobs
WHEN OLD.status IN ('succeeded','failed','canceled')
BEGIN
    SELECT RAISE(ABORT, 'edgepipe: terminal job is immutable');
END;

CREATE TRIGGER jobs_no_delete
BEFORE DELETE ON jobs
BEGIN
    SELECT RAISE(ABORT, 'edgepipe: jobs are never deleted');
END;

-- The job's history. Progress streams (SSE) and webhooks are views of it.
CREATE TABLE job_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,   -- monotonic: the SSE event id
    job_id      TEXT NOT NULL REFERENCES jobs (id),
    at          INTEGER NOT NULL,
    kind        TEXT NOT NULL,                       -- e.g. status, stage_finished, unit_generated
    from_status TEXT NOT NULL DEFAULT '',
    to_status   TEXT NOT NULL DEFAULT '',
    attempt_id  TEXT NOT NULL DEFAULT '',
    detail_json TEXT NOT NULL DEFAULT '{}'           -- safe fields only
);
CREATE INDEX job_events_job ON job_events (job_id, id);

-- Events are history: nobody rewrites them.
CREATE TRIGGER job_events_append_only_update BEFORE UPDATE ON job_events
BEGIN SELECT RAISE(ABORT, 'edgepipe: job events are append-only'); END;
CREATE TRIGGER job_events_append_only_delete BEFORE DELETE ON job_events
BEGIN SELECT RAISE(ABORT, 'edgepipe: job events are append-only'); END;

-- One unit per scene. A unit's result is written the moment it exists and is
-- reused by every later attempt (DESIGN §1.3).
CREATE TABLE units (
    job_id             TEXT NOT NULL REFERENCES jobs (id),
    scene_index        INTEGER NOT NULL CHECK (scene_index >= 0),
    kind               TEXT NOT NULL,               -- image | video
    unit_key           TEXT NOT NULL,               -- hash of the frozen inputs that determine the result
    status             TEXT NOT NULL DEFAULT 'planned' CHECK (status IN
        ('planned','submitted','generated','failed','needs_review')),
    external_job_id    TEXT NOT NULL DEFAULT '',    -- async providers: persisted before waiting
    result_json        TEXT NOT NULL DEFAULT '{}',  -- object keys of the generated media
    updated_by_attempt TEXT NOT NULL DEFAULT '',
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (job_id, scene_index)
);

-- The billing audit trail: a row is written before a request is sent and
-- updated after. Per (job, scene, operation) a non-idempotent provider has at
-- most one row that may have been billed.
CREATE TABLE provider_calls (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id           TEXT NOT NULL REFERENCES jobs (id),
    scene_index      INTEGER NOT NULL,
    operation        TEXT NOT NULL,                -- image | speech | video_submit | video_poll ...
    provider         TEXT NOT NULL,
    contract         TEXT NOT NULL,                -- sync | async_pollable | idempotent_verified | fail_closed
    idempotency_key  TEXT NOT NULL DEFAULT '',
    attempt_id       TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'intent' CHECK (status IN
        ('intent','succeeded','not_sent','failed','ambiguous','waived')),
                     -- waived: an operator decided to pay again after this call's unknown outcome
    external_job_id  TEXT NOT NULL DEFAULT '',
    http_status      INTEGER NOT NULL DEFAULT 0,
    error_code       TEXT NOT NULL DEFAULT '',
    intended_at      INTEGER NOT NULL,
    finished_at      INTEGER
);
CREATE INDEX provider_calls_unit ON provider_calls (job_id, scene_index, operation);

-- Ownership of an object key by an attempt (DESIGN §7): written before the
-- object, removed after the asset row exists or the attempt gave up. A claim
-- in state 'deleting' blocks new claims on the key until the delete is done.
CREATE TABLE object_claims (
    object_key  TEXT NOT NULL,
    attempt_id  TEXT NOT NULL,                 -- or the sweeper's run id
    job_id      TEXT REFERENCES jobs (id),     -- NULL for the sweeper's claims
    state       TEXT NOT NULL DEFAULT 'writing' CHECK (state IN ('writing','deleting')),
    claimed_at  INTEGER NOT NULL,
    PRIMARY KEY (object_key, attempt_id)
);
CREATE INDEX object_claims_job ON object_claims (job_id);

-- An asset row exists only for an object that was fully written.
CREATE TABLE assets (
    object_key         TEXT PRIMARY KEY,
    job_id             TEXT NOT NULL REFERENCES jobs (id),
    kind               TEXT NOT NULL,               -- image | speech | video | clip | render
    size_bytes         INTEGER NOT NULL CHECK (size_bytes >= 0),
    sha256             TEXT NOT NULL CHECK (length(sha256) = 64),
    content_type       TEXT NOT NULL,
    duration_ms        INTEGER NOT NULL DEFAULT 0,  -- renders: the storyboard's length
    created_by_attempt TEXT NOT NULL,
    created_at         INTEGER NOT NULL
);
CREATE INDEX assets_job ON assets (job_id);

-- Cloudflare Queues role. A message only wakes a worker; the job row decides.
CREATE TABLE queue_messages (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    queue             TEXT NOT NULL,
    job_id            TEXT NOT NULL REFERENCES jobs (id),
    enqueued_at       INTEGER NOT NULL,
    visible_at        INTEGER NOT NULL,            -- not delivered before this time
    delivery_count    INTEGER NOT NULL DEFAULT 0,
    last_delivered_at INTEGER
);
CREATE INDEX queue_messages_ready ON queue_messages (queue, visible_at, id);
-- One message per job: a second wake-up for the same job is merged into the
-- first (Enqueue upserts), so one batch can never claim a job twice.
CREATE UNIQUE INDEX queue_messages_job ON queue_messages (job_id);

CREATE TABLE dead_letters (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id            TEXT NOT NULL REFERENCES jobs (id),
    queue             TEXT NOT NULL,               -- the queue it came from ('' if it never had one)
    reason            TEXT NOT NULL,               -- unbound_version | poison | retries_exhausted
    detail            TEXT NOT NULL DEFAULT '',
    dead_lettered_at  INTEGER NOT NULL,
    redriven_at       INTEGER,
    redriven_to_queue TEXT
);
CREATE INDEX dead_letters_open ON dead_letters (redriven_at, id);
CREATE INDEX dead_letters_job ON dead_letters (job_id);

-- Webhook deliveries, written in the transaction that settles the job.
CREATE TABLE webhook_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id          TEXT NOT NULL REFERENCES jobs (id),
    event_id        INTEGER NOT NULL REFERENCES job_events (id),
    url             TEXT NOT NULL,
    payload_json    TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','delivered','failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    delivered_at    INTEGER
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (status, next_attempt_at);
-- Foreign-key checks on job_events and jobs look children up by these.
CREATE INDEX webhook_outbox_event ON webhook_outbox (event_id);
CREATE INDEX webhook_outbox_job ON webhook_outbox (job_id);
