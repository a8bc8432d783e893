-- Job ids are unique per tenant (docs/design.md §3, issue 12 item 1).
-- instance_id is the caller-visible id; jobs.id stays the primary key and
-- becomes the internal job key (pipeline.JobKey for new jobs) that every
-- other table keeps referencing. A job stored before this migration keeps
-- its id as its internal key and gets it as its instance id.

ALTER TABLE jobs ADD COLUMN instance_id TEXT NOT NULL DEFAULT '';

-- jobs_terminal_frozen refuses any update of a finished job, the backfill
-- included: drop it for the backfill and recreate it exactly as 0001 did.
DROP TRIGGER jobs_terminal_frozen;
UPDATE jobs SET instance_id = id;
CREATE TRIGGER jobs_terminal_frozen
BEFORE UPDATE ON jobs
WHEN OLD.status IN ('succeeded','failed','canceled')
BEGIN
    SELECT RAISE(ABORT, 'edgepipe: terminal job is immutable');
END;

-- ADD COLUMN needs a default for existing rows; this stands in for a NOT NULL
-- without one, so no writer can leave the id out.
CREATE TRIGGER jobs_instance_id_required
BEFORE INSERT ON jobs
WHEN NEW.instance_id = ''
BEGIN
    SELECT RAISE(ABORT, 'edgepipe: a job needs an instance id');
END;

-- Every tenant-facing lookup resolves (tenant, instance_id) through this
-- index, and it is what refuses a tenant's second job with the same id.
CREATE UNIQUE INDEX jobs_tenant_instance ON jobs (tenant, instance_id);

-- A tenant's listing pages by (created_at, instance_id) so that its cursor
-- carries the id the tenant knows; this replaces the (tenant, created_at, id)
-- index of 0001.
DROP INDEX jobs_tenant_created;
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, instance_id);
