// Package jobstore names the set of interfaces a job store implements for
// edgepipe's consumers (the worker and stages, the sweeper, the API, the
// checker, the webhook dispatcher), so that the deployment's store
// (internal/app) and the conformance suite (storage/storetest) ask for
// the same set, written once.
package jobstore

import (
	"edgepipe/api"
	"edgepipe/check"
	"edgepipe/pipeline"
	"edgepipe/webhook"
)

// Consumers is every interface the consumers of a job store own; both
// drivers implement it.
type Consumers interface {
	pipeline.Store
	pipeline.SweepLedger
	pipeline.PresenceStore
	pipeline.DeadLetterPurger
	pipeline.RateLimitStore
	pipeline.ProofStore
	api.Store
	api.QueueStats
	check.Store
	webhook.Store
}
