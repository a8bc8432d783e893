// Package sqlcols holds the column-list helpers both job-store drivers
// (storage/sqlite, storage/postgres) build their SQL with, so the two
// dialects cannot drift apart on how a list of columns is written.
package sqlcols

// Prefixed qualifies every column of a comma-separated list with p (for
// example "c." for a table alias): "id, status" becomes "c.id, c.status".
// Whitespace after each comma is kept as it is.
func Prefixed(p, cols string) string {
	out := make([]byte, 0, len(cols)+16*len(p))
	start := true
	for i := 0; i < len(cols); i++ {
		c := cols[i]
		if start && c != ' ' && c != '\t' && c != '\n' {
			out = append(out, p...)
			start = false
		}
		out = append(out, c)
		if c == ',' {
			start = true
		}
	}
	return string(out)
}
