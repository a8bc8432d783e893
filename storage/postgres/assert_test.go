package postgres

import (
	"edgepipe/api"
	"edgepipe/check"
	"edgepipe/webhook"
)

// The interfaces owned by packages a driver does not import outside tests.
var (
	_ api.Store      = (*Store)(nil)
	_ api.QueueStats = (*Store)(nil)
	_ api.Presence   = (*Store)(nil)
	_ check.Store    = (*Store)(nil)
	_ webhook.Store  = (*Store)(nil)
)
