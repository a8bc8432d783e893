-- EDGEPIPE_TENANT_MAX_RUNNING (docs/design.md §5): a claim counts a
-- tenant's jobs running with a live lease. Running jobs are few (at most the
-- workers' slots plus expired leases), so this partial index keeps the count
-- a short range read however many jobs a tenant has.
CREATE INDEX jobs_tenant_running ON jobs (tenant, lease_expires_at) WHERE status = 'running';
