package pipeline_test

import (
	"errors"
	"slices"
	"testing"

	"edgepipe/pipeline"
)

func TestTenantSlotsTake(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		max     int
		running map[string]int // absent: the count is not known now (lock held elsewhere)
		takes   []string
		want    []bool
		full    []string
	}{
		{"no limit never counts", 0, nil, []string{"a", "a", "a"}, []bool{true, true, true}, []string{}},
		{"limit 1, none running", 1, map[string]int{"a": 0, "b": 0}, []string{"a", "a", "b"}, []bool{true, false, true}, []string{"a", "b"}},
		{"limit 2, one running", 2, map[string]int{"a": 1}, []string{"a", "a"}, []bool{true, false}, []string{"a"}},
		{"over the limit already", 2, map[string]int{"a": 5}, []string{"a"}, []bool{false}, []string{"a"}},
		{"count unknown: no slot", 3, map[string]int{}, []string{"a", "a"}, []bool{false, false}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := pipeline.NewTenantSlots(tc.max)
			if s.Limited() != (tc.max > 0) {
				t.Fatalf("Limited() = %v with max %d", s.Limited(), tc.max)
			}
			counted := map[string]int{}
			for i, tenant := range tc.takes {
				ok, err := s.Take(tenant, func() (int, bool, error) {
					counted[tenant]++
					n, known := tc.running[tenant]
					return n, known, nil
				})
				if err != nil || ok != tc.want[i] {
					t.Fatalf("take %d (%s) = %v, %v; want %v", i, tenant, ok, err, tc.want[i])
				}
			}
			for tenant, n := range counted {
				if n != 1 {
					t.Errorf("%s counted %d times in one Fetch, want once", tenant, n)
				}
			}
			if got := s.Full(); got == nil || !slices.Equal(got, tc.full) {
				t.Errorf("Full() = %#v, want %v (never nil)", got, tc.full)
			}
		})
	}
	s := pipeline.NewTenantSlots(1)
	if _, err := s.Take("a", func() (int, bool, error) { return 0, false, boom }); !errors.Is(err, boom) {
		t.Fatalf("count error: %v", err)
	}
}

// FetchPages reads one page without a limit, and with one reads on past a
// page whose tenants ran out of slots, leaving them out of the next page.
func TestFetchPages(t *testing.T) {
	t.Parallel()
	type msg struct {
		id     int64
		tenant string
	}
	// Longer than any fetch wants: a page that read more than the claims
	// still wanted (Max less those made) would claim past Max.
	queue := []msg{{1, "a"}, {2, "a"}, {3, "a"}, {4, "b"}, {5, "a"}, {6, "c"}, {7, "d"}, {8, "e"}}
	for _, tc := range []struct {
		name      string
		max       int
		limit     int
		want      []int64
		wantPages int
	}{
		{"no limit: one page of max", 2, 0, []int64{1, 2}, 1},
		{"limit 1 reads past a", 3, 1, []int64{1, 4, 6}, 2},
		{"limit 1, max 1", 1, 1, []int64{1}, 1},
		{"limit 2", 4, 2, []int64{1, 2, 4, 6}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &pipeline.FetchParams{Max: tc.max, TenantMaxRunning: tc.limit}
			pages := 0
			claimed, err := pipeline.FetchPages(p, func(pg pipeline.FetchPage) ([]msg, error) {
				pages++
				if pg.Limit != tc.limit {
					t.Errorf("page limit %d, want %d", pg.Limit, tc.limit)
				}
				var out []msg
				for _, m := range queue {
					if m.id > pg.AfterID && !slices.Contains(pg.Full, m.tenant) && len(out) < pg.Want {
						out = append(out, m)
					}
				}
				return out, nil
			}, func(ms []msg, slots *pipeline.TenantSlots) ([]int64, error) {
				var ids []int64
				for _, m := range ms {
					ok, err := slots.Take(m.tenant, func() (int, bool, error) { return 0, true, nil })
					if err != nil {
						return ids, err
					}
					if ok {
						ids = append(ids, m.id)
					}
				}
				return ids, nil
			}, func(m msg) (int64, int64) { return 0, m.id })
			if err != nil || !slices.Equal(claimed, tc.want) || pages != tc.wantPages {
				t.Fatalf("claimed %v in %d pages, %v; want %v in %d", claimed, pages, err, tc.want, tc.wantPages)
			}
		})
	}
}
