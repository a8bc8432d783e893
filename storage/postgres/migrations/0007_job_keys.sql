-- A job's unique keys move off the jobs row into job_keys, a table written
-- once per job and never updated (issue 15's burn-down against River).
--
-- Why: a job's status is indexed, so no update that changes it can be HOT,
-- and every claim, settle, heartbeat and progress write of a job inserts a
-- new entry into every index of jobs. For a unique index that entry is also
-- checked for uniqueness, which visits the heap for the row's old version:
-- the two unique indexes (jobs_idempotency, jobs_tenant_instance) were
-- about 15% of the database's CPU in a Postgres burn-down (bench/riverref,
-- 10,000 no-op jobs: 87-91 µs of database CPU a job with them, 74-75
-- without). The keys never change after the insert, so the uniqueness
-- they guard needs checking once, at the insert: job_keys holds them, and
-- jobs keeps its columns for reading.
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
--   * key rows are never updated or deleted, like jobs.

CREATE TABLE job_keys (
    job_id          TEXT COLLATE "C" PRIMARY KEY
                    REFERENCES jobs (id) DEFERRABLE INITIALLY DEFERRED,
    tenant          TEXT NOT NULL,
    operation       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    instance_id     TEXT COLLATE "C" NOT NULL
);
INSERT INTO job_keys (job_id, tenant, operation, idempotency_key, instance_id)
    SELECT id, tenant, operation, idempotency_key, instance_id FROM jobs;
-- The rows' deferred reference checks run now: an index cannot be built on
-- a table with checks still pending, and building it after the rows is the
-- faster way on a large table.
SET CONSTRAINTS ALL IMMEDIATE;
-- DESIGN §3: two concurrent submissions with one key create one job.
CREATE UNIQUE INDEX job_keys_idempotency ON job_keys (tenant, operation, idempotency_key);
-- Job ids are unique per tenant; every tenant-facing lookup resolves
-- (tenant, instance_id) here.
CREATE UNIQUE INDEX job_keys_tenant_instance ON job_keys (tenant, instance_id);

CREATE TRIGGER job_keys_no_update BEFORE UPDATE ON job_keys
    FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('job keys never change');
CREATE TRIGGER job_keys_no_delete BEFORE DELETE ON job_keys
    FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('job keys are never deleted');
CREATE TRIGGER job_keys_no_truncate BEFORE TRUNCATE ON job_keys
    FOR EACH STATEMENT EXECUTE FUNCTION edgepipe_refuse('job keys are never deleted');

CREATE FUNCTION edgepipe_jobs_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_keys (job_id, tenant, operation, idempotency_key, instance_id)
        VALUES (NEW.id, NEW.tenant, NEW.operation, NEW.idempotency_key, NEW.instance_id)
        ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN -- a key is held
        IF current_setting('edgepipe.key_conflict', true) = 'skip' THEN
            RETURN NULL;
        END IF;
        RAISE EXCEPTION 'edgepipe: a key of job % is held by another job', NEW.id
            USING ERRCODE = 'unique_violation';
    END IF;
    RETURN NEW;
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
