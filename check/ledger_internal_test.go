package check

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"edgepipe/pipeline"
)

// The provider's ledger is compared per unit: a job's unit billed twice is
// a violation unless an operator waived one call; a probe's units
// (pipeline.ProbeUnitPrefix) belong to no job, whatever they cost, and a
// key the probe found not honoured must not fail every later check.
func TestCheckLedgerUnits(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"by_unit":{
			"j1/0":{"image":1,"speech":2},
			"j2/0":{"speech":2},
			"j3/1":{"video":1},
			"probe/ab12":{"image":2},
			"probe/ab12-control":{"image":1}}}`))
	}))
	t.Cleanup(srv.Close)
	var got []Violation
	waived := map[string]map[string]int{"j2/0": {pipeline.OpSpeech: 1}}
	if err := checkLedger(context.Background(), srv.URL, waived, func(v Violation) { got = append(got, v) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].JobID != "j1" || got[0].Kind != "ledger_billed_twice" || got[0].Invariant != 3 {
		t.Fatalf("violations %+v; want only j1's speech billed twice", got)
	}
}
