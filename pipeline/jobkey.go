package pipeline

// JobKeySeparator joins a job's instance id to its tenant's hash in the
// internal job key. Instance ids never contain it (their grammar is
// A-Z a-z 0-9 _ -), so an internal key of a new job can never equal an
// instance id, nor the key of a job stored before ids became per tenant
// (whose key is its instance id).
const JobKeySeparator = ".t"

// jobKeyHashLen is how many hex digits of the tenant's hash a job key
// carries: 64 bits, so two tenants' hashes colliding is not a practical
// concern.
const jobKeyHashLen = 16

// JobKeySuffixLen is how many bytes JobKey appends to the instance id.
const JobKeySuffixLen = len(JobKeySeparator) + jobKeyHashLen

// JobKey is the internal key of the job that tenant submitted as
// instanceID (docs/design.md §3): the instance id, JobKeySeparator and a
// short hash of the tenant. Instance ids are unique per tenant only; the
// key is unique across tenants, is the same on every machine and driver,
// still starts with the instance id (so with its version prefix), and holds
// no tenant text. Units, calls, events, objects, queue messages, dead
// letters and webhooks reference a job by this key; a tenant never sees it.
func JobKey(tenant, instanceID string) string {
	return instanceID + JobKeySeparator + hashParts(keySchema, "job", tenant)[:jobKeyHashLen]
}
