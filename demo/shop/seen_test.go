package shop

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/demo/shop/views"
	"github.com/opsgate/opsgate/internal/headers"
)

// "What the shop saw": a joined browser lists its agent's and User's
// latest requests, its browser's and its Session JWTs', each with the
// kit's decision and its reason, refusals included; another agent's
// browser sees none of them, and a browser joined to no Session only
// what the page is for.
func TestWhatTheShopSaw(t *testing.T) {
	t.Parallel()
	s, site, _ := newHarnessShop(t)
	agent := site.NewAgent()
	sess := agent.Session("usr_1")
	b := joinAs(t, sess)
	res := exchangeTo(b, "stormline-insulated-m")
	if res.Ref == "" {
		t.Fatalf("no ref: %d", res.StatusCode)
	}
	sess.Lookup(res.Ref)
	// A Session JWT the shop refuses, claiming this agent and User.
	claims, _ := json.Marshal(map[string]string{"iss": agent.ClientID(), "sub": "usr_1", "sid": sess.SID})
	forged := "e30." + base64.RawURLEncoding.EncodeToString(claims) + ".c2ln"
	req := httptest.NewRequest(http.MethodPost, PathOperations, bytes.NewReader([]byte(`{"ref":"`+res.Ref+`"}`)))
	req.Header.Set(headers.Session, forged)
	req.Header.Set(headers.Version, "1.0")
	req.Header.Set(headers.Extensions, `"operations";v="3"`)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), `"error_description":"session JWT: JOSE header alg is missing`) {
		t.Fatalf("the forged JWT: %d %s", w.Code, w.Body)
	}

	page := b.Get(PathSeen)
	body := string(page.Body)
	for _, want := range []string{"What the shop saw", agent.ClientID(), "gate waiting", "endpoint operation", "endpoint unauthenticated (session)",
		"session JWT: JOSE header alg is missing", "unverified", "/orders/ord_7Hk2/items/itm_4Qa/exchange"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, forged) || strings.Contains(body, res.Ref) {
		t.Error("the page shows a token or a whole ref")
	}
	var got struct {
		Joined  bool              `json:"joined"`
		Entries []views.SeenEntry `json:"entries"`
	}
	if err := json.Unmarshal(b.Get(PathSeen+"?format=json").Body, &got); err != nil || !got.Joined || len(got.Entries) < 4 {
		t.Fatalf("JSON: %v %+v", err, got)
	}
	if got.Entries[0].Path != PathOperations || got.Entries[0].Status != 401 || !got.Entries[0].Unverified || got.Entries[0].Why == "" {
		t.Errorf("the newest entry: %+v", got.Entries[0])
	}

	other := joinAs(t, site.NewAgent().Session("usr_1"))
	if body := string(other.Get(PathSeen).Body); strings.Contains(body, agent.ClientID()) || strings.Contains(body, "alg is missing") {
		t.Error("another agent's browser sees this agent's requests")
	}
	if body := string(site.Browser().Get(PathSeen).Body); !strings.Contains(body, "Join your agent's browser to the shop to see its own") || strings.Contains(body, agent.ClientID()) {
		t.Error("a browser joined to no Session sees requests, or is not told")
	}
}
