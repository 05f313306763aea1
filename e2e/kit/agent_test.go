package kit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
)

// The helpers below are the Mount tests' share of the endpoint's flow
// helpers (internal/opsendpoint/flow_test.go).

const origin = "https://shop.example"

var cookieKeys = [][]byte{[]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")}

// agent is a Personal Agent: its keys, and a loopback server for its
// metadata document and JWKS (local development, as the demo).
type agent struct {
	keys   *agentside.AgentKeys
	dlg    *agentside.Delegation
	server *httptest.Server
}

func newAgent(t testing.TB) *agent {
	t.Helper()
	a := &agent{}
	mux := http.NewServeMux()
	a.server = httptest.NewServer(mux)
	t.Cleanup(a.server.Close)
	keys, err := agentside.NewAgentKeys(a.server.URL+"/client", "ES256")
	if err != nil {
		t.Fatal(err)
	}
	a.keys = keys
	mux.HandleFunc("/client", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(keys.Metadata(a.server.URL+"/jwks", "Test Agent"))
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(keys.JWKS())
	})
	if a.dlg, err = keys.Delegate(time.Hour); err != nil {
		t.Fatal(err)
	}
	return a
}

// ref reads the ref from a 403's Poppy-Operation, checking its sid (A10).
func ref(t testing.TB, res *http.Response, sid string) string {
	t.Helper()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403", res.StatusCode)
	}
	gotSID, ref, err := headers.ParseOperation(res.Header.Values("Poppy-Operation"))
	if err != nil || gotSID != sid {
		t.Fatalf("Poppy-Operation: sid %q ref %q err %v; want sid %q", gotSID, ref, err, sid)
	}
	return ref
}

func userApproval(op map[string]any) string {
	return fmt.Sprintf(`operation_id=%q, revision=%q, approver="user", approved_at=%d, input_type="tap", reference="apr_%d"`,
		op["operation_id"], op["revision"], time.Now().Unix(), time.Now().UnixNano())
}
