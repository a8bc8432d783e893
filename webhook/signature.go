package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header names set on every delivery.
const (
	// SignatureHeader carries "t=<unix>,v1=<hex hmac>".
	SignatureHeader = "Edgepipe-Signature"
	// DeliveryHeader is the outbox row id: the same across retries of one
	// delivery, so receivers can deduplicate on it.
	DeliveryHeader = "Edgepipe-Delivery"
	// AttemptHeader is the 1-based attempt number of this request.
	AttemptHeader = "Edgepipe-Attempt"
)

// DefaultTolerance is how far a signature's timestamp may be from the
// receiver's clock when Verify is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// ErrInvalidSignature is matched by every error Verify returns.
var ErrInvalidSignature = errors.New("webhook: invalid signature")

// Sign returns the SignatureHeader value for body sent at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := t.Unix()
	return "t=" + strconv.FormatInt(ts, 10) + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(strconv.FormatInt(ts, 10)))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a SignatureHeader value against body: the timestamp must be
// within tolerance of now (DefaultTolerance when tolerance <= 0), and one of
// the v1 signatures must be the HMAC of "<t>.<body>" under secret. Several
// v1 entries are allowed so that a secret can be rotated; unknown keys are
// ignored so that a later scheme can be added alongside. Errors match
// ErrInvalidSignature.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret configured", ErrInvalidSignature)
	}
	if header == "" {
		return fmt.Errorf("%w: missing %s header", ErrInvalidSignature, SignatureHeader)
	}
	var (
		ts    int64
		haveT bool
		sigs  [][]byte
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%w: malformed header", ErrInvalidSignature)
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || haveT || n < 0 {
				return fmt.Errorf("%w: malformed timestamp", ErrInvalidSignature)
			}
			ts, haveT = n, true
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return fmt.Errorf("%w: malformed v1 signature", ErrInvalidSignature)
			}
			sigs = append(sigs, b)
		}
	}
	if !haveT || len(sigs) == 0 {
		return fmt.Errorf("%w: header needs t= and v1=", ErrInvalidSignature)
	}
	// Compare in seconds without converting to time.Duration, which would
	// overflow for absurd timestamps.
	age := now.Unix() - ts
	if age < 0 {
		age = -age
	}
	if age > int64(tolerance/time.Second) {
		return fmt.Errorf("%w: timestamp is %d s away from now (tolerance %s)", ErrInvalidSignature, age, tolerance)
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no signature matches", ErrInvalidSignature)
}
