package postgres

import "edgepipe/pipeline"

// The consumers' interfaces this store implements. api.Store, check.Store,
// webhook.Store and api.QueueStats live in packages a driver does not
// import; storage/storetest asserts those for both drivers.
var (
	_ pipeline.Store            = (*Store)(nil)
	_ pipeline.PresenceStore    = (*Store)(nil)
	_ pipeline.SweepLedger      = (*Store)(nil)
	_ pipeline.DeadLetterPurger = (*Store)(nil)
	_ pipeline.RateLimitStore   = (*Store)(nil)
	_ pipeline.ProofStore       = (*Store)(nil)
)
