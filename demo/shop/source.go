package shop

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The source of a request: the network it comes from, as the shop counts
// budgets by it (sandboxes per source, wrong passwords per source). Made-up
// agents cost nothing; a network of one's own does.

// sourceOf is the network of r's client: its IPv4 /24 or IPv6 /48. The
// client is the peer, or, when the peer is one of Config.TrustedProxies,
// the last address in X-Forwarded-For that isn't one (each proxy appends
// the address it received the request from, so the addresses before that
// one are the client's own word).
func (s *Server) sourceOf(r *http.Request) string {
	ip := s.clientIP(r)
	if !ip.IsValid() {
		return "unknown"
	}
	bits := 48
	if ip.Is4() {
		bits = 24
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return "unknown"
	}
	return p.String()
}

func (s *Server) clientIP(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	peer = peer.Unmap()
	if !s.trusted(peer) {
		return peer
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return peer // a hop that can't be read: count the proxy itself
			}
			if a = a.Unmap(); !s.trusted(a) {
				return a
			}
		}
	}
	return peer
}

func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// throttle slows guessing of one of the shop's secrets (the customer's
// password, the staff credential) after repeated failures: past
// freeFailures wrong ones in a row from a source, every attempt from it
// waits until a time that doubles with each further failure, up to
// maxDelay, and one made sooner is refused (429 with Retry-After) without
// being checked. A right one clears its source. Every source together has
// a budget of its own too (many networks guessing at once), with more
// free failures and a shorter longest wait, so that a crowd can't lock
// out the staff for long. The time is the shop's clock (Config.Clock).
type throttle struct {
	clock func() time.Time

	mu  sync.Mutex
	by  map[string]*strikes
	all strikes
}

// strikes are a source's wrong attempts in a row, and when it may try
// again.
type strikes struct {
	n     int
	until time.Time
	last  time.Time
}

const (
	freeFailures    = 5                // per source before it slows down
	maxDelay        = 15 * time.Minute // per source, at most
	freeFailuresAll = 100              // of every source together
	maxDelayAll     = time.Minute      // of every source together, at most
	forgetStrikes   = time.Hour        // a source quiet this long starts afresh
	maxSources      = 10_000           // sources remembered; beyond, new ones share one budget
)

// delay is how long a source waits after its n-th failure in a row.
func delay(n, free int, most time.Duration) time.Duration {
	if n < free {
		return 0
	}
	d := time.Second << min(n-free, 20)
	return min(d, most)
}

// wait reports how long source must still wait before an attempt is
// checked: 0 when it may try now.
func (t *throttle) wait(source string) time.Duration {
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.all.until.Sub(now)
	if st := t.by[t.key(source)]; st != nil {
		w = max(w, st.until.Sub(now))
	}
	return max(w, 0)
}

// failed counts a wrong attempt from source.
func (t *throttle) failed(source string) {
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.by == nil {
		t.by = map[string]*strikes{}
	}
	if len(t.by) >= maxSources {
		for k, st := range t.by {
			if now.Sub(st.last) > forgetStrikes {
				delete(t.by, k)
			}
		}
	}
	k := t.key(source)
	st := t.by[k]
	if st == nil || now.Sub(st.last) > forgetStrikes {
		st = &strikes{}
		t.by[k] = st
	}
	st.n++
	st.last, st.until = now, now.Add(delay(st.n, freeFailures, maxDelay))
	if now.Sub(t.all.last) > forgetStrikes {
		t.all = strikes{}
	}
	t.all.n++
	t.all.last, t.all.until = now, now.Add(delay(t.all.n, freeFailuresAll, maxDelayAll))
}

// succeeded clears source's failures.
func (t *throttle) succeeded(source string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.by, t.key(source))
	t.all = strikes{}
}

// key is source's key, or the shared one once maxSources are remembered.
func (t *throttle) key(source string) string {
	if _, ok := t.by[source]; ok || len(t.by) < maxSources {
		return source
	}
	return "overflow"
}

// slowed answers an attempt made before its source may try again: 429,
// Retry-After, and nothing checked. It reports whether it answered.
func (s *Server) slowed(w http.ResponseWriter, r *http.Request, t *throttle, what string) bool {
	d := t.wait(s.sourceOf(r))
	if d <= 0 {
		return false
	}
	secs := int((d + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", fmt.Sprint(secs))
	w.Header().Set("Cache-Control", "no-store")
	s.message(w, r, http.StatusTooManyRequests, "Too many tries",
		fmt.Sprintf("Too many wrong %s from your network. Nothing was checked. Try again in %d seconds.", what, secs), nil)
	return true
}
