package sqlite

import "edgepipe/pipeline"

var _ pipeline.Store = (*Store)(nil)
