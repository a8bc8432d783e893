package provider_test

import (
	"net/http"
	"testing"
	"time"

	"edgepipe/provider"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", provider.DefaultRetryAfter},
		{"   ", provider.DefaultRetryAfter},
		{"0", 0},
		{"1", time.Second},
		{" 7 ", 7 * time.Second},
		{"007", 7 * time.Second},
		{"600", 10 * time.Minute},
		{"601", provider.MaxRetryAfter},
		{"86400", provider.MaxRetryAfter},
		{"99999999999999999999999", provider.MaxRetryAfter},
		{"-1", provider.DefaultRetryAfter},
		{"+5", provider.DefaultRetryAfter},
		{"1.5", provider.DefaultRetryAfter},
		{"5s", provider.DefaultRetryAfter},
		{"soon", provider.DefaultRetryAfter},
		{"٣", provider.DefaultRetryAfter}, // Arabic-Indic digit three
		{date(30 * time.Second), 30 * time.Second},
		{date(0), 0},
		{date(-time.Hour), 0},
		{date(24 * time.Hour), provider.MaxRetryAfter},
		{now.Add(45 * time.Second).Format(time.RFC850), 45 * time.Second},
		{now.Add(2 * time.Minute).Format(time.ANSIC), 2 * time.Minute},
		{"Fri, 31 Dec 9999 23:59:59 GMT", provider.MaxRetryAfter},
		{"Mon, 01 Jan 0001 00:00:00 GMT", 0},
		{"Wed, 99 Foo 2030 07:08:09 GMT", provider.DefaultRetryAfter},
	}
	for _, tt := range tests {
		if got := provider.ParseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("ParseRetryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzParseRetryAfter: whatever a provider sends, the delay is within
// [0, MaxRetryAfter], and a value that is not a number or a date gives the
// default.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "5", "600", "601", "-1", "1.5", "99999999999999999999",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Wednesday, 21-Oct-15 07:28:00 GMT", "Wed Oct 21 07:28:00 2015", "soon"} {
		f.Add(s, int64(1_700_000_000))
	}
	f.Fuzz(func(t *testing.T, v string, unix int64) {
		now := time.Unix(unix%(1<<40), 0)
		d := provider.ParseRetryAfter(v, now)
		if d < 0 || d > provider.MaxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %s, outside [0, %s]", v, d, provider.MaxRetryAfter)
		}
		if d != provider.ParseRetryAfter(v, now) {
			t.Fatal("not deterministic")
		}
	})
}
