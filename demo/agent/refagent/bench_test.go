package refagent

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/demo/shop"
)

// benchShop is the demo shop on loopback, for the bench.
func benchShop(t *testing.T) (*shop.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	s, err := shop.NewServer(shop.Config{BaseURL: base, AllowLocal: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: s.Handler()}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s, base
}

// userSaysNo is a user who is asked and declines.
type userSaysNo struct {
	mu    sync.Mutex
	asked []Question
}

func (u *userSaysNo) Decide(_ context.Context, q Question) (Decision, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.asked = append(u.asked, q)
	return Decision{}, nil
}

// The reference agent passes every scenario of the demo's bench, in real
// Chromium: it exchanges the jacket under a standing instruction
// ('exchange<=100USD'), and asks a user who says no whenever it must.
// The scenarios test A07, A08, A09, A10, A15, A22, A24, A26, A27, A28,
// A29, A42, A43, A44, A45, A47, A48, A50, A51 and A52 (each names its own,
// shop.BenchScenarios).
func TestBenchEveryScenario(t *testing.T) {
	for _, sc := range shop.BenchScenarios {
		t.Run(sc.Name+" "+strings.Join(sc.Rows, " "), func(t *testing.T) {
			tab := chromium(t)
			s, base := benchShop(t)
			var log syncBuffer
			stepTimeout := 20 * time.Second
			if sc.Name == "foreign-sid" || sc.Name == "ref-in-page" {
				stepTimeout = 4 * time.Second // no ref ever comes: the wait for one ends
			}
			a := agentFor(t, Config{Shop: base, Browser: tab, StepTimeout: stepTimeout, Log: &log})
			sess, err := a.Join(t.Context(), JoinOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The scenario, chosen on the bench's page, for this Session.
			err = chromedp.Do(tab, chromedp.Navigate(base+shop.PathBench), chromedp.Click(chromedp.ID("start-"+sc.Name), chromedp.NodeVisible),
				chromedp.WaitVisible(chromedp.ID("verdict-word")))
			if err != nil {
				t.Fatal(err)
			}
			if err := ExchangeItem(tab, base, "ord_7Hk2", "itm_4Qa", "stormline-insulated-m"); err != nil {
				t.Fatal(err)
			}
			rule, _ := ParseRule("exchange<=100USD")
			user := &userSaysNo{}
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			out, err := a.Approve(ctx, &Standing{Rules: []Rule{rule}, Ask: user, Log: &log})
			v, ok := s.BenchVerdict(sess.SID)
			if !ok || v.Verdict != "pass" {
				t.Fatalf("%s: verdict %q: %s\nbench:\n%s\nresult %q, err %v\nagent:\n%s", sc.Name, v.Verdict, v.Why, strings.Join(v.Timeline, "\n"), out.Result, err, log.String())
			}
			// And what the agent made of it.
			want := map[string]string{
				"terms-differ": NotApproved, "summary-contradicts": NotApproved, "hidden-characters": NotApproved, "new-revision": NotApproved,
				"being-performed": Performed, "expired-ref": Performed, "decline-alternative": Declined,
			}[sc.Name]
			switch {
			case want != "" && (err != nil || out.Result != want):
				t.Errorf("%s: result %q, err %v; want %s\n%s", sc.Name, out.Result, err, want, log.String())
			case want == "" && (err == nil || len(a.References()) != 0):
				t.Errorf("%s: result %q, err %v, references %d; want no ref taken\n%s", sc.Name, out.Result, err, len(a.References()), log.String())
			}
			switch sc.Name {
			case "terms-differ", "summary-contradicts", "hidden-characters", "new-revision":
				if len(user.asked) == 0 {
					t.Errorf("%s: the user was never asked", sc.Name)
				}
			case "foreign-sid":
				if ig := strings.Join(a.Ignored(), "\n"); !strings.Contains(ig, "A10") {
					t.Errorf("the foreign sid's header was not ignored as A10: %q", ig)
				}
			}
			t.Logf("%s: %s (%s)", sc.Name, v.Verdict, v.Why)
		})
	}
}
