-- Durable paid answers, the infrastructure-fault budget, and the bindings of
-- live processes (docs/design.md §4, §6).

-- A provider's answer is staged in the object store under a key of its own
-- (an asset of kind 'staged') the moment it arrives; the call row points at
-- it, so any later attempt on any machine reuses it instead of paying again.
ALTER TABLE provider_calls ADD COLUMN staged_key TEXT NOT NULL DEFAULT '';

-- Failures of edgepipe's own infrastructure (object store, database, local
-- disk) do not use up the job's attempts: infra_failures counts the attempts
-- that ended that way (subtracted from attempts before the retry limit is
-- applied), infra_since is when the current run of such failures began (the
-- infrastructure retry window is measured from it; NULL when the last
-- attempt ended otherwise).
ALTER TABLE jobs ADD COLUMN infra_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN infra_since INTEGER;

-- Which workflow versions each live process binds. A deployment's bindings
-- are the union over processes whose heartbeat is fresh; submission routes
-- against that union, so a restart of one process never dead-letters work
-- another process serves.
CREATE TABLE process_bindings (
    process_id   TEXT PRIMARY KEY,
    role         TEXT NOT NULL,               -- serve | worker
    versions     TEXT NOT NULL,               -- comma-separated, e.g. v1,v2
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
);
