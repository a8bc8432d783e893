-- edgepipe schema for Postgres, version 1: the final schema of the SQLite
-- driver's migrations 0001-0004 in one file (storage/sqlite/migrations).
-- Every *_at column is a Unix time in milliseconds (UTC), read from the
-- store's injected clock exactly as the SQLite driver does, so both stores
-- agree on every time and tests can drive one clock for both. Ids and
-- object keys collate "C" (bytewise, as SQLite compares them), so listings
-- and cursors order the same whatever the server's locale.

CREATE TABLE jobs (
    id                  TEXT COLLATE "C" PRIMARY KEY, -- the internal job key (pipeline.JobKey), e.g. v1-01J....t2d45977e49a75f92
    instance_id         TEXT COLLATE "C" NOT NULL CHECK (instance_id <> ''), -- the caller-visible id, unique per tenant
    tenant              TEXT NOT NULL,
    operation           TEXT NOT NULL,
    idempotency_key     TEXT NOT NULL,
    request_fingerprint TEXT NOT NULL,
    input_json          TEXT NOT NULL,             -- the request as accepted, byte for byte
    frozen_input_json   TEXT,                      -- set once by prepare
    workflow_version    TEXT NOT NULL,
    queue               TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN
        ('pending','running','retry_wait','needs_review','succeeded','failed','canceled','dead_lettered')),
    status_changed_at   BIGINT NOT NULL,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_run_at         BIGINT,
    attempt_id          TEXT,                      -- fences every write
    lease_owner         TEXT,
    lease_expires_at    BIGINT,
    stage               TEXT NOT NULL DEFAULT '',
    units_total         INTEGER NOT NULL DEFAULT 0,
    units_done          INTEGER NOT NULL DEFAULT 0,
    last_error_class    TEXT NOT NULL DEFAULT '',
    last_error_code     TEXT NOT NULL DEFAULT '',
    last_error_message  TEXT NOT NULL DEFAULT '',
    requires_action     INTEGER NOT NULL DEFAULT 0 CHECK (requires_action IN (0,1)),
    cancel_requested_at BIGINT,
    result_key          TEXT,
    webhook_url         TEXT NOT NULL DEFAULT '',
    infra_failures      INTEGER NOT NULL DEFAULT 0,
    infra_since         BIGINT,
    decision            TEXT NOT NULL DEFAULT '' CHECK (decision IN ('','retry','fail')),
    decided_by          TEXT NOT NULL DEFAULT '',
    decision_reason     TEXT NOT NULL DEFAULT '',
    decided_at          BIGINT
);
-- DESIGN §3: two concurrent submissions with one key create one job.
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, operation, idempotency_key);
-- Job ids are unique per tenant (docs/design.md §3): every tenant-facing
-- lookup resolves (tenant, instance_id) here, and a tenant's listing pages by
-- (created_at, instance_id) so its cursor carries the id the tenant knows.
CREATE UNIQUE INDEX jobs_tenant_instance ON jobs (tenant, instance_id);
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, instance_id);
CREATE INDEX jobs_created ON jobs (created_at, id);
CREATE INDEX jobs_attention ON jobs (updated_at) WHERE requires_action = 1;
CREATE INDEX jobs_status ON jobs (status);
CREATE INDEX jobs_decided ON jobs (decided_at) WHERE decided_at IS NOT NULL;

-- The second wall behind pipeline.CheckTransition: the same table, in SQL
-- (TestTriggerMatchesTransitionTable in storage/storetest keeps them equal).
CREATE FUNCTION edgepipe_jobs_status_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status <> OLD.status AND (OLD.status || '>' || NEW.status) NOT IN (
        'pending>running', 'pending>canceled', 'pending>dead_lettered',
        'running>pending', 'running>retry_wait', 'running>needs_review', 'running>succeeded',
        'running>failed', 'running>canceled', 'running>dead_lettered',
        'retry_wait>running', 'retry_wait>canceled', 'retry_wait>dead_lettered',
        'needs_review>pending', 'needs_review>failed', 'needs_review>canceled',
        'dead_lettered>pending') THEN
        RAISE EXCEPTION 'edgepipe: invalid job status transition (% > %)', OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER jobs_status_transition BEFORE UPDATE OF status ON jobs
    FOR EACH ROW EXECUTE FUNCTION edgepipe_jobs_status_transition();

-- A finished job keeps its attempt history as it was.
CREATE FUNCTION edgepipe_jobs_terminal_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'edgepipe: terminal job is immutable' USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER jobs_terminal_frozen BEFORE UPDATE ON jobs
    FOR EACH ROW WHEN (OLD.status IN ('succeeded','failed','canceled'))
    EXECUTE FUNCTION edgepipe_jobs_terminal_frozen();

CREATE FUNCTION edgepipe_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'edgepipe: %', TG_ARGV[0] USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER jobs_no_delete BEFORE DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('jobs are never deleted');
-- TRUNCATE bypasses row triggers; refuse it too.
CREATE TRIGGER jobs_no_truncate BEFORE TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION edgepipe_refuse('jobs are never deleted');

-- The job's history. Every transaction that appends an event for a job holds
-- that job's row lock first, so a job's event ids grow in commit order and an
-- SSE reader resuming after id N can never miss a later-committed event.
CREATE TABLE job_events (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      TEXT COLLATE "C" NOT NULL REFERENCES jobs (id),
    at          BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    from_status TEXT NOT NULL DEFAULT '',
    to_status   TEXT NOT NULL DEFAULT '',
    attempt_id  TEXT NOT NULL DEFAULT '',
    detail_json JSON NOT NULL DEFAULT '{}'          -- safe fields only; json keeps the text as written
);
CREATE INDEX job_events_job ON job_events (job_id, id);
CREATE TRIGGER job_events_append_only_update BEFORE UPDATE ON job_events
    FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('job events are append-only');
CREATE TRIGGER job_events_append_only_delete BEFORE DELETE ON job_events
    FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('job events are append-only');
CREATE TRIGGER job_events_no_truncate BEFORE TRUNCATE ON job_events
    FOR EACH STATEMENT EXECUTE FUNCTION edgepipe_refuse('job events are append-only');

CREATE TABLE units (
    job_id             TEXT NOT NULL REFERENCES jobs (id),
    scene_index        INTEGER NOT NULL CHECK (scene_index >= 0),
    kind               TEXT NOT NULL,
    unit_key           TEXT NOT NULL,
    status             TEXT NOT NULL DEFAULT 'planned' CHECK (status IN
        ('planned','submitted','generated','failed','needs_review')),
    external_job_id    TEXT NOT NULL DEFAULT '',
    result_json        JSONB NOT NULL DEFAULT '{}',  -- artifact name -> object key
    updated_by_attempt TEXT NOT NULL DEFAULT '',
    updated_at         BIGINT NOT NULL,
    PRIMARY KEY (job_id, scene_index)
);

-- The billing audit trail.
CREATE TABLE provider_calls (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id           TEXT COLLATE "C" NOT NULL REFERENCES jobs (id),
    scene_index      INTEGER NOT NULL,
    operation        TEXT NOT NULL,
    provider         TEXT NOT NULL,
    model            TEXT NOT NULL DEFAULT '',
    contract         TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL DEFAULT '',
    attempt_id       TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'intent' CHECK (status IN
        ('intent','succeeded','not_sent','failed','ambiguous','waived')),
    external_job_id  TEXT NOT NULL DEFAULT '',
    http_status      INTEGER NOT NULL DEFAULT 0,
    error_code       TEXT NOT NULL DEFAULT '',
    intended_at      BIGINT NOT NULL,
    finished_at      BIGINT,
    staged_key       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX provider_calls_unit ON provider_calls (job_id, scene_index, operation);
CREATE INDEX provider_calls_status_op ON provider_calls (status, operation);

-- Ownership of an object key by an attempt (DESIGN §7).
CREATE TABLE object_claims (
    object_key  TEXT COLLATE "C" NOT NULL,
    attempt_id  TEXT NOT NULL,
    job_id      TEXT REFERENCES jobs (id),
    state       TEXT NOT NULL DEFAULT 'writing' CHECK (state IN ('writing','deleting')),
    claimed_at  BIGINT NOT NULL,
    PRIMARY KEY (object_key, attempt_id)
);
CREATE INDEX object_claims_job ON object_claims (job_id);
CREATE INDEX object_claims_claimed ON object_claims (claimed_at);

CREATE TABLE assets (
    object_key         TEXT COLLATE "C" PRIMARY KEY,
    job_id             TEXT NOT NULL REFERENCES jobs (id),
    kind               TEXT NOT NULL,
    size_bytes         BIGINT NOT NULL CHECK (size_bytes >= 0),
    sha256             TEXT NOT NULL CHECK (length(sha256) = 64),
    content_type       TEXT NOT NULL,
    duration_ms        INTEGER NOT NULL DEFAULT 0,
    created_by_attempt TEXT NOT NULL,
    created_at         BIGINT NOT NULL
);
CREATE INDEX assets_job ON assets (job_id);

-- Cloudflare Queues role. A message only wakes a worker; the job row decides.
CREATE TABLE queue_messages (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue             TEXT NOT NULL,
    job_id            TEXT NOT NULL REFERENCES jobs (id),
    enqueued_at       BIGINT NOT NULL,
    visible_at        BIGINT NOT NULL,
    delivery_count    INTEGER NOT NULL DEFAULT 0,
    last_delivered_at BIGINT
);
CREATE INDEX queue_messages_ready ON queue_messages (queue, visible_at, id);
CREATE UNIQUE INDEX queue_messages_job ON queue_messages (job_id);

CREATE TABLE dead_letters (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id            TEXT NOT NULL REFERENCES jobs (id),
    queue             TEXT NOT NULL,
    reason            TEXT NOT NULL,
    detail            TEXT NOT NULL DEFAULT '',
    dead_lettered_at  BIGINT NOT NULL,
    redriven_at       BIGINT,
    redriven_to_queue TEXT,
    discarded_at      BIGINT,
    discarded_by      TEXT NOT NULL DEFAULT '',
    discard_reason    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX dead_letters_job ON dead_letters (job_id);
CREATE INDEX dead_letters_unsettled ON dead_letters (id) WHERE redriven_at IS NULL AND discarded_at IS NULL;
CREATE INDEX dead_letters_redriven_at ON dead_letters (redriven_at) WHERE redriven_at IS NOT NULL;
CREATE INDEX dead_letters_discarded_at ON dead_letters (discarded_at) WHERE discarded_at IS NOT NULL;

CREATE FUNCTION edgepipe_dead_letters_settled_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.redriven_at IS NOT NULL OR OLD.discarded_at IS NOT NULL)
       AND (NEW.redriven_at IS DISTINCT FROM OLD.redriven_at OR NEW.discarded_at IS DISTINCT FROM OLD.discarded_at) THEN
        RAISE EXCEPTION 'edgepipe: a settled dead letter stays settled' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER dead_letters_settled_once BEFORE UPDATE ON dead_letters
    FOR EACH ROW EXECUTE FUNCTION edgepipe_dead_letters_settled_once();

-- Webhook deliveries, written in the transaction that settles the job.
CREATE TABLE webhook_outbox (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id          TEXT NOT NULL REFERENCES jobs (id),
    event_id        BIGINT NOT NULL REFERENCES job_events (id),
    url             TEXT NOT NULL,
    payload_json    TEXT NOT NULL,                -- signed as is: kept byte for byte
    status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','delivered','failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    last_error      TEXT NOT NULL DEFAULT '',
    created_at      BIGINT NOT NULL,
    delivered_at    BIGINT
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (status, next_attempt_at);
CREATE INDEX webhook_outbox_event ON webhook_outbox (event_id);
CREATE INDEX webhook_outbox_job ON webhook_outbox (job_id);

-- Which workflow versions each live process binds (DESIGN §4).
CREATE TABLE process_bindings (
    process_id   TEXT PRIMARY KEY,
    role         TEXT NOT NULL,
    versions     TEXT NOT NULL,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);
