-- /metrics counts jobs by status and possibly billed provider calls by
-- operation on every scrape. Without these both were full table scans, and a
-- jobs row carries the whole frozen input; with them each count reads a
-- small covering index.
CREATE INDEX jobs_status ON jobs (status);
CREATE INDEX provider_calls_status_op ON provider_calls (status, operation);
