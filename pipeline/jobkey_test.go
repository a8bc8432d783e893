package pipeline_test

import (
	"strings"
	"testing"

	"edgepipe/pipeline"
)

// JobKey is fixed across machines and drivers (the Postgres driver and
// any other implementation must produce these exact keys): the instance
// id, ".t", and the first 16 hex digits of
// SHA-256("16:edgepipe-keys-v1" "3:job" "<len(tenant)>:<tenant>").
func TestJobKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ tenant, id, want string }{
		{"acme", "v2-abc", "v2-abc.t2d45977e49a75f92"},
		{"globex", "v2-abc", "v2-abc.t4d11a1610a677589"},
	} {
		if got := pipeline.JobKey(tc.tenant, tc.id); got != tc.want {
			t.Errorf("JobKey(%q, %q) = %q, want %q", tc.tenant, tc.id, got, tc.want)
		}
	}
	const id = "v1-invoice-2026-0043"
	seen := map[string]string{}
	for _, tenant := range []string{"alice", "bob", "alice-corp", "zed", ""} {
		k := pipeline.JobKey(tenant, id)
		if !strings.HasPrefix(k, id+pipeline.JobKeySeparator) || len(k) != len(id)+pipeline.JobKeySuffixLen {
			t.Errorf("%s's key %q does not start with the instance id and the separator, or has another length", tenant, k)
		}
		if tenant != "" && strings.Contains(k[len(id):], tenant) {
			t.Errorf("%s's key %q holds the tenant's name", tenant, k)
		}
		if other, dup := seen[k]; dup {
			t.Errorf("tenants %q and %q share the key %q", other, tenant, k)
		}
		seen[k] = tenant
		if again := pipeline.JobKey(tenant, id); again != k {
			t.Errorf("JobKey is not deterministic: %q then %q", k, again)
		}
	}
}
