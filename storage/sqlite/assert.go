package sqlite

import "edgepipe/pipeline"

var (
	_ pipeline.Store         = (*Store)(nil)
	_ pipeline.PresenceStore = (*Store)(nil)
	_ pipeline.SweepLedger   = (*Store)(nil)
)

var _ pipeline.RateLimitStore = (*Store)(nil)

var _ pipeline.ProofStore = (*Store)(nil)
