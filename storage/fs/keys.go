package fs

import "edgepipe/pipeline"

// The key rule is pipeline.ValidateObjectKey's, shared by every backend.
const (
	MaxKeyLen          = pipeline.MaxObjectKeyLen
	MaxSegmentLen      = pipeline.MaxObjectSegmentLen
	MaxContentTypeLen  = pipeline.MaxContentTypeLen
	DefaultContentType = pipeline.DefaultContentType
)

// ValidateKey reports whether key is acceptable; the error matches
// pipeline.ErrInvalidInput.
func ValidateKey(key string) error { return pipeline.ValidateObjectKey(key) }

func validatePrefix(prefix string) error { return pipeline.ValidateObjectPrefix(prefix) }

func contentType(ct string) (string, error) { return pipeline.ObjectContentType(ct) }
