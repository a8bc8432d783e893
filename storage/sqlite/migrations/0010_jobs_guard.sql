-- One cheaper guard on jobs (issue 16, the burn-down). Every update of a
-- job ran two BEFORE UPDATE triggers, jobs_status_transition (0001) and
-- jobs_terminal_frozen (0005), each a sub-program of its own, and each IN
-- list of constants in them built a temporary index on every run: a job's
-- claim and settle paid for four sub-programs and four such indexes. This
-- trigger refuses exactly what the two did, in one sub-program comparing
-- strings. A terminal job is refused first, as before (the later trigger
-- fired first).
DROP TRIGGER jobs_status_transition;
DROP TRIGGER jobs_terminal_frozen;

-- The transition table of pipeline.Transitions, as the set of statuses
-- each status may move to (TestTriggerMatchesTransitionTable keeps the two
-- equal). A status may stay the same (progress updates, lease takeover).
CREATE TRIGGER jobs_guard
BEFORE UPDATE ON jobs
WHEN OLD.status = 'succeeded' OR OLD.status = 'failed' OR OLD.status = 'canceled'
  OR (NEW.status <> OLD.status AND instr(CASE OLD.status
        WHEN 'pending'       THEN ',running,canceled,dead_lettered,'
        WHEN 'running'       THEN ',pending,retry_wait,needs_review,succeeded,failed,canceled,dead_lettered,'
        WHEN 'retry_wait'    THEN ',running,canceled,dead_lettered,'
        WHEN 'needs_review'  THEN ',pending,failed,canceled,'
        WHEN 'dead_lettered' THEN ',pending,'
        ELSE '' END, ',' || NEW.status || ',') = 0)
BEGIN
    -- A finished job keeps its attempt history as it was.
    SELECT RAISE(ABORT, 'edgepipe: terminal job is immutable')
    WHERE OLD.status = 'succeeded' OR OLD.status = 'failed' OR OLD.status = 'canceled';
    SELECT RAISE(ABORT, 'edgepipe: invalid job status transition');
END;
