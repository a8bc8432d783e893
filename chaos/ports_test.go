package chaos

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// freePort hands out a TCP port on 127.0.0.1 for a process this test
// starts, or for an address nothing may listen on. It picks outside the
// kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range): a
// port taken from that range and closed again is free for the kernel to
// give to any outgoing connection or `:0` listener before the process binds
// it (CI once saw an API process fail with "address already in use" that
// way, and earlier two crash-matrix cases given one port). Outside the
// range only an explicit bind can take it, and every explicit bind of this
// binary comes from here: a port handed out once is never handed out again
// (a test may restart its process on the same port).
func freePort(t testing.TB) int {
	t.Helper()
	lo, hi, ok := explicitPortRange()
	if !ok {
		t.Logf("the ephemeral port range leaves no room below or above it; port %d..%d may be taken between the probe and the bind", lo, hi-1)
	}
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		handedOutMu.Lock()
		seen := handedOut[port]
		handedOut[port] = true
		handedOutMu.Unlock()
		if seen {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken by someone outside this binary
		}
		l.Close()
		return port
	}
	t.Fatal("no free port outside the ephemeral range that was not already handed out")
	return 0
}

// explicitPortRange is [lo, hi): ports outside the kernel's ephemeral
// range, below it (above the well-known and most registered ones) when it
// starts high enough, else above it. ok is false when neither side has
// room (the range is then 20000..32767 anyway).
func explicitPortRange() (lo, hi int, ok bool) {
	lo, hi = 20000, 32768 // Linux's default ephemeral range is 32768..60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi, true // not Linux: the default ranges start higher
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi, false
	}
	first, err1 := strconv.Atoi(f[0])
	last, err2 := strconv.Atoi(f[1])
	switch {
	case err1 != nil || err2 != nil:
		return lo, hi, false
	case first > 11000:
		return min(lo, first-10000), first, true
	case last < 55000:
		return last + 1, 65536, true
	}
	return lo, hi, false
}

var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
)
