package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"edgepipe/pipeline"
)

// MaxURLLen is the longest webhook URL accepted.
const MaxURLLen = 2048

// ErrForbiddenAddress is returned (wrapped) when a webhook target is, or
// resolves to, an address that is not allowed: see ForbiddenAddr.
var ErrForbiddenAddress = errors.New("webhook: target address is not public")

// URLError explains why a webhook URL was refused. Reason is safe to show
// the caller who submitted the URL. It matches pipeline.ErrInvalidInput, and
// ErrForbiddenAddress when the address was the problem.
type URLError struct {
	Reason    string
	forbidden bool
}

func (e *URLError) Error() string { return "webhook url: " + e.Reason }

func (e *URLError) Is(target error) bool {
	return target == pipeline.ErrInvalidInput || (e.forbidden && target == ErrForbiddenAddress)
}

// Resolver looks host names up; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// blocked lists non-public ranges that netip's predicates do not cover.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT, often internal
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and 255.255.255.255
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
}

// Prefixes whose addresses embed an IPv4 address a router may translate to.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// ForbiddenAddr reports whether a webhook may not be sent to a: loopback,
// private (RFC 1918, fc00::/7), link-local (including 169.254.169.254, the
// cloud metadata address), unspecified, multicast, broadcast, and other
// reserved or internal-only ranges, also when written as an IPv4-mapped,
// NAT64 or 6to4 IPv6 address.
func ForbiddenAddr(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.Unmap()
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range blocked {
		if p.Contains(a) {
			return true
		}
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			return ForbiddenAddr(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(a):
			return ForbiddenAddr(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	return false
}

// ParseURL checks the form of a webhook URL without resolving it: absolute
// http or https, a host, no credentials, at most MaxURLLen bytes. Errors are
// *URLError.
func ParseURL(raw string) (*url.URL, error) {
	bad := func(reason string) (*url.URL, error) { return nil, &URLError{Reason: reason} }
	if raw == "" {
		return bad("is empty")
	}
	if len(raw) > MaxURLLen {
		return bad(fmt.Sprintf("is longer than %d bytes", MaxURLLen))
	}
	if strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return bad("contains spaces or control characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("is not a valid URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("must use http or https")
	case u.Opaque != "" || u.Host == "":
		return bad("must be an absolute URL with a host")
	case u.User != nil:
		return bad("must not contain credentials; deliveries are signed instead")
	case u.Hostname() == "":
		return bad("has no host name")
	}
	if p := u.Port(); p != "" {
		if n, err := netip.ParseAddrPort("0.0.0.0:" + p); err != nil || n.Port() == 0 {
			return bad("has an invalid port")
		}
	}
	return u, nil
}

// CheckURL parses raw (see ParseURL) and, unless allowPrivate, resolves its
// host and refuses it when any address is forbidden (ForbiddenAddr): one
// internal record is enough for an attacker to aim at. A host that does not
// resolve is refused too. Errors are *URLError.
func CheckURL(ctx context.Context, r Resolver, raw string, allowPrivate bool) (*url.URL, error) {
	u, err := ParseURL(raw)
	if err != nil || allowPrivate {
		return u, err
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if ForbiddenAddr(a) {
			return nil, &URLError{Reason: "points at a private, loopback or otherwise internal address", forbidden: true}
		}
		return u, nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return nil, &URLError{Reason: "host name does not resolve"}
	}
	for _, a := range addrs {
		if ForbiddenAddr(a) {
			return nil, &URLError{Reason: "host name resolves to a private, loopback or otherwise internal address", forbidden: true}
		}
	}
	return u, nil
}

// dialGuard is a net.Dialer Control hook: it runs after name resolution, on
// the address about to be connected, so a name re-pointed at an internal
// address after submission is still refused.
func dialGuard(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialled address %q", ErrForbiddenAddress, address)
	}
	if ForbiddenAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrForbiddenAddress, ap.Addr())
	}
	return nil
}

// NewClient returns the HTTP client deliveries use: no proxy (a proxy would
// make the dial check see the proxy's address instead of the target's), no
// redirects (a 3xx is a failed delivery, not an invitation to go elsewhere),
// the given overall timeout, and — unless allowPrivate — a dialer that refuses
// every forbidden address.
func NewClient(allowPrivate bool, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = dialGuard
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          50,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
