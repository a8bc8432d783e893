-- Operator decisions recorded on the job, dead letters that can be
-- discarded (issue 12, items 9 and 10).

-- The last operator decision on a job in needs_review: what, who, why and
-- when. The decision event in job_events stays the audit trail; these
-- columns let the job resource show it without reading the history.
-- Written while the job is still needs_review, before it settles.
ALTER TABLE jobs ADD COLUMN decision        TEXT NOT NULL DEFAULT '' CHECK (decision IN ('','retry','fail'));
ALTER TABLE jobs ADD COLUMN decided_by      TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN decision_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN decided_at      INTEGER;

-- A discarded dead letter is settled without a redrive: its job stays
-- dead_lettered (terminal stays terminal), the dead letter leaves the open
-- list. A dead letter is redriven or discarded, never both.
ALTER TABLE dead_letters ADD COLUMN discarded_at   INTEGER;
ALTER TABLE dead_letters ADD COLUMN discarded_by   TEXT NOT NULL DEFAULT '';
ALTER TABLE dead_letters ADD COLUMN discard_reason TEXT NOT NULL DEFAULT '';

CREATE TRIGGER dead_letters_settled_once
BEFORE UPDATE ON dead_letters
WHEN (OLD.redriven_at IS NOT NULL OR OLD.discarded_at IS NOT NULL)
  AND (NEW.redriven_at IS NOT OLD.redriven_at OR NEW.discarded_at IS NOT OLD.discarded_at)
BEGIN
    SELECT RAISE(ABORT, 'edgepipe: a settled dead letter stays settled');
END;

-- Open dead letters (neither redriven nor discarded), newest first; the
-- retention sweep finds settled ones by when they settled.
CREATE INDEX dead_letters_unsettled ON dead_letters (id) WHERE redriven_at IS NULL AND discarded_at IS NULL;
CREATE INDEX dead_letters_redriven_at ON dead_letters (redriven_at) WHERE redriven_at IS NOT NULL;
CREATE INDEX dead_letters_discarded_at ON dead_letters (discarded_at) WHERE discarded_at IS NOT NULL;

-- The operations page lists the latest decisions.
CREATE INDEX jobs_decided ON jobs (decided_at) WHERE decided_at IS NOT NULL;
