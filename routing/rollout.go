package routing

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"

	"edgepipe/pipeline"
)

// EnvRolloutPercent names the variable holding the share of new ids that get
// the v2 prefix.
const EnvRolloutPercent = "WORKFLOW_V2_ROLLOUT_PERCENT"

// Buckets is the number of rollout buckets; one bucket is one percent.
const Buckets = 100

// ParseRolloutPercent reads WORKFLOW_V2_ROLLOUT_PERCENT. "" means 0, so
// deploying code moves no traffic. Otherwise the value must be a plain
// decimal integer from 0 to 100: no sign, no spaces, no fraction and no
// leading zero (050 could be read as octal 40, and a rollout knob must not be
// open to two readings). Errors wrap pipeline.ErrInvalidInput and name the
// variable.
func ParseRolloutPercent(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	bad := func() (int, error) {
		return 0, fmt.Errorf("%w: %s=%q: must be a whole number from 0 to 100 (empty means 0)",
			pipeline.ErrInvalidInput, EnvRolloutPercent, clip(s))
	}
	if len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return bad()
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return bad()
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > 100 {
		return bad()
	}
	return n, nil
}

// bucketDomain separates this hash from every other SHA-256 in edgepipe (the
// request fingerprint in particular).
const bucketDomain = "edgepipe/routing/bucket/v1"

// Bucket places (tenant, idempotencyKey) in one of Buckets buckets, [0, 100).
//
// The result is stable across releases and platforms: it is the first 8
// bytes, big-endian, of SHA-256(domain ‖ len(tenant) ‖ tenant ‖ len(key) ‖
// key) modulo 100, where domain is the string "edgepipe/routing/bucket/v1"
// with its own length prefix and every length is a big-endian uint64. The
// length prefixes keep ("a", "bc") and ("ab", "c") apart. Changing any of this
// would move logical requests between versions, so the golden test pins it.
// The modulo bias (2^64 is not a multiple of 100) is below 1e-17.
func Bucket(tenant, idempotencyKey string) int {
	h := sha256.New()
	for _, part := range [...]string{bucketDomain, tenant, idempotencyKey} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	sum := h.Sum(nil)
	return int(binary.BigEndian.Uint64(sum[:8]) % Buckets)
}

// VersionForBucket is the version of a new id in bucket at the given rollout
// percentage: V2 when bucket < percent, V1 otherwise. Raising percent only
// turns buckets from V1 to V2, never back.
func VersionForBucket(bucket, percent int) string {
	if bucket < percent {
		return V2
	}
	return V1
}
