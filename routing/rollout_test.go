package routing

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"edgepipe/pipeline"
)

func TestParseRolloutPercent(t *testing.T) {
	t.Parallel()
	valid := map[string]int{"": 0, "0": 0, "1": 1, "5": 5, "37": 37, "99": 99, "100": 100}
	for s, want := range valid {
		got, err := ParseRolloutPercent(s)
		if err != nil || got != want {
			t.Errorf("ParseRolloutPercent(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	invalid := []string{
		"abc", "101", "-1", "-0", "+5", "50.5", "5.0", " 5", "5 ", "1e2", "0x10", "050", "00", "007",
		"1000", "99999999999999999999999", "٥", "5%", "fifty", "\x00", "100\n",
	}
	for _, s := range invalid {
		got, err := ParseRolloutPercent(s)
		if err == nil {
			t.Errorf("ParseRolloutPercent(%q) = %d, want an error", s, got)
			continue
		}
		if !errors.Is(err, pipeline.ErrInvalidInput) {
			t.Errorf("ParseRolloutPercent(%q) error %v does not wrap ErrInvalidInput", s, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "WORKFLOW_V2_ROLLOUT_PERCENT") || !strings.Contains(msg, "0 to 100") {
			t.Errorf("ParseRolloutPercent(%q) error %q must name the variable and the range", s, msg)
		}
		if got != 0 {
			t.Errorf("ParseRolloutPercent(%q) returned %d with an error", s, got)
		}
	}
}

// The golden values were computed outside Go (Python hashlib) from the
// encoding documented on Bucket. If this fails, the hash changed and logical
// requests would move between versions: do not update the file, revert.
func TestBucketGolden(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/bucket_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden []struct {
		Tenant, Key string
		Bucket      int
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden) < 8 {
		t.Fatalf("golden table has %d rows, want at least 8", len(golden))
	}
	for _, g := range golden {
		if got := Bucket(g.Tenant, g.Key); got != g.Bucket {
			t.Errorf("Bucket(%q, %q) = %d, golden %d", g.Tenant, g.Key, got, g.Bucket)
		}
	}
}

func TestBucketLengthPrefixed(t *testing.T) {
	t.Parallel()
	// A plain concatenation would make these pairs equal. With 100 buckets a
	// single pair could collide by chance, so several pairs must not all do.
	pairs := [][2][2]string{
		{{"a", "bc"}, {"ab", "c"}},
		{{"tenant", "key"}, {"tenantk", "ey"}},
		{{"", "abc"}, {"abc", ""}},
		{{"x", "yz1"}, {"xy", "z1"}},
		{{"acme", "order-1"}, {"acmeorder-1", ""}},
	}
	same := 0
	for _, p := range pairs {
		if Bucket(p[0][0], p[0][1]) == Bucket(p[1][0], p[1][1]) {
			same++
		}
	}
	if same == len(pairs) {
		t.Fatalf("all %d split-point pairs share a bucket: tenant and key are not length-prefixed", same)
	}
}

func TestBucketRangeAndStability(t *testing.T) {
	t.Parallel()
	for i := range 2000 {
		tenant, key := fmt.Sprintf("t%d", i%7), fmt.Sprintf("k-%d", i)
		b := Bucket(tenant, key)
		if b < 0 || b >= Buckets {
			t.Fatalf("Bucket(%q, %q) = %d, out of [0,100)", tenant, key, b)
		}
		if again := Bucket(tenant, key); again != b {
			t.Fatalf("Bucket(%q, %q) = %d then %d", tenant, key, b, again)
		}
	}
}

func TestRolloutMonotonicAndShare(t *testing.T) {
	t.Parallel()
	const n = 10000
	buckets := make([]int, n)
	for i := range buckets {
		buckets[i] = Bucket("tenant-"+fmt.Sprint(i%13), fmt.Sprintf("idem-%05d", i))
	}
	prev := make([]string, n)
	for pct := 0; pct <= 100; pct++ {
		v2 := 0
		for i, b := range buckets {
			v := VersionForBucket(b, pct)
			if prev[i] == V2 && v != V2 {
				t.Fatalf("raising the rollout to %d%% moved key %d from v2 back to %s", pct, i, v)
			}
			prev[i] = v
			if v == V2 {
				v2++
			}
		}
		switch pct {
		case 0:
			if v2 != 0 {
				t.Errorf("rollout 0%%: %d keys on v2, want 0", v2)
			}
		case 37:
			if share := float64(v2) / n * 100; share < 34 || share > 40 {
				t.Errorf("rollout 37%%: v2 share %.2f%%, want 37±3%%", share)
			} else {
				t.Logf("rollout 37%%: v2 share %.2f%% of %d keys", share, n)
			}
		case 100:
			if v2 != n {
				t.Errorf("rollout 100%%: %d of %d keys on v2, want all", v2, n)
			}
		}
	}
}

func TestRouterVersionForIsStable(t *testing.T) {
	t.Parallel()
	r, err := NewRouter(Config{RolloutPercent: 37})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		key := fmt.Sprintf("k%d", i)
		first := r.VersionFor("acme", key)
		for range 3 {
			if got := r.VersionFor("acme", key); got != first {
				t.Fatalf("VersionFor(acme, %s) = %s then %s", key, first, got)
			}
		}
		id, err := r.NewID("acme", key, "job"+fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(id, first+"-") {
			t.Fatalf("NewID = %q, want prefix %s-", id, first)
		}
	}
}
