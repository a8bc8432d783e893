package webhook

import (
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSignVerifyRoundTrip(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec-0123456789abcdef")
	body := []byte(`{"job_id":"v1-abc","status":"succeeded"}`)
	now := time.Unix(1_800_000_000, 0)
	h := Sign(secret, now, body)
	if !strings.HasPrefix(h, "t=1800000000,v1=") || len(h) != len("t=1800000000,v1=")+64 {
		t.Fatalf("header %q", h)
	}
	if err := Verify(secret, h, body, now.Add(time.Minute), 0); err != nil {
		t.Fatalf("round trip: %v", err)
	}
	// Rotation: the old and the new secret's signatures side by side.
	newSecret := []byte("whsec-rotated-9876543210")
	both := h + ",v1=" + strings.TrimPrefix(Sign(newSecret, now, body), "t=1800000000,v1=")
	for _, s := range [][]byte{secret, newSecret} {
		if err := Verify(s, both, body, now, 0); err != nil {
			t.Fatalf("rotated header with %s: %v", s, err)
		}
	}

	bad := []struct {
		name   string
		secret []byte
		header string
		body   []byte
		now    time.Time
		tol    time.Duration
	}{
		{"tampered body", secret, h, []byte(`{"job_id":"v1-abc","status":"failed"}`), now, 0},
		{"wrong secret", []byte("another-secret-0000"), h, body, now, 0},
		{"no secret", nil, h, body, now, 0},
		{"too old", secret, h, body, now.Add(DefaultTolerance + time.Second), 0},
		{"from the future", secret, h, body, now.Add(-DefaultTolerance - time.Second), 0},
		{"tight tolerance", secret, h, body, now.Add(2 * time.Second), time.Second},
		{"empty header", secret, "", body, now, 0},
		{"no signature", secret, "t=1800000000", body, now, 0},
		{"no timestamp", secret, strings.TrimPrefix(h, "t=1800000000,"), body, now, 0},
		{"two timestamps", secret, "t=1800000000," + h, body, now, 0},
		{"bad timestamp", secret, strings.Replace(h, "t=1800000000", "t=18e8", 1), body, now, 0},
		{"short signature", secret, h[:len(h)-2], body, now, 0},
		{"not hex", secret, h[:len(h)-1] + "z", body, now, 0},
		{"garbage", secret, "hello", body, now, 0},
		{"signature for another time", secret, strings.Replace(h, "t=1800000000", "t=1800000001", 1), body, now, 0},
		{"huge timestamp", secret, strings.Replace(h, "t=1800000000", "t=9223372036854775807", 1), body, now, 0},
	}
	for _, tc := range bad {
		if err := Verify(tc.secret, tc.header, tc.body, tc.now, tc.tol); !errors.Is(err, ErrInvalidSignature) {
			t.Errorf("%s: Verify = %v, want ErrInvalidSignature", tc.name, err)
		}
	}
	// Unknown schemes next to v1 are ignored (forward compatibility).
	if err := Verify(secret, h+",v9=whatever", body, now, 0); err != nil {
		t.Fatalf("unknown scheme: %v", err)
	}
}

// FuzzVerify: Verify never panics, and it accepts a header only if the
// header carries the true HMAC for its own timestamp.
func FuzzVerify(f *testing.F) {
	secret := []byte("whsec-0123456789abcdef")
	f.Add(Sign(secret, time.Unix(1_800_000_000, 0), []byte("{}")), []byte("{}"), int64(1_800_000_000))
	f.Add("t=,v1=,,==", []byte(""), int64(0))
	f.Add("t=-5,v1=00", []byte("x"), int64(-5))
	f.Fuzz(func(t *testing.T, header string, body []byte, now int64) {
		if Verify(secret, header, body, time.Unix(now, 0), 0) != nil {
			return
		}
		var ts int64
		for part := range strings.SplitSeq(header, ",") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("accepted an unparsable timestamp: %q", header)
				}
				ts = n
			}
		}
		want := "v1=" + hex.EncodeToString(mac(secret, ts, body))
		if !strings.Contains(strings.ToLower(header), want) {
			t.Fatalf("accepted %q without the true signature %s", header, want)
		}
	})
}
