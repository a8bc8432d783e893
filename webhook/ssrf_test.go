package webhook

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"edgepipe/pipeline"
)

func TestForbiddenAddr(t *testing.T) {
	t.Parallel()
	forbidden := []string{
		"127.0.0.1", "127.255.0.9", "::1", "0.0.0.0", "::", "0.1.2.3",
		"10.0.0.1", "172.16.5.5", "192.168.1.1", "fc00::1", "fd12:3456::1",
		"169.254.169.254", "fe80::1", "100.64.0.1", "192.0.0.8", "198.18.0.1",
		"224.0.0.1", "239.255.255.250", "ff02::1", "ff01::1", "255.255.255.255", "240.0.0.1",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:100.64.0.1", "::ffff:198.18.0.1",
		"64:ff9b::7f00:1", "64:ff9b::a00:1", "2002:7f00:1::", "2002:a9fe:a9fe::",
		"192.0.2.1", "2001:db8::1", "fec0::1", "100::1",
	}
	allowed := []string{"93.184.215.14", "1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::", "::ffff:8.8.8.8"}
	for _, s := range forbidden {
		if !ForbiddenAddr(netip.MustParseAddr(s)) {
			t.Errorf("%s should be forbidden", s)
		}
	}
	for _, s := range allowed {
		if ForbiddenAddr(netip.MustParseAddr(s)) {
			t.Errorf("%s should be allowed", s)
		}
	}
	if !ForbiddenAddr(netip.Addr{}) {
		t.Error("the invalid address should be forbidden")
	}
}

type tableResolver map[string][]netip.Addr

func (r tableResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	r := tableResolver{
		"public.example":  {netip.MustParseAddr("93.184.215.14")},
		"private.example": {netip.MustParseAddr("10.0.0.5")},
		"mixed.example":   {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("::1")},
		"nothing.example": {},
	}
	cases := []struct {
		url       string
		ok        bool
		forbidden bool
	}{
		{"https://public.example/hook?x=1", true, false},
		{"http://public.example:8443/hook", true, false},
		{"https://93.184.215.14/hook", true, false},
		{"https://private.example/hook", false, true},
		{"https://mixed.example/hook", false, true},
		{"http://127.0.0.1/hook", false, true},
		{"http://[::1]:80/", false, true},
		{"http://169.254.169.254/latest/meta-data", false, true},
		{"http://0.0.0.0/", false, true},
		{"http://[::ffff:127.0.0.1]/", false, true},
		{"https://nothing.example/", false, false},
		{"https://unknown.example/", false, false},
		{"ftp://public.example/", false, false},
		{"public.example/hook", false, false},
		{"https:///nohost", false, false},
		{"https://user:pw@public.example/", false, false},
		{"https://public.example:0/", false, false},
		{"https://public.example:99999/", false, false},
		{"https://public.example/a b", false, false},
		{"", false, false},
		{"mailto:a@public.example", false, false},
	}
	for _, tc := range cases {
		_, err := CheckURL(context.Background(), r, tc.url, false)
		if tc.ok != (err == nil) {
			t.Errorf("CheckURL(%q) = %v, want ok=%v", tc.url, err, tc.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, pipeline.ErrInvalidInput) {
				t.Errorf("CheckURL(%q): %v does not match ErrInvalidInput", tc.url, err)
			}
			if errors.Is(err, ErrForbiddenAddress) != tc.forbidden {
				t.Errorf("CheckURL(%q): forbidden=%v, want %v", tc.url, errors.Is(err, ErrForbiddenAddress), tc.forbidden)
			}
		}
	}
	// allowPrivate skips the address checks but not the form checks.
	if _, err := CheckURL(context.Background(), r, "http://127.0.0.1:9/x", true); err != nil {
		t.Errorf("allowPrivate: %v", err)
	}
	if _, err := CheckURL(context.Background(), r, "ftp://127.0.0.1/x", true); err == nil {
		t.Error("allowPrivate accepted ftp")
	}
}

func TestDialGuard(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{
		"93.184.215.14:443": true, "[2606:4700::1111]:443": true,
		"127.0.0.1:80": false, "[::1]:80": false, "10.0.0.1:443": false, "169.254.169.254:80": false, "garbage": false,
	} {
		err := dialGuard("tcp", addr, nil)
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrForbiddenAddress)) {
			t.Errorf("dialGuard(%s) = %v, want ok=%v", addr, err, ok)
		}
	}
}
