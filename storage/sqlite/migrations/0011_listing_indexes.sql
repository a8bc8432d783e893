-- Every listing page is read in index order (ListJobs: created_at DESC,
-- then the id, newest first). The operators' listing across tenants had no
-- index in that order, and a status-filtered listing only the bare status
-- index: each page read and sorted every matching job — at 200,000 jobs a
-- page of the operators' listing took 0.4-0.7 s, a status-filtered one as
-- long, and both grow with the table. Postgres has had jobs_created since
-- its first migration.
CREATE INDEX jobs_created ON jobs (created_at, id);
-- The status index keeps serving /metrics' counts by status (it covers
-- them, as 0002's did), and now pages a status's jobs newest first too.
DROP INDEX jobs_status;
CREATE INDEX jobs_status ON jobs (status, created_at, id);
