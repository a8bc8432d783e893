-- The listings' order moves off the jobs row into job_keys too (issue 15's
-- burn-down against River).
--
-- Why: no update of a job is HOT (its status is indexed), so every claim,
-- settle, heartbeat and progress write of a job inserts a new entry into
-- every index of jobs, including jobs_tenant_created (tenant, created_at,
-- instance_id) and jobs_created (created_at, id), whose columns never
-- change after the insert. job_keys (0007) is written once per job and
-- never updated: it gains the job's creation time and those two indexes,
-- and a listing reads job_keys in that order and each job by its primary
-- key. Status-filtered listings keep an order on jobs: jobs_status (status)
-- becomes (status, created_at, id), still one entry per update, so that the
-- operators' listing of one status is a range read newest first rather
-- than a walk of every job (ListJobs reads one status from jobs, and
-- every other listing from job_keys).
--
-- How: job_keys is rebuilt with the column (a copy joined to jobs, then
-- its indexes, reference and triggers as 0007 made them), rather than
-- updated row by row under its no-update trigger, so the table holds no
-- dead copy of every key row afterwards.

-- No job may be inserted between the copy below and the trigger that
-- copies its creation time, and the trigger and index changes on jobs
-- need its exclusive lock anyway: both tables are locked for the whole
-- migration, up front. Taking a weaker lock first and the exclusive one
-- at the first DROP would upgrade it, and a transaction that had locked
-- a job row FOR UPDATE between the two deadlocked against the migration.
LOCK TABLE jobs, job_keys IN ACCESS EXCLUSIVE MODE;

ALTER TABLE job_keys RENAME TO job_keys_0007;
CREATE TABLE job_keys (
    job_id          TEXT COLLATE "C" NOT NULL,
    tenant          TEXT NOT NULL,
    operation       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    instance_id     TEXT COLLATE "C" NOT NULL,
    created_at      BIGINT NOT NULL
);
INSERT INTO job_keys (job_id, tenant, operation, idempotency_key, instance_id, created_at)
    SELECT k.job_id, k.tenant, k.operation, k.idempotency_key, k.instance_id, j.created_at
    FROM job_keys_0007 k JOIN jobs j ON j.id = k.job_id;
-- Its indexes, reference and triggers go with it, and their names are free
-- again.
DROP TABLE job_keys_0007;

ALTER TABLE job_keys ADD PRIMARY KEY (job_id);
-- DESIGN §3: two concurrent submissions with one key create one job.
CREATE UNIQUE INDEX job_keys_idempotency ON job_keys (tenant, operation, idempotency_key);
-- Job ids are unique per tenant; every tenant-facing lookup resolves
-- (tenant, instance_id) here.
CREATE UNIQUE INDEX job_keys_tenant_instance ON job_keys (tenant, instance_id);
-- A tenant's listing pages by (created_at, instance_id), the operators' by
-- (created_at, job_id), newest first (listJobsQuery).
CREATE INDEX job_keys_tenant_created ON job_keys (tenant, created_at, instance_id);
CREATE INDEX job_keys_created ON job_keys (created_at, job_id);
-- Checked at commit: jobs' insert trigger writes a job's key row before its
-- row.
ALTER TABLE job_keys ADD CONSTRAINT job_keys_job_id_fkey
    FOREIGN KEY (job_id) REFERENCES jobs (id) DEFERRABLE INITIALLY DEFERRED;

CREATE TRIGGER job_keys_no_update BEFORE UPDATE ON job_keys
    FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('job keys never change');
CREATE TRIGGER job_keys_no_delete BEFORE DELETE ON job_keys
    FOR EACH ROW EXECUTE FUNCTION edgepipe_refuse('job keys are never deleted');
CREATE TRIGGER job_keys_no_truncate BEFORE TRUNCATE ON job_keys
    FOR EACH STATEMENT EXECUTE FUNCTION edgepipe_refuse('job keys are never deleted');

-- 0007's function, writing the creation time as well.
CREATE OR REPLACE FUNCTION edgepipe_jobs_keys() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    holder TEXT;
    held   TEXT;
    idx    TEXT;
BEGIN
    INSERT INTO job_keys (job_id, tenant, operation, idempotency_key, instance_id, created_at)
        VALUES (NEW.id, NEW.tenant, NEW.operation, NEW.idempotency_key, NEW.instance_id, NEW.created_at)
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
-- A job's creation time is frozen with its keys, so jobs and job_keys
-- cannot disagree on it either.
DROP TRIGGER jobs_keys_frozen ON jobs;
CREATE TRIGGER jobs_keys_frozen BEFORE UPDATE OF id, tenant, operation, idempotency_key, instance_id, created_at ON jobs
    FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id OR NEW.tenant IS DISTINCT FROM OLD.tenant
        OR NEW.operation IS DISTINCT FROM OLD.operation OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
        OR NEW.instance_id IS DISTINCT FROM OLD.instance_id OR NEW.created_at IS DISTINCT FROM OLD.created_at)
    EXECUTE FUNCTION edgepipe_refuse('a job''s keys and creation time never change');

-- One status newest first is a range (as SQLite's jobs_status, its 0011),
-- and a next page starts at its cursor even inside a group of jobs created
-- in one millisecond (one CreateJobs batch): the id breaks the tie in the
-- index. /metrics' counts by status and the checks' status lookups read it
-- as they read (status).
DROP INDEX jobs_status;
CREATE INDEX jobs_status ON jobs (status, created_at, id);
DROP INDEX jobs_tenant_created;
DROP INDEX jobs_created;
