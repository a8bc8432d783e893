package pipeline

import (
	"math"
	"slices"
)

// TenantSlots keeps, during one Fetch, how many more jobs each tenant may
// have running under FetchParams.TenantMaxRunning. The job stores share it
// so that both decide alike; each reads the running count its own way.
type TenantSlots struct {
	max  int
	left map[string]int
}

// NewTenantSlots returns the slots of a Fetch with TenantMaxRunning max (0:
// no limit).
func NewTenantSlots(max int) *TenantSlots {
	return &TenantSlots{max: max, left: map[string]int{}}
}

// Limited reports whether a limit applies.
func (s *TenantSlots) Limited() bool { return s.max > 0 }

// Take reserves a slot for one more job of tenant. running, called once per
// tenant and Fetch, returns the tenant's jobs running with a live lease as
// the claim transaction sees them, or ok false when it cannot know them now
// (another claimer is counting the same tenant): the tenant then gets no
// slot in this Fetch.
func (s *TenantSlots) Take(tenant string, running func() (n int, ok bool, err error)) (bool, error) {
	if s.max <= 0 {
		return true, nil
	}
	left, seen := s.left[tenant]
	if !seen {
		n, ok, err := running()
		if err != nil {
			return false, err
		}
		left = 0
		if ok {
			left = max(s.max-n, 0)
		}
	}
	if left == 0 {
		s.left[tenant] = 0
		return false, nil
	}
	s.left[tenant] = left - 1
	return true, nil
}

// Full lists, sorted, the tenants that can get no more slots in this
// Fetch: the next page of candidates leaves their messages out.
func (s *TenantSlots) Full() []string {
	out := []string{} // never nil: a NULL list would leave every message out
	for t, n := range s.left {
		if n == 0 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// maxFetchPages bounds the pages of candidates one Fetch reads when a
// tenant limit leaves some of them on the queue.
const maxFetchPages = 16

// FetchPage selects one page of a Fetch's candidates: up to Want visible
// messages of the queue after (AfterAt, AfterID) in (visible_at, message
// id) order, leaving out the tenants in Full and, when Limit is positive,
// every tenant that already has Limit jobs running with a live lease (an
// early cut; TenantSlots decides).
type FetchPage struct {
	Want             int
	AfterAt, AfterID int64
	Full             []string
	Limit            int
}

// FetchPages is a Fetch's reading loop, the same for every job store: read
// reads a page of candidates, triage picks the jobs to claim among them
// (taking each from the Fetch's TenantSlots), and pos gives a candidate's
// (visible_at, message id). It returns every claim triage made. Without a
// tenant limit it reads one page of p.Max, as before the limit existed.
// With one, a page whose tenants ran out of slots yields fewer claims, so
// the loop reads on past it, leaving those tenants out: another tenant's
// ready job is claimed even when the first ready messages all belong to a
// saturated tenant. It stops at p.Max claims, at the end of the queue, or
// after maxFetchPages pages.
func FetchPages[C, A any](p *FetchParams, read func(FetchPage) ([]C, error),
	triage func([]C, *TenantSlots) ([]A, error), pos func(C) (at, id int64)) ([]A, error) {
	slots := NewTenantSlots(p.TenantMaxRunning)
	pg := FetchPage{AfterAt: math.MinInt64, Limit: p.TenantMaxRunning}
	var claims []A
	for range maxFetchPages {
		pg.Want, pg.Full = p.Max-len(claims), slots.Full()
		cands, err := read(pg)
		if err != nil {
			return claims, err
		}
		more, err := triage(cands, slots)
		claims = append(claims, more...)
		if err != nil {
			return claims, err
		}
		if !slots.Limited() || len(cands) < pg.Want || len(claims) >= p.Max {
			return claims, nil
		}
		pg.AfterAt, pg.AfterID = pos(cands[len(cands)-1])
	}
	return claims, nil
}
