-- A job's unique keys move off the jobs row into job_keys, a table written
-- once per job and never updated (issue 15's burn-down against River).
--
-- Why: a job's status is indexed, so no update that changes it can be HOT,
-- and every claim, settle, heartbeat and progress write of a job inserts a
-- new entry into every index of jobs. For a unique index that entry is also
-- checked for uniqueness, which visits the heap for the row's old version.
-- The two unique indexes (jobs_idempotency, jobs_tenant_instance) cost a
-- Postgres burn-down (bench/riverref, 20,000 no-op jobs, 1 process, three
-- runs a side, alternating) 96-110 µs of database CPU a job against 74-95
-- without them, and 4 of the 32 WAL records a claim and a settle write;
-- a submission writes 3 more (19 instead of 16). The keys never change
-- after the insert, so the uniqueness they guard needs checking once, at
-- the insert: job_keys holds them, and jobs keeps its columns for reading.
--
-- How the guarantees stay in the database:
--   * a job cannot exist without its key row: a BEFORE INSERT trigger on
--     jobs writes it from the job's own columns. When one of its keys is
--     held (or is being inserted by a transaction not yet committed, which
--     the insert waits for) the job is refused with unique_violation, as
--     jobs' own unique indexes refused it — unless the inserting
--     transaction said it resolves conflicts itself
--     (set_config('edgepipe.key_conflict', 'skip', true), which the store's
--     submissions do in the inserting statement): then the job is skipped
--     (RETURN NULL), so "INSERT INTO jobs … ON CONFLICT DO NOTHING
--     RETURNING" answers as it did, and a refused submission does not
--     abort the group commit it rides in;
--   * the key columns of a job cannot change (a trigger refuses it), so
--     jobs and job_keys cannot disagree;
--   * a key row cannot dangle: its job_id references jobs, checked at
--     commit (the key row is written before its job row);
--   * a held key refused without skip names itself: the message and the
--     error's constraint say which key (job key, idempotency key,
--     instance id) and which job holds it;
--   * key rows are never updated or deleted, like jobs.

-- No job may be inserted between the copy below and the trigger that
-- takes over from it (readers go on).
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE job_keys (
    job_id          TEXT COLLATE "C" NOT NULL,
    tenant          TEXT NOT NULL,
    operation       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    instance_id     TEXT COLLATE "C" NOT NULL
);
INSERT INTO job_keys (job_id, tenant, operation, idempotency_key, instance_id)
    SELECT id, tenant, operation, idempotency_key, instance_id FROM jobs;
-- The indexes and the reference after the copy: each is built or checked
-- once over the whole table, not row by row.
ALTER TABLE job_keys ADD PRIMARY KEY (job_id);
-- DESIGN §3: two concurrent submissions with one key create one job.
CREATE UNIQUE INDEX job_keys_idempotency ON job_keys (tenant, operation, idempotency_key);
-- Job ids are unique per tenant; every tenant-facing lookup resolves
-- (tenant, instance_id) here.
CREATE UNIQUE INDEX job_keys_tenant_instance ON job_keys (tenant, instance_id);
-- Checked at commit: the trigger writes a job's key row before its row.
ALTER TABLE job_keys ADD CONSTRAINT job_keys_job_id_fkey
    FOREIGN KEY (job_id) REFERENCES jobs (id) DEFERRABLE INITIALLY DEFERRED;

CREATE TRIGGER job_keys_no_update BEFORE UPDATE ON job_keys
    FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('job keys never change');
CREATE TRIGGER job_keys_no_delete BEFORE DELETE ON job_keys
    FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('job keys are never deleted');
CREATE TRIGGER job_keys_no_truncate BEFORE TRUNCATE ON job_keys
    FOR EACH STATEMENT EXECUTE FUNCTION edgepipe_refuse('job keys are never deleted');

CREATE FUNCTION edgepipe_jobs_keys() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    holder TEXT;
    held   TEXT;
    idx    TEXT;
BEGIN
    INSERT INTO job_keys (job_id, tenant, operation, idempotency_key, instance_id)
        VALUES (NEW.id, NEW.tenant, NEW.operation, NEW.idempotency_key, NEW.instance_id)
        ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NEW;
    END IF;
    -- A key is held (by a committed job: ON CONFLICT waited for any
    -- transaction still inserting it).
    IF current_setting('edgepipe.key_conflict', true) = 'skip' THEN
        RETURN NULL;
    END IF;
    SELECT k.job_id,
           CASE WHEN k.job_id = NEW.id THEN 'job key'
                WHEN k.operation = NEW.operation AND k.idempotency_key = NEW.idempotency_key THEN 'idempotency key'
                ELSE 'instance id' END,
           CASE WHEN k.job_id = NEW.id THEN 'job_keys_pkey'
                WHEN k.operation = NEW.operation AND k.idempotency_key = NEW.idempotency_key THEN 'job_keys_idempotency'
                ELSE 'job_keys_tenant_instance' END
        INTO holder, held, idx
        FROM job_keys k
        WHERE k.job_id = NEW.id
           OR (k.tenant = NEW.tenant AND k.operation = NEW.operation AND k.idempotency_key = NEW.idempotency_key)
           OR (k.tenant = NEW.tenant AND k.instance_id = NEW.instance_id)
        LIMIT 1;
    RAISE EXCEPTION 'edgepipe: job %''s % is held by job %', NEW.id, coalesce(held, 'key'), coalesce(holder, '?')
        USING ERRCODE = 'unique_violation', CONSTRAINT = coalesce(idx, 'job_keys_pkey'), TABLE = 'job_keys';
END $$;
CREATE TRIGGER jobs_keys BEFORE INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION edgepipe_jobs_keys();
CREATE TRIGGER jobs_keys_frozen BEFORE UPDATE OF id, tenant, operation, idempotency_key, instance_id ON jobs
    FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id OR NEW.tenant IS DISTINCT FROM OLD.tenant
        OR NEW.operation IS DISTINCT FROM OLD.operation OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
        OR NEW.instance_id IS DISTINCT FROM OLD.instance_id)
    EXECUTE FUNCTION edgepipe_refuse('a job''s keys never change');

DROP INDEX jobs_idempotency;
DROP INDEX jobs_tenant_instance;
