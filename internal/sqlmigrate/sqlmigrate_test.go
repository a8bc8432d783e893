package sqlmigrate

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	ok := fstest.MapFS{"m/0002_b.sql": {Data: []byte("B")}, "m/0001_a.sql": {Data: []byte("A")}}
	ms, err := Load(ok, "m", "x")
	if err != nil || len(ms) != 2 || ms[0].Name != "0001_a.sql" || ms[0].SQL != "A" || ms[1].Version != 2 {
		t.Fatalf("Load = %+v, %v", ms, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"badname": {"m/one.sql": {Data: []byte("A")}},
		"notsql":  {"m/0001_a.txt": {Data: []byte("A")}},
		"gap":     {"m/0001_a.sql": {Data: []byte("A")}, "m/0003_c.sql": {Data: []byte("C")}},
	} {
		if _, err := Load(fsys, "m", "x"); err == nil || !strings.HasPrefix(err.Error(), "x: ") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
