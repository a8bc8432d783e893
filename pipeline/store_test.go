package pipeline_test

import (
	"slices"
	"testing"
	"time"

	"edgepipe/pipeline"
)

// A page is the first Limit jobs of the Limit+1 a store read; the cursor
// is the last one's, by instance id for a tenant and by internal key for
// the operators, and zero when nothing follows.
func TestListFilterPage(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_700_000_000_123)
	jobs := []pipeline.Job{
		{ID: "v1-c.t1", InstanceID: "v1-a", CreatedAt: at.Add(time.Second)},
		{ID: "v1-b.t1", InstanceID: "v1-b", CreatedAt: at},
		{ID: "v1-a.t1", InstanceID: "v1-c", CreatedAt: at},
	}
	tests := []struct {
		name     string
		f        pipeline.ListFilter
		n        int
		wantKeys []string
		want     pipeline.Cursor
	}{
		{"tenant, more follow", pipeline.ListFilter{Tenant: "acme", Limit: 2}, 3, []string{"v1-c.t1", "v1-b.t1"},
			pipeline.Cursor{CreatedAtMS: at.UnixMilli(), ID: "v1-b"}},
		{"operators, more follow", pipeline.ListFilter{AllTenants: true, Limit: 1}, 2, []string{"v1-c.t1"},
			pipeline.Cursor{CreatedAtMS: at.Add(time.Second).UnixMilli(), ID: "v1-c.t1"}},
		{"exactly a page", pipeline.ListFilter{Tenant: "acme", Limit: 3}, 3, []string{"v1-c.t1", "v1-b.t1", "v1-a.t1"}, pipeline.Cursor{}},
		{"short page", pipeline.ListFilter{AllTenants: true, Limit: 50}, 1, []string{"v1-c.t1"}, pipeline.Cursor{}},
		{"nothing", pipeline.ListFilter{Tenant: "acme", Limit: 50}, 0, nil, pipeline.Cursor{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			page, next := tt.f.Page(slices.Clone(jobs[:tt.n]))
			var keys []string
			for _, j := range page {
				keys = append(keys, j.ID)
			}
			if !slices.Equal(keys, tt.wantKeys) || next != tt.want {
				t.Errorf("page %v next %+v, want %v and %+v", keys, next, tt.wantKeys, tt.want)
			}
		})
	}
}
