-- Cheaper job updates (issue 15's burn-down against River): every claim
-- and every settle updates a job's status, and each paid for a PL/pgSQL
-- call. Only the trigger changes: no table is rewritten or scanned, and
-- the locks are held for as long as the catalog update takes.

-- The transition wall moves into the trigger's WHEN clause, which the
-- executor evaluates without calling a function; the function now only
-- raises, for a transition the table forbids. The list is 0001's, unchanged
-- (TestTriggerMatchesTransitionTable in storage/storetest keeps it equal to
-- pipeline.Transitions).
CREATE OR REPLACE FUNCTION edgepipe_jobs_status_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'edgepipe: invalid job status transition (% > %)', OLD.status, NEW.status
        USING ERRCODE = 'check_violation';
END $$;
DROP TRIGGER jobs_status_transition ON jobs;
CREATE TRIGGER jobs_status_transition BEFORE UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.status <> OLD.status AND (OLD.status || '>' || NEW.status) NOT IN (
        'pending>running', 'pending>canceled', 'pending>dead_lettered',
        'running>pending', 'running>retry_wait', 'running>needs_review', 'running>succeeded',
        'running>failed', 'running>canceled', 'running>dead_lettered',
        'retry_wait>running', 'retry_wait>canceled', 'retry_wait>dead_lettered',
        'needs_review>pending', 'needs_review>failed', 'needs_review>canceled',
        'dead_lettered>pending'))
    EXECUTE FUNCTION edgepipe_jobs_status_transition();

