package pipeline

// JobStory is everything the job store holds about one job, read at one
// moment: the job row, its event log, its provider-call audit trail, its
// stored objects and the claims still open on object keys. The operator's
// job page (api: GET /admin/jobs/{id}) is built from it; attempts and
// decisions are reconstructed from the events by the reader.
type JobStory struct {
	Job    Job
	Events []Event // oldest first, at most JobStoryParams.MaxEvents
	// MoreEvents reports that the job has more events than were read.
	MoreEvents bool
	Calls      []ProviderCall // in the order they were made
	Assets     []Asset        // by key
	Claims     []ObjectClaim  // open claims on object keys, by key
}

// JobStoryParams are JobStory's: the job by its store key (jobs.id), and
// how many of its events to read at most.
type JobStoryParams struct {
	JobID string
	// MaxEvents bounds the events read (default DefaultStoryEvents).
	MaxEvents int
}

// DefaultStoryEvents is JobStoryParams.MaxEvents's default.
const DefaultStoryEvents = 2000
