-- Every listing page is read in index order (ListJobs: created_at DESC,
-- then the id, newest first). The operators' listing across tenants had no
-- index in that order, and a status-filtered listing only the bare status
-- index: each page read and sorted every matching job — at 200,000 jobs
-- 140-185 ms a page, growing with the table. Postgres has had jobs_created
-- since its first migration.
--
-- The keys stop at created_at: a page sorts only the jobs that share one
-- created_at by id (SQLite's "temp b-tree for last term", cut short by the
-- LIMIT), and the narrower keys cost submissions less than (created_at,
-- id) did: every submission inserts into both indexes (bench api, one
-- window: 23.6% of bare echo with these, 22.3% with the wider keys, 24.5%
-- with neither). Claims and settles do not touch jobs_created.
CREATE INDEX jobs_created ON jobs (created_at);
-- The status index keeps serving /metrics' counts by status (it covers
-- them, as 0002's did), and now pages a status's jobs newest first too.
DROP INDEX jobs_status;
CREATE INDEX jobs_status ON jobs (status, created_at);
