package opsendpoint_test

import (
	"context"
	"crypto"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/join"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/opsendpoint"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// auditShop is newShop whose exchange handler answers as the size says
// ("L" 200 performed, "X" 409 not performed, "Z" 500 outcome unknown),
// and whose decline hook declines order ord_no.
func auditShop(t testing.TB, st store.Store, tokenKey crypto.Signer, runs *atomic.Int32) *shop {
	t.Helper()
	kit := webkit.New(cookieKeys...)
	kit.Store = st
	kit.Logger = slog.New(slog.DiscardHandler)
	kit.Sessions.(*webkit.CookieSessions).Insecure = true
	verifier := &siteverify.Verifier{Origin: origin, Resolver: &identity.Resolver{AllowLocal: true}, Replay: storedriver.Steps(st)}
	tokens := &identity.JWTAccessTokens{Issuer: origin, Keys: map[string]crypto.PublicKey{"shop-1": tokenKey.Public()}}
	s := &shop{kit: kit, runs: runs, tokenKey: tokenKey, mux: http.NewServeMux()}
	s.ep = opsendpoint.New(kit, opsendpoint.IdentityAuthenticator{Verifier: verifier, AccessTokens: tokens})
	s.ep.Decline = func(ctx context.Context, d opsendpoint.DeclineRequest) *webkit.Decline {
		if strings.Contains(string(d.Operation.Terms), "ord_no") {
			return &webkit.Decline{Reason: "Only the account holder can exchange this order."}
		}
		return nil
	}
	s.join = join.New(kit, origin+"/poppy/join", verifier, tokens)
	s.mux.Handle("POST /poppy/operations", s.ep)
	s.mux.Handle("POST /poppy/join", s.join)
	describe := func(r *http.Request) (webkit.Action, error) {
		a, err := describeExchange(r)
		a.Kind = "exchange"
		return a, err
	}
	s.mux.Handle("POST /orders/{order}/exchange", kit.Gate(describe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		switch r.PostFormValue("size") {
		case "X":
			http.Error(w, "out of stock", http.StatusConflict)
		case "Z":
			http.Error(w, "the warehouse did not answer", http.StatusBadGateway)
		default:
			fmt.Fprintf(w, "exchanged %s", r.PathValue("order"))
		}
	})))
	s.server = httptest.NewServer(s.mux)
	t.Cleanup(s.server.Close)
	return s
}

// auditStores are the stores the audited flow runs on: memory, a Redis,
// and a Redis Cluster (skipped without redis-server unless required).
func auditStores() map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store { return memstore.New(memstore.Config{}) },
		"redis": func(t *testing.T) store.Store {
			return redisstore.New(redistest.Start(t).Client(t), redisstore.Options{Durability: redisstore.DurableNone})
		},
		"cluster": func(t *testing.T) store.Store {
			return redisstore.New(redistest.Cluster(t), redisstore.Options{Durability: redisstore.DurableNone})
		},
	}
}

// ledger is every entry st holds, by operation.
func ledger(t *testing.T, st store.Store) map[string][]store.Entry {
	t.Helper()
	out := map[string][]store.Entry{}
	for e, err := range st.Entries(t.Context(), "", time.Now().Add(-time.Hour), time.Now().Add(time.Hour)) {
		if err != nil {
			t.Fatal(err)
		}
		out[e.Operation.ID] = append(out[e.Operation.ID], e)
	}
	return out
}

func whats(es []store.Entry) []string {
	var w []string
	for _, e := range es {
		w = append(w, e.What)
	}
	return w
}

// TestAuditedFlow: the spec's whole flow (join, 403, lookup, approval,
// repeat, performed), a decline, a 4xx and a 5xx then Resolve, through
// the real join, Gate and endpoint, leave exactly the expected audit
// entries on every store (§6, §8.1), and none carries a Session JWT, an
// access token or a cookie.
func TestAuditedFlow(t *testing.T) {
	for name, open := range auditStores() {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			var runs atomic.Int32
			s := auditShop(t, st, tokenKey(t), &runs)
			a := newAgent(t)
			b := joinBrowser(t, s, a, "ses_1", "usr_1", "acct_1", `"operations";v="3"`)
			approve := func(order, size string) (string, string) {
				t.Helper()
				r := ref(t, b.exchange(s, order, size), "ses_1")
				status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1", account: "acct_1"}) // lookup
				if status != 403 {
					t.Fatalf("lookup: %d %v", status, body)
				}
				op := body["operation"].(map[string]any)
				status, body, _ = a.call(t, s, r, agentRequest{sid: "ses_2", user: "usr_1", account: "acct_1", approval: userApproval(op)})
				if order == "ord_no" {
					if status != 403 || body["error"] != "approval_declined" {
						t.Fatalf("declined approval: %d %v", status, body)
					}
				} else if status != 204 {
					t.Fatalf("approval: %d %v", status, body)
				}
				return op["operation_id"].(string), r
			}
			performed, _ := approve("ord_ok", "L")
			if res := b.exchange(s, "ord_ok", "L"); res.StatusCode != 200 {
				t.Fatalf("repeat: %d", res.StatusCode)
			}
			declined, _ := approve("ord_no", "L")
			notDone, _ := approve("ord_4xx", "X")
			if res := b.exchange(s, "ord_4xx", "X"); res.StatusCode != 409 {
				t.Fatalf("4xx repeat: %d", res.StatusCode)
			}
			unknown, _ := approve("ord_5xx", "Z")
			if res := b.exchange(s, "ord_5xx", "Z"); res.StatusCode != 503 {
				t.Fatalf("5xx repeat: %d, want 503 (outcome unknown)", res.StatusCode)
			}
			if err := st.Resolve(t.Context(), store.Owner{Agent: a.clientID(), User: "usr_1", Account: "acct_1"}, unknown, store.OutcomePerformed, "staff:alice", time.Now()); err != nil {
				t.Fatal(err)
			}

			got := ledger(t, st)
			want := map[string][]string{
				performed: {"approval recorded", "claimed", "performed"},
				declined:  {"approval declined"},
				notDone:   {"approval recorded", "claimed", "not performed"},
				unknown:   {"approval recorded", "claimed", "outcome unknown", "resolved as performed"},
			}
			if len(got) != len(want) {
				t.Errorf("entries of %d operations, want %d: %v", len(got), len(want), got)
			}
			for id, w := range want {
				if g := whats(got[id]); !slices.Equal(g, w) {
					t.Errorf("operation %s: %q, want %q", id, g, w)
				}
			}
			for id, es := range got {
				for _, e := range es {
					if e.Owner != (store.Owner{Agent: a.clientID(), User: "usr_1", Account: "acct_1"}) || e.Instance == "" || e.TermsDigest == "" ||
						e.Operation.ID != id || e.Operation.Summary == "" || e.Approval.Approver != store.ApproverUser || e.Approval.Reference == "" {
						t.Errorf("%s %s: %+v", id, e.What, e)
					}
					wantSID, wantKind := "ses_1", "exchange" // the Gate's steps: the browser's Session
					switch e.What {
					case "approval recorded", "approval declined":
						wantSID, wantKind = "ses_2", "" // the endpoint's: the approving Session
					case "resolved as performed":
						wantSID, wantKind = "", ""
						if e.By != "staff:alice" {
							t.Errorf("resolved by %q", e.By)
						}
					}
					if e.Session != wantSID || e.Kind != wantKind {
						t.Errorf("%s %s: sid %q kind %q, want %q %q", id, e.What, e.Session, e.Kind, wantSID, wantKind)
					}
					if e.What == "approval declined" && e.Reason != "Only the account holder can exchange this order." {
						t.Errorf("decline reason %q", e.Reason)
					}
					// Never a Session JWT, an access token or a cookie: no
					// JWT-shaped value (three base64url parts) anywhere.
					if s := fmt.Sprintf("%+v", e); strings.Contains(s, "eyJ") {
						t.Errorf("%s %s carries a JWT: %s", id, e.What, s)
					}
				}
			}
			if runs.Load() != 3 {
				t.Errorf("handler ran %d times, want 3", runs.Load())
			}
		})
	}
}
