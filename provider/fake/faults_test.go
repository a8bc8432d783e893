package fake

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseFaultsValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec string
		want Faults
	}{
		{"", Faults{}},
		{"   ", Faults{}},
		{"image:before_commit=0.2", Faults{Image: OpFaults{BeforeCommit: 0.2}}},
		{
			"image:before_commit=0.2,speech:after_commit=0.1,speech:drop=0.05,video:async_fail=0.1",
			Faults{Image: OpFaults{BeforeCommit: 0.2}, Speech: OpFaults{AfterCommit: 0.1, Drop: 0.05}, Video: OpFaults{AsyncFail: 0.1}},
		},
		{
			"*:latency=50ms@0.3",
			Faults{
				Image:  OpFaults{Latency: 50 * time.Millisecond, LatencyP: 0.3},
				Speech: OpFaults{Latency: 50 * time.Millisecond, LatencyP: 0.3},
				Video:  OpFaults{Latency: 50 * time.Millisecond, LatencyP: 0.3},
			},
		},
		{"speech:latency=200ms", Faults{Speech: OpFaults{Latency: 200 * time.Millisecond, LatencyP: 1}}},
		{"*:rate_limit=0.05", Faults{Image: OpFaults{RateLimit: 0.05}, Speech: OpFaults{RateLimit: 0.05}, Video: OpFaults{RateLimit: 0.05}}},
		{"video:rate_limit=5s@1", Faults{Video: OpFaults{RateLimit: 1, RetryAfter: 5 * time.Second}}},
		{" image : drop = 1 , speech:drop=0 ", Faults{Image: OpFaults{Drop: 1}}},
		// Later entries override earlier ones for the same op and kind.
		{"*:drop=0.1,image:drop=0", Faults{Speech: OpFaults{Drop: 0.1}, Video: OpFaults{Drop: 0.1}}},
		{"image:drop=0.5,*:drop=0.25", Faults{Image: OpFaults{Drop: 0.25}, Speech: OpFaults{Drop: 0.25}, Video: OpFaults{Drop: 0.25}}},
		// Turning a kind off zeroes both of its numbers, so String round-trips.
		{"image:latency=0", Faults{}},
		{"image:latency=1s@0", Faults{}},
		{"image:rate_limit=3s@0", Faults{}},
		{"image:after_commit=1e-3", Faults{Image: OpFaults{AfterCommit: 0.001}}},
		{"image:after_commit=-0", Faults{}},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFaults(tt.spec)
			if err != nil {
				t.Fatalf("ParseFaults(%q): %v", tt.spec, err)
			}
			if got != tt.want {
				t.Fatalf("ParseFaults(%q)\n got %+v\nwant %+v", tt.spec, got, tt.want)
			}
			again, err := ParseFaults(got.String())
			if err != nil || again != got {
				t.Fatalf("round trip via %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestParseFaultsInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec      string
		entry     int
		wantInErr string
	}{
		{"image", 1, "missing ':'"},
		{"image:drop", 1, "missing '='"},
		{"img:drop=0.1", 1, `unknown operation "img"`},
		{"image:explode=0.1", 1, `unknown fault kind "explode"`},
		{"image:drop=0.1,", 2, "empty entry"},
		{",image:drop=0.1", 1, "empty entry"},
		{"image:drop=abc", 1, `probability "abc" is not a number`},
		{"image:drop=1.5", 1, "outside [0,1]"},
		{"image:drop=-0.1", 1, "outside [0,1]"},
		{"image:drop=NaN", 1, "outside [0,1]"},
		{"image:drop=Inf", 1, "outside [0,1]"},
		{"image:drop=0.1,image:drop=0.2", 2, "image:drop is given more than once"},
		{"image:async_fail=0.1", 1, "async_fail applies only to video"},
		{"*:async_fail=0.1", 1, "async_fail applies only to video"},
		{"image:latency=fast@0.1", 1, `duration "fast" is not valid`},
		{"image:latency=-5ms@0.1", 1, "negative"},
		{"image:latency=50ms@2", 1, "outside [0,1]"},
		{"image:latency=11m", 1, "exceeds the maximum"},
		{"image:rate_limit=1500ms@0.1", 1, "whole number of seconds"},
		{"image:rate_limit=0s@0.1", 1, "whole number of seconds"},
		{"image:rate_limit=2h@0.1", 1, "exceeds the maximum"},
		{"image:rate_limit=1s", 1, `probability "1s" is not a number`},
		{"image:drop=0.1\nspeech:drop=0.1", 1, "not a number"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			t.Parallel()
			_, err := ParseFaults(tt.spec)
			if err == nil {
				t.Fatalf("ParseFaults(%q) succeeded, want an error containing %q", tt.spec, tt.wantInErr)
			}
			if !errors.Is(err, ErrInvalidFaults) {
				t.Errorf("error %v does not match ErrInvalidFaults", err)
			}
			var fe *FaultSpecError
			if !errors.As(err, &fe) || fe.Entry != tt.entry {
				t.Errorf("error %v: want *FaultSpecError for entry %d", err, tt.entry)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.wantInErr) || strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error %q: want one line containing %q", msg, tt.wantInErr)
			}
		})
	}
}

func TestFaultsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    Faults
		ok   bool
	}{
		{"zero", Faults{}, true},
		{"probability above one", Faults{Speech: OpFaults{Drop: 1.01}}, false},
		{"negative latency", Faults{Image: OpFaults{Latency: -time.Second, LatencyP: 1}}, false},
		{"fractional retry-after", Faults{Image: OpFaults{RateLimit: 1, RetryAfter: 1500 * time.Millisecond}}, false},
		{"async_fail on image", Faults{Image: OpFaults{AsyncFail: 0.5}}, false},
		{"async_fail on video", Faults{Video: OpFaults{AsyncFail: 0.5}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.f.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidFaults) {
				t.Fatalf("error %v does not match ErrInvalidFaults", err)
			}
		})
	}
}

// FuzzParseFaults: the parser never panics, every error is a one-line
// *FaultSpecError, and every accepted spec is valid and round-trips through
// String.
func FuzzParseFaults(f *testing.F) {
	for _, s := range []string{
		"", "image:before_commit=0.2,speech:after_commit=0.1,speech:drop=0.05,video:async_fail=0.1,*:latency=50ms@0.3,*:rate_limit=0.05",
		"video:rate_limit=5s@1", "image:latency=200ms", "*:drop=0.1,image:drop=0", "image:drop=1e-300",
		"image:latency=1h2m3.5s@0.5", ":=", "*:*=*", "image:drop=0x1p-2", "speech:latency=@",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		got, err := ParseFaults(spec)
		if err != nil {
			var fe *FaultSpecError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalidFaults) {
				t.Fatalf("ParseFaults(%q): error %v is not a *FaultSpecError", spec, err)
			}
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("ParseFaults(%q): multi-line error %q", spec, err)
			}
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("ParseFaults(%q) accepted %+v, which Validate refuses: %v", spec, got, err)
		}
		again, err := ParseFaults(got.String())
		if err != nil || again != got {
			t.Fatalf("ParseFaults(%q) = %+v; String %q parses to %+v, %v", spec, got, got.String(), again, err)
		}
	})
}
