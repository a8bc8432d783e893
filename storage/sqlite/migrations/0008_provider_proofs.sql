-- Proofs of idempotency (pipeline.Proof, issue 14): each `edgepipe
-- provider probe` appends one row; nothing is updated or deleted, so the
-- history of a provider's answers stays readable. An idempotent_verified
-- operation trusts only the latest row of its (provider, op, model,
-- endpoint): the last recorded (the greatest id), whatever the probing
-- host's clock said.
CREATE TABLE provider_proofs (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    provider  TEXT    NOT NULL CHECK (provider <> ''),
    op        TEXT    NOT NULL CHECK (op <> ''),
    model     TEXT    NOT NULL CHECK (model <> ''),
    endpoint  TEXT    NOT NULL CHECK (endpoint <> ''), -- where the probe sent its requests
    verdict   TEXT    NOT NULL CHECK (verdict IN ('idempotent','not_idempotent')),
    calls     INTEGER NOT NULL CHECK (calls >= 0), -- billable requests the probe sent
    detail    TEXT    NOT NULL DEFAULT '',
    proved_at INTEGER NOT NULL                     -- unix ms
);
-- The latest proof of a key is the first entry of its range.
CREATE INDEX provider_proofs_latest ON provider_proofs (provider, op, model, endpoint, id DESC);
