package main

// -hostile: legitimate browsers and agents keep working while attackers
// send what a hostile agent can: Session JWTs whose agent publishes huge
// junk keys, thousands of made-up client_ids, agents that drip their
// metadata a byte at a time, many Users, many approvals on one operation,
// and made-up agents that each store open operations (valid agents cost
// nothing: every client_id is another agent's caps). The legitimate side's
// throughput and p99 are measured quiet and under attack, in one run, and
// the run's Redis footprint after it: keys and bytes per kind, so a
// stored operation's and a replay marker's size are figures.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	kitjoin "github.com/opsgate/opsgate/internal/join"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/internal/opsendpoint"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

type hostileConfig struct {
	redisURL string
	duration time.Duration // each phase
	browsers int           // legitimate browsers, one agent cycle at a time each
	// attackRate is each attacker's requests per second; 0: as fast as
	// it can (it then competes for the same cores as the website).
	attackRate float64
	rounds     int // quiet and attacked phases in turn
	out        io.Writer
}

// hostileResult is what the run found, for tests.
type hostileResult struct {
	quiet, attacked     phaseStats
	madeUp              madeUpStats            // the made-up agents' stored operations
	footprint           footprint              // the run's keys in Redis, at its end
	attacks             map[string]map[int]int // attack → status → count
	legit5xx, attack5xx int
	legit429            int // legitimate requests refused by a cap
}

type phaseStats struct {
	lat      []time.Duration
	elapsed  time.Duration
	requests int
	rate     float64
	p50, p99 time.Duration
	statuses map[int]int
	errors   int
}

const hostileOrigin = "https://shop.example"

// hostileMaxOpen is the shop's overall cap of open operations across
// agents (redisstore.Options.MaxOpen): small, so that the made-up agents
// reach it within a run (the default, storekit.DefaultMaxOpen, is
// 100,000). The legitimate agents perform what they store at once, so
// they hold a few at a time; once the made-up agents have filled the cap,
// every agent's next stored operation is refused (429) until theirs
// expire: the cap bounds the store, it can't tell a made-up agent from a
// new one.
const hostileMaxOpen = 200

// hostileShop is the website under attack: web servers sharing a Redis,
// each with its Gate, endpoint and join.
type hostileShop struct {
	kits []*webkit.Kit
	urls []string
}

func runHostile(ctx context.Context, c hostileConfig) (hostileResult, error) {
	res := hostileResult{attacks: map[string]map[int]int{}}
	addr := ""
	if c.redisURL != "" {
		o, err := redis.ParseURL(c.redisURL)
		if err != nil {
			return res, fmt.Errorf("-redis: %w", err)
		}
		addr = o.Addr
	} else {
		procs, err := redistest.NewProcs()
		if err != nil {
			return res, err
		}
		defer procs.Close()
		srv, err := redistest.StartArgs(procs)
		if err != nil {
			return res, fmt.Errorf("start redis-server (or give -redis): %w", err)
		}
		addr = srv.Addr
	}
	// Durability "none" on a server without persistence: this run is about
	// CPU and Redis time per hostile request, not crashes (-faults).
	prefix := fmt.Sprintf("opsgate-hostile-%d:", time.Now().UnixNano())
	shop := &hostileShop{}
	var clients []*redis.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	for range 2 {
		cl := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
		clients = append(clients, cl)
		st := redisstore.New(cl, redisstore.Options{Prefix: prefix, Retention: 15 * time.Minute, Durability: redisstore.DurableNone, MaxOpen: hostileMaxOpen})
		kit := webkit.New(keys...)
		kit.Store = st
		kit.Logger = slog.New(slog.DiscardHandler)
		kit.Sessions.(*webkit.CookieSessions).Insecure = true
		verifier := &siteverify.Verifier{Origin: hostileOrigin, Resolver: &identity.Resolver{AllowLocal: true}, Replay: storedriver.Steps(st)}
		mux := http.NewServeMux()
		mux.Handle("POST /poppy/operations", opsendpoint.New(kit, opsendpoint.IdentityAuthenticator{Verifier: verifier}))
		mux.Handle("POST /poppy/join", kitjoin.New(kit, hostileOrigin+"/poppy/join", verifier, nil))
		mux.Handle("POST /orders/{order}/exchange", kit.Gate(describe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "exchanged\n")
		})))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		shop.kits = append(shop.kits, kit)
		shop.urls = append(shop.urls, srv.URL)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	defer client.CloseIdleConnections()

	// One legitimate agent per browser, as a website has many: fewer
	// agents doing all the legitimate work would meet the store's cap of
	// open operations per agent (DefaultMaxOpenPerAgent, counted over a
	// revision's lifetime) in this run, and their quick 429s would blur
	// what the attackers cost. Legitimate 429s are counted apart.
	var legit []*hostileAgent
	for k := range c.browsers {
		a, err := newHostileAgent(fmt.Sprint("legit-", k))
		if err != nil {
			return res, err
		}
		defer a.Close()
		legit = append(legit, a)
	}
	attacker, err := newHostileAgent("attacker")
	if err != nil {
		return res, err
	}
	defer attacker.Close()
	madeUp := &madeUpAgents{a: attacker}

	fmt.Fprintf(c.out, "opsgate hostile: 2 web servers on one redis-server (%s), %d legitimate browsers of %d agents, %v per phase, each attacker %s\n", addr, c.browsers, len(legit), c.duration, rateText(c.attackRate))
	fmt.Fprintf(c.out, "%-36s %8s %9s %10s %10s  %s\n", "legitimate traffic", "requests", "req/s", "p50", "p99", "answers")

	phase := func(name string, attack bool) (phaseStats, error) {
		var attacks map[string]func(context.Context, int) int
		if attack { // before the phase's clock starts
			attacks = shop.attacks(client, attacker, max(100, int(300*c.duration.Seconds())))
			attacks["made-up agents storing operations"] = madeUp.attack(shop, client)
		}
		pctx, cancel := context.WithTimeout(ctx, c.duration)
		defer cancel()
		var wg sync.WaitGroup
		var attackMu sync.Mutex
		if attack {
			for name, a := range attacks {
				// Slow-drip agents hold the resolver's fetches: many at once.
				workers := map[bool]int{true: 8, false: 1}[name == "slow-drip agents"]
				for w := range workers {
					wg.Go(func() {
						counts := map[int]int{}
						start := time.Now()
						for n, k := w, 0; pctx.Err() == nil && n < 1_000_000; n, k = n+workers, k+1 {
							if c.attackRate > 0 { // paced: attacker k's request at k/rate
								pause(pctx, time.Until(start.Add(time.Duration(float64(k)/c.attackRate*float64(time.Second)))))
								if pctx.Err() != nil {
									break
								}
							}
							status := a(pctx, n)
							if pctx.Err() == nil || status != 0 {
								counts[status]++
							}
						}
						attackMu.Lock()
						if res.attacks[name] == nil {
							res.attacks[name] = map[int]int{}
						}
						for s, k := range counts {
							res.attacks[name][s] += k
						}
						attackMu.Unlock()
					})
				}
			}
		}
		st := shop.legitimate(pctx, client, legit, c.browsers, name)
		wg.Wait()
		st.print(c.out, name)
		return st, nil
	}
	// Quiet and attacked phases in turn, so that whatever else the machine
	// runs weighs on both alike; the figures are over all rounds.
	var quiet, attacked []phaseStats
	for r := range max(c.rounds, 1) {
		q, err := phase(fmt.Sprintf("quiet, round %d", r+1), false)
		if err != nil {
			return res, err
		}
		a, err := phase(fmt.Sprintf("under attack, round %d", r+1), true)
		if err != nil {
			return res, err
		}
		quiet, attacked = append(quiet, q), append(attacked, a)
	}
	res.quiet, res.attacked = merge(quiet), merge(attacked)
	if len(quiet) > 1 {
		res.quiet.print(c.out, "quiet, all rounds")
		res.attacked.print(c.out, "under attack, all rounds")
	}
	for s, n := range res.attacked.statuses {
		if s >= 500 {
			res.legit5xx += n
		}
	}
	for s, n := range res.quiet.statuses {
		if s >= 500 {
			res.legit5xx += n
		}
	}
	for _, name := range slices.Sorted(mapKeys(res.attacks)) {
		var answers []string
		for _, s := range slices.Sorted(mapKeys(res.attacks[name])) {
			n := res.attacks[name][s]
			label := fmt.Sprint(s)
			if s == 0 {
				label = "no answer"
			}
			answers = append(answers, fmt.Sprintf("%d×%s", n, label))
			// An agent whose keys can't be fetched in time gets 503 with
			// Retry-After by design (it may be a real agent briefly down);
			// any other 5xx is a failure.
			if s >= 500 && !(s == 503 && name == "slow-drip agents") {
				res.attack5xx += n
			}
		}
		fmt.Fprintf(c.out, "attack %-29s %s\n", name, strings.Join(answers, " "))
	}
	res.madeUp = madeUp.stats()
	if fp, err := measureRedis(ctx, clients[0], prefix); err != nil {
		fmt.Fprintf(c.out, "redis footprint: %v\n", err)
	} else {
		res.footprint = fp
		fp.print(c.out, res.madeUp)
	}
	ratio := float64(res.attacked.p99) / float64(max(res.quiet.p99, 1))
	res.legit429 = res.quiet.statuses[429] + res.attacked.statuses[429]
	fmt.Fprintf(c.out, "hostile: p99 %.2f× quiet (target ≤ 2), throughput %.2f× quiet (the attackers run on the same cores), legitimate 5xx %d, legitimate 429 %d, attackers' unexpected 5xx %d\n",
		ratio, res.attacked.rate/max(res.quiet.rate, 1), res.legit5xx, res.legit429, res.attack5xx)
	return res, nil
}

func rateText(r float64) string {
	if r <= 0 {
		return "as fast as it can"
	}
	return fmt.Sprintf("at %.0f requests/s", r)
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (s phaseStats) print(w io.Writer, name string) {
	var answers []string
	for _, st := range slices.Sorted(mapKeys(s.statuses)) {
		answers = append(answers, fmt.Sprintf("%d×%d", s.statuses[st], st))
	}
	if s.errors > 0 {
		answers = append(answers, fmt.Sprintf("%d errors", s.errors))
	}
	fmt.Fprintf(w, "%-36s %8d %9.0f %10v %10v  %s\n", name, s.requests, s.rate, s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond), strings.Join(answers, " "))
}

// legitimate runs whole cycles from browsers of the legitimate agents until
// ctx ends: the gated request (403), the agent's approval at the endpoint
// (a fresh Session JWT each time), the repeat (200).
func (shop *hostileShop) legitimate(ctx context.Context, client *http.Client, agents []*hostileAgent, browsers int, tag string) phaseStats {
	var mu sync.Mutex
	st := phaseStats{statuses: map[int]int{}}
	var lat []time.Duration
	note := func(d time.Duration, status int, err error) {
		mu.Lock()
		defer mu.Unlock()
		lat = append(lat, d)
		if err != nil {
			if ctx.Err() == nil {
				st.errors++
			}
			return
		}
		st.statuses[status]++
	}
	start := time.Now()
	var wg sync.WaitGroup
	for b := range browsers {
		a := agents[b%len(agents)]
		cookie, err := a.bind(shop.kits[0], fmt.Sprintf("usr_legit_%d", b))
		if err != nil {
			continue
		}
		wg.Go(func() {
			for n := 0; ctx.Err() == nil && n < 1_000_000; n++ {
				srv := shop.urls[(b+n)%len(shop.urls)]
				order := fmt.Sprintf("ord_%s_%d_%d", strings.ReplaceAll(tag, " ", "_"), b, n)
				t := time.Now()
				var ref string
				status, err := post(ctx, client, srv, order, cookie, func(h http.Header) {
					_, ref, _ = headers.ParseOperation(h.Values("Poppy-Operation"))
				})
				note(time.Since(t), status, err)
				if err != nil || status != 403 || ref == "" {
					continue
				}
				t = time.Now()
				status, err = a.approve(ctx, client, shop.urls[(b+n+1)%len(shop.urls)], fmt.Sprintf("usr_legit_%d", b), ref)
				note(time.Since(t), status, err)
				if err != nil || status != 204 {
					continue
				}
				t = time.Now()
				status, err = post(ctx, client, srv, order, cookie)
				note(time.Since(t), status, err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	st.lat, st.elapsed = lat, elapsed
	st.summarize()
	return st
}

// summarize sets requests, rate, p50 and p99 from lat and elapsed.
func (st *phaseStats) summarize() {
	slices.Sort(st.lat)
	st.requests = len(st.lat)
	st.rate = float64(len(st.lat)) / st.elapsed.Seconds()
	if len(st.lat) > 0 {
		st.p50 = st.lat[len(st.lat)/2]
		st.p99 = st.lat[min(len(st.lat)-1, len(st.lat)*99/100)]
	}
}

// merge adds phases up.
func merge(phases []phaseStats) phaseStats {
	m := phaseStats{statuses: map[int]int{}}
	for _, p := range phases {
		m.lat = append(m.lat, p.lat...)
		m.elapsed += p.elapsed
		m.errors += p.errors
		for s, n := range p.statuses {
			m.statuses[s] += n
		}
	}
	m.summarize()
	return m
}

// hostileAgent is an agent's web presence on loopback: its metadata
// document and JWKS, plus whatever junk an attacker serves.
type hostileAgent struct {
	keys   *agentside.AgentKeys
	dlg    *agentside.Delegation
	server *httptest.Server
	big    []byte // a JWKS with a huge junk RSA key (attacker)
	cnfKey *ecdsa.PrivateKey
	stop   chan struct{}
	madeUp sync.Map // path → *agentside.AgentKeys (madeUpAgents)
}

func newHostileAgent(name string) (*hostileAgent, error) {
	a := &hostileAgent{stop: make(chan struct{})}
	mux := http.NewServeMux()
	a.server = httptest.NewServer(mux)
	keys, err := agentside.NewAgentKeys(a.server.URL+"/client", "ES256")
	if err != nil {
		a.server.Close()
		return nil, err
	}
	a.keys = keys
	if a.dlg, err = keys.Delegate(time.Hour); err != nil {
		a.server.Close()
		return nil, err
	}
	// A 16,384-bit modulus of random bytes and exponent 2^31−1: a key no
	// one holds, as costly as possible to verify with.
	n := make([]byte, 2048)
	rand.Read(n)
	n[0] |= 0x80
	b64 := base64.RawURLEncoding
	a.big, _ = json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": "big", "alg": "RS256", "use": "sig",
		"n": b64.EncodeToString(n), "e": b64.EncodeToString(big.NewInt(1<<31 - 1).Bytes()),
	}}})
	mux.HandleFunc("/client", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(keys.Metadata(a.server.URL+"/jwks", name))
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(keys.JWKS())
	})
	// The junk-key agent: same server, another client_id.
	mux.HandleFunc("/bigkey", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]string{"client_id": a.server.URL + "/bigkey", "client_name": "big", "jwks_uri": a.server.URL + "/bigjwks"})
		w.Write(b)
	})
	mux.HandleFunc("/bigjwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(a.big)
	})
	// The cnf.jwk attacker: an ordinary P-256 key of its own, which signs
	// delegations to the huge junk key.
	if a.cnfKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		a.server.Close()
		return nil, err
	}
	cnfJWK, err := jose.NewJWK(a.cnfKey.Public(), "cnf-1", "ES256")
	if err != nil {
		a.server.Close()
		return nil, err
	}
	cnfJWK.Use = "sig"
	cnfJWKS, _ := json.Marshal(map[string]any{"keys": []jose.JWK{cnfJWK}})
	mux.HandleFunc("/cnf", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]string{"client_id": a.server.URL + "/cnf", "client_name": "cnf", "jwks_uri": a.server.URL + "/cnfjwks"})
		w.Write(b)
	})
	mux.HandleFunc("/cnfjwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(cnfJWKS)
	})
	// Made-up agents that are valid (madeUpAgents): each client_id's
	// metadata and keys, from the keys made for it.
	mux.HandleFunc("/made-up/{n}", func(w http.ResponseWriter, r *http.Request) {
		k, ok := a.madeUp.Load(r.URL.Path)
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(k.(*agentside.AgentKeys).Metadata(a.server.URL+"/made-up-jwks/"+r.PathValue("n"), "made up"))
	})
	mux.HandleFunc("/made-up-jwks/{n}", func(w http.ResponseWriter, r *http.Request) {
		k, ok := a.madeUp.Load("/made-up/" + r.PathValue("n"))
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(k.(*agentside.AgentKeys).JWKS())
	})
	// Made-up client_ids: nothing there.
	mux.HandleFunc("/junk/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	// A slow-drip agent: its metadata a byte every 200 ms, for at most 20 s.
	mux.HandleFunc("/drip/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		doc := keys.Metadata(a.server.URL+"/jwks", name)
		fl, _ := w.(http.Flusher)
		for i := range min(len(doc), 100) {
			select {
			case <-r.Context().Done():
				return
			case <-a.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			w.Write(doc[i : i+1])
			if fl != nil {
				fl.Flush()
			}
		}
	})
	return a, nil
}

// hugeCnfDelegation returns a delegation signed with the cnf agent's real
// key (served at /cnf) that delegates to the huge junk RSA key; "" if it
// can't be made.
func (a *hostileAgent) hugeCnfDelegation() string {
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	if json.Unmarshal(a.big, &set) != nil || len(set.Keys) == 0 {
		return ""
	}
	now := time.Now()
	t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": a.server.URL + "/cnf", "cnf": map[string]any{"jwk": set.Keys[0]},
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	t.Header["typ"] = jose.TypDelegation
	t.Header["kid"] = "cnf-1"
	s, err := t.SignedString(a.cnfKey)
	if err != nil {
		return ""
	}
	return s
}

func (a *hostileAgent) Close() {
	close(a.stop)
	a.server.CloseClientConnections()
	a.server.Close()
}

// bind joins a browser to a Session of this agent for user, as a join
// does, and returns its cookie.
func (a *hostileAgent) bind(kit *webkit.Kit, user string) (*http.Cookie, error) {
	rec := httptest.NewRecorder()
	s := webkit.Session{ID: "ses_" + user, Agent: a.keys.ClientID, User: user, Extensions: map[string]string{"operations": "3"}}
	if err := kit.Sessions.Bind(rec, httptest.NewRequest("GET", "/", nil), s); err != nil {
		return nil, err
	}
	return rec.Result().Cookies()[0], nil
}

// approve has the agent look the ref up and approve its revision at the
// endpoint, as the reference agent does (two requests, two Session JWTs);
// it returns the approval's status.
func (a *hostileAgent) approve(ctx context.Context, client *http.Client, base, user, ref string) (int, error) {
	var answer struct { // 403 approval_required names the revision to approve
		Operation struct {
			OperationID string `json:"operation_id"`
			Revision    string `json:"revision"`
		} `json:"operation"`
	}
	status, body, err := a.endpoint(ctx, client, base, user, ref, "")
	if err != nil || status != http.StatusForbidden {
		return status, err
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return 0, err
	}
	op := answer.Operation
	status, _, err = a.endpoint(ctx, client, base, user, ref, fmt.Sprintf(`operation_id=%q, revision=%q, approver="user"`, op.OperationID, op.Revision))
	return status, err
}

func (a *hostileAgent) endpoint(ctx context.Context, client *http.Client, base, user, ref, approval string) (int, []byte, error) {
	jwt, err := a.dlg.SessionJWT(agentside.SessionClaims{Audience: hostileOrigin, SID: "ses_" + user, User: user})
	if err != nil {
		return 0, nil, err
	}
	return sendSession(ctx, client, base, jwt, `{"ref":"`+ref+`"}`, approval)
}

func sendSession(ctx context.Context, client *http.Client, base, jwt, body, approval string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/poppy/operations", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headers.Session, jwt)
	req.Header.Set(headers.Version, "1.0")
	req.Header.Set(headers.Extensions, `"operations";v="3"`)
	if approval != "" {
		req.Header.Set(headers.Approval, approval)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, b, nil
}

// rewrap returns jws with its header's members replaced by set (nil
// removes), its payload kept, and sig as its signature.
func rewrap(jws string, set map[string]any, sig []byte) string {
	b64 := base64.RawURLEncoding
	parts := strings.SplitN(jws, ".", 3)
	var h map[string]any
	raw, _ := b64.DecodeString(parts[0])
	json.Unmarshal(raw, &h)
	for k, v := range set {
		if v == nil {
			delete(h, k)
		} else {
			h[k] = v
		}
	}
	hb, _ := json.Marshal(h)
	return b64.EncodeToString(hb) + "." + parts[1] + "." + b64.EncodeToString(sig)
}

// attacks returns the attackers, each a function sending one hostile
// request and returning its status (0: no answer).
// pool is how many distinct tokens each attacker sends at most.
func (shop *hostileShop) attacks(client *http.Client, a *hostileAgent, pool int) map[string]func(context.Context, int) int {
	base := func(n int) string { return shop.urls[n%len(shop.urls)] }
	junkSig := make([]byte, 2048)
	rand.Read(junkSig)
	// A delegation from the junk-key agent: its own claims (iss), RS256
	// under the huge key, a signature of garbage.
	bigKeys, _ := agentside.NewAgentKeys(a.server.URL+"/bigkey", "ES256")
	bigDlg, _ := bigKeys.Delegate(time.Hour)
	hoard, _ := a.bind(shop.kits[0], "usr_hoard")
	cnfDlg := a.hugeCnfDelegation()
	// The attackers' tokens are signed before the attack, so that the
	// attackers' own signing (on the same cores) weighs less on the
	// figures; each is used once, but for the slow-drip agents'.
	junkDlg := rewrap(bigDlg.Compact(), map[string]any{"alg": "RS256", "kid": "big"}, junkSig)
	fresh := func(what string) string { // a Session JWT of a new agent under what
		k, err := agentside.NewAgentKeys(fmt.Sprintf("%s/%s/%d", a.server.URL, what, mrand.Int64()), "ES256")
		if err != nil {
			return ""
		}
		d, _ := k.Delegate(time.Hour)
		jwt, _ := d.SessionJWT(agentside.SessionClaims{Audience: hostileOrigin, SID: "ses_x", User: "usr_x"})
		return jwt
	}
	gens := map[string]func() string{
		"endpoint": func() string {
			jwt, _ := bigDlg.SessionJWT(agentside.SessionClaims{Audience: hostileOrigin, SID: "ses_x", User: "usr_x"})
			parts := strings.SplitN(jwt, ".", 3)
			return rewrap(jwt, map[string]any{"poppy_dlg": junkDlg}, []byte(parts[2]))
		},
		"join": func() string {
			as, _ := bigDlg.BrowserAssertion(agentside.BrowserClaims{SessionClaims: agentside.SessionClaims{Audience: hostileOrigin + "/poppy/join", SID: "ses_x", User: "usr_x"}, ReturnTo: hostileOrigin + "/", Extensions: `"operations";v="3"`})
			parts := strings.SplitN(as, ".", 3)
			return rewrap(as, map[string]any{"poppy_dlg": junkDlg}, []byte(parts[2]))
		},
		"cnf": func() string {
			jwt, _ := bigDlg.SessionJWT(agentside.SessionClaims{Audience: hostileOrigin, SID: "ses_x", User: "usr_x"})
			b64 := base64.RawURLEncoding
			parts := strings.SplitN(jwt, ".", 3)
			payload, _ := b64.DecodeString(parts[1])
			var claims map[string]any
			json.Unmarshal(payload, &claims)
			claims["iss"] = a.server.URL + "/cnf"
			pb, _ := json.Marshal(claims)
			hb, _ := json.Marshal(map[string]any{"alg": "RS256", "typ": jose.TypSession, "poppy_dlg": cnfDlg})
			return b64.EncodeToString(hb) + "." + b64.EncodeToString(pb) + "." + b64.EncodeToString(junkSig)
		},
		"client_ids": func() string { return fresh("junk") },
		"drip":       func() string { return fresh("drip") },
	}
	pools := map[string][]string{}
	for name, gen := range gens {
		n := pool
		if name == "drip" {
			n = 64
		}
		for range n {
			pools[name] = append(pools[name], gen())
		}
	}
	var users atomic.Int64
	return map[string]func(context.Context, int) int{
		// Session JWTs whose delegation the huge junk key would verify: at
		// the endpoint and the join. A replay of the same bytes is the
		// cheapest attack; fresh jtis each time are the costlier one.
		"junk key (endpoint)": func(ctx context.Context, n int) int {
			status, _, _ := sendSession(ctx, client, base(n), pools["endpoint"][n%len(pools["endpoint"])], `{"ref":"op_x.y"}`, "")
			return status
		},
		"junk key (join)": func(ctx context.Context, n int) int {
			status, _ := postForm(ctx, client, base(n)+"/poppy/join", url.Values{"assertion": {pools["join"][n%len(pools["join"])]}})
			return status
		},
		// A properly signed delegation whose cnf.jwk is the huge junk
		// key, and a Session JWT with a garbage RS256 signature under it.
		"junk key in cnf.jwk": func(ctx context.Context, n int) int {
			status, _, _ := sendSession(ctx, client, base(n), pools["cnf"][n%len(pools["cnf"])], `{"ref":"op_x.y"}`, "")
			return status
		},
		// Thousands of made-up client_ids, each a fetch and a failure.
		"many client_ids": func(ctx context.Context, n int) int {
			status, _, _ := sendSession(ctx, client, base(n), pools["client_ids"][n%len(pools["client_ids"])], `{"ref":"op_x.y"}`, "")
			return status
		},
		// Agents whose metadata drips in a byte at a time.
		"slow-drip agents": func(ctx context.Context, n int) int {
			status, _, _ := sendSession(ctx, client, base(n), pools["drip"][n%len(pools["drip"])], `{"ref":"op_x.y"}`, "")
			return status
		},
		// One agent minting Users, each asking for new actions.
		"many Users": func(ctx context.Context, n int) int {
			cookie, err := a.bind(shop.kits[0], fmt.Sprintf("usr_mint_%d", users.Add(1)))
			if err != nil {
				return 0
			}
			status, _ := post(ctx, client, base(n), fmt.Sprintf("ord_mint_%d", n), cookie)
			return status
		},
		// One operation collecting approvals: the same action with new
		// terms each time (a new revision), each approved by the agent,
		// and the browser's repeats that must look through them.
		"many approvals, one operation": func(ctx context.Context, n int) int {
			var ref string
			status, _ := postSKU(ctx, client, base(n), "ord_hoard", fmt.Sprintf("sku-%d", n), hoard, func(h http.Header) {
				_, ref, _ = headers.ParseOperation(h.Values("Poppy-Operation"))
			})
			if status != 403 || ref == "" {
				return status
			}
			s, _ := a.approve(ctx, client, base(n+1), "usr_hoard", ref)
			return s
		},
	}
}

func postForm(ctx context.Context, client *http.Client, u string, form url.Values) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	return res.StatusCode, nil
}

// postSKU is post with another replacement SKU: other terms, a new
// revision of the same operation.
func postSKU(ctx context.Context, client *http.Client, base, order, sku string, cookie *http.Cookie, seen ...func(http.Header)) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders/"+order+"/exchange", strings.NewReader(url.Values{"sku": {sku}}.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.AddCookie(cookie)
	res, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	for _, f := range seen {
		f(res.Header)
	}
	return res.StatusCode, nil
}

// madeUpAgents is the attacker that costs nothing per agent: every
// client_id it makes up is served by its own server (metadata and keys), so
// each is a valid agent with caps of its own (MaxOpenPerAgent,
// MaxOpenPerOwner), and each approval stores an open operation that is
// never performed, plus the replay markers of its Session JWTs. There is no
// cap across agents yet: the run measures what each one costs.
type madeUpAgents struct {
	a      *hostileAgent
	mu     sync.Mutex
	agents map[int]*agentside.Delegation
	stored atomic.Int64 // approvals recorded (204): open operations stored
	// refused counts approvals refused (429): the overall cap, or the
	// replay markers' cap
	refused atomic.Int64
	tried   atomic.Int64
	seq     atomic.Int64 // the requests' numbers, across phases
}

// madeUpPerAgent is how many operations each made-up agent stores, one
// User each: under the owner's cap of 100.
const madeUpPerAgent = 50

type madeUpStats struct {
	agents                 int
	stored, tried, refused int64
}

func (m *madeUpAgents) stats() madeUpStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return madeUpStats{agents: len(m.agents), stored: m.stored.Load(), tried: m.tried.Load(), refused: m.refused.Load()}
}

// delegation is made-up agent i's, made on first use: a fresh key pair
// under a client_id on the attacker's server.
func (m *madeUpAgents) delegation(i int) (*agentside.Delegation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.agents[i]; ok {
		return d, nil
	}
	keys, err := agentside.NewAgentKeys(fmt.Sprintf("%s/made-up/%d", m.a.server.URL, i), "ES256")
	if err != nil {
		return nil, err
	}
	m.a.madeUp.Store(fmt.Sprintf("/made-up/%d", i), keys)
	d, err := keys.Delegate(time.Hour)
	if err != nil {
		return nil, err
	}
	if m.agents == nil {
		m.agents = map[int]*agentside.Delegation{}
	}
	m.agents[i] = d
	return d, nil
}

// attack returns the attacker: request n is made-up agent n/madeUpPerAgent's
// gated request (403 with a ref) and its approval at the endpoint (204: one
// more open operation stored, never performed).
func (m *madeUpAgents) attack(shop *hostileShop, client *http.Client) func(context.Context, int) int {
	return func(ctx context.Context, _ int) int {
		n := int(m.seq.Add(1) - 1)
		m.tried.Add(1)
		i := n / madeUpPerAgent
		d, err := m.delegation(i)
		if err != nil {
			return 0
		}
		agent := d.ClientID
		s := webkit.Session{ID: fmt.Sprintf("ses_m%d", i), Agent: agent, User: "usr_m", Extensions: map[string]string{"operations": "3"}}
		rec := httptest.NewRecorder()
		if shop.kits[0].Sessions.Bind(rec, httptest.NewRequest("GET", "/", nil), s) != nil {
			return 0
		}
		cookie := rec.Result().Cookies()[0]
		base := shop.urls[n%len(shop.urls)]
		var ref string
		status, _ := post(ctx, client, base, fmt.Sprintf("ord_m%d_%d", i, n), cookie, func(h http.Header) {
			_, ref, _ = headers.ParseOperation(h.Values("Poppy-Operation"))
		})
		if status != 403 || ref == "" {
			return status
		}
		jwt := func() (string, error) {
			return d.SessionJWT(agentside.SessionClaims{Audience: hostileOrigin, SID: s.ID, User: s.User})
		}
		look, err := jwt()
		if err != nil {
			return 0
		}
		st, body, err := sendSession(ctx, client, base, look, `{"ref":"`+ref+`"}`, "")
		if err != nil || st != http.StatusForbidden {
			return st
		}
		var answer struct {
			Operation struct {
				OperationID string `json:"operation_id"`
				Revision    string `json:"revision"`
			} `json:"operation"`
		}
		if json.Unmarshal(body, &answer) != nil {
			return 0
		}
		approve, err := jwt()
		if err != nil {
			return 0
		}
		st, _, _ = sendSession(ctx, client, base, approve, `{"ref":"`+ref+`"}`,
			fmt.Sprintf(`operation_id=%q, revision=%q, approver="user"`, answer.Operation.OperationID, answer.Operation.Revision))
		switch st {
		case http.StatusNoContent:
			m.stored.Add(1)
		case http.StatusTooManyRequests:
			m.refused.Add(1)
		}
		return st
	}
}

// footprint is the run's keys in Redis by kind: how many, and their bytes
// (MEMORY USAGE of up to footprintSample keys of each kind, scaled to the
// count).
type footprint struct {
	keys  map[string]int
	bytes map[string]int64
}

const footprintSample = 2000

// keyKind names a store key by what it keeps (store/redisstore, "Keys").
func keyKind(prefix, key string) string {
	k := strings.TrimPrefix(key, prefix)
	switch {
	case strings.HasPrefix(k, "jti:"):
		return "replay marker"
	case strings.HasPrefix(k, "agent:"):
		return "agent's open count"
	case strings.HasPrefix(k, "overall:"):
		return "overall count"
	case k == "seal":
		return "seal"
	case strings.HasPrefix(k, "{"):
		if _, rest, ok := strings.Cut(k, "}:"); ok {
			kind, _, _ := strings.Cut(rest, ":")
			if kind == "jti" { // a marker kept with its owner's records
				return "replay marker"
			}
			return "owner " + kind
		}
	}
	return "other"
}

func measureRedis(ctx context.Context, cl *redis.Client, prefix string) (footprint, error) {
	fp := footprint{keys: map[string]int{}, bytes: map[string]int64{}}
	sampled := map[string]int{}
	sampledBytes := map[string]int64{}
	iter := cl.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		pipe := cl.Pipeline()
		cmds := make([]*redis.IntCmd, len(batch))
		for i, k := range batch {
			cmds[i] = pipe.MemoryUsage(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return err
		}
		for i, k := range batch {
			if n, err := cmds[i].Result(); err == nil {
				kind := keyKind(prefix, k)
				sampled[kind]++
				sampledBytes[kind] += n
			}
		}
		batch = batch[:0]
		return nil
	}
	for iter.Next(ctx) {
		k := iter.Val()
		kind := keyKind(prefix, k)
		fp.keys[kind]++
		if fp.keys[kind] <= footprintSample {
			batch = append(batch, k)
			if len(batch) == 500 {
				if err := flush(); err != nil {
					return fp, err
				}
			}
		}
	}
	if err := iter.Err(); err != nil {
		return fp, err
	}
	if err := flush(); err != nil {
		return fp, err
	}
	for kind, n := range fp.keys {
		if sampled[kind] > 0 {
			fp.bytes[kind] = sampledBytes[kind] * int64(n) / int64(sampled[kind])
		}
	}
	return fp, nil
}

func (fp footprint) print(w io.Writer, m madeUpStats) {
	var total int64
	for _, kind := range slices.Sorted(mapKeys(fp.keys)) {
		n, b := fp.keys[kind], fp.bytes[kind]
		total += b
		fmt.Fprintf(w, "redis %-27s %8d keys %10d bytes (%d B each)\n", kind, n, b, b/int64(max(n, 1)))
	}
	ops := fp.keys["owner op"]
	var perOp int64
	for kind, b := range fp.bytes {
		if strings.HasPrefix(kind, "owner ") || kind == "agent's open count" {
			perOp += b
		}
	}
	fmt.Fprintf(w, "redis total %d bytes; per stored operation (its owner's and agent's keys) ≈ %d B; per replay marker ≈ %d B\n",
		total, perOp/int64(max(ops, 1)), fp.bytes["replay marker"]/int64(max(fp.keys["replay marker"], 1)))
	fmt.Fprintf(w, "made-up agents: %d agents stored %d open operations (of %d tries, %d refused with 429), none performed; the overall cap of open operations is %d\n",
		m.agents, m.stored, m.tried, m.refused, hostileMaxOpen)
}
