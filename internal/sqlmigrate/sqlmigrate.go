// Package sqlmigrate loads a job-store driver's numbered SQL migrations
// (NNNN_name.sql, embedded with embed.FS). Each driver applies them in its
// own dialect and transaction; only the loading and its rules are shared.
package sqlmigrate

import (
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load reads every file of dir in fsys, refusing a name that is not
// NNNN_name.sql and numbering that is not 1..n without gaps. driver
// prefixes the errors ("sqlite", "postgres").
func Load(fsys fs.FS, dir, driver string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("%s: migration file %q is not named NNNN_name.sql", driver, name)
		}
		body, err := fs.ReadFile(fsys, dir+"/"+name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("%s: migrations must be numbered 1..n without gaps; found %s at position %d", driver, m.Name, i+1)
		}
	}
	return ms, nil
}
