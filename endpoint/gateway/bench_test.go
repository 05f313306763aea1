package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/webkit/webkittest"
)

// BenchmarkGateway is the gateway's cost per request against the upstream
// alone, over loopback: an ungated route, a gated route from an ordinary
// browser (passed through, never described), and, in-process through
// webkittest, a joined browser's 403 and a whole approved flow (403,
// lookup, approval, Continue proxied to the upstream).
//
//	go test ./endpoint/gateway -run '^$' -bench Gateway -benchtime 2000x
func BenchmarkGateway(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	setKeys(b)
	c, err := Parse("gateway.yaml", []byte(strings.ReplaceAll(shopConfig, "UPSTREAM", up.URL)))
	if err != nil {
		b.Fatal(err)
	}
	site := webkittest.New("https://shop.example")
	g, err := newGateway(c, slog.New(slog.DiscardHandler), options{Resolver: site.Resolver(), AccessTokens: site.AccessTokens()})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	site.Handler = g
	gw := httptest.NewServer(g)
	defer gw.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	do := func(b *testing.B, req func() *http.Request) {
		for b.Loop() {
			res, err := client.Do(req())
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				b.Fatalf("status %d", res.StatusCode)
			}
		}
	}
	get := func(base string) func() *http.Request {
		return func() *http.Request { r, _ := http.NewRequest("GET", base+"/orders", nil); return r }
	}
	post := func(base string) func() *http.Request {
		return func() *http.Request {
			r, _ := http.NewRequest("POST", base+"/orders/ord_1/exchange", strings.NewReader("size=L"))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return r
		}
	}
	b.Run("GET upstream alone", func(b *testing.B) { do(b, get(up.URL)) })
	b.Run("GET through the gateway", func(b *testing.B) { do(b, get(gw.URL)) })
	b.Run("POST upstream alone", func(b *testing.B) { do(b, post(up.URL)) })
	b.Run("POST gated route, ordinary browser, through the gateway", func(b *testing.B) { do(b, post(gw.URL)) })

	s := site.NewAgent().Session("usr_1")
	br, err := s.Join()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("joined browser's 403, in-process", func(b *testing.B) {
		for b.Loop() {
			if res := br.PostForm("/orders/ord_1/exchange", url.Values{"size": {"L"}}); res.StatusCode != http.StatusForbidden {
				b.Fatalf("%d", res.StatusCode)
			}
		}
	})
	b.Run("whole approved flow, in-process but the upstream", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			res := br.PostForm(fmt.Sprintf("/orders/o%d/exchange", i), url.Values{"size": {"L"}})
			if a := s.Approve(res.Ref); a.StatusCode != http.StatusNoContent {
				b.Fatalf("approve %d", a.StatusCode)
			}
			if again := res.Continue(); again.StatusCode != 200 {
				b.Fatalf("continue %d", again.StatusCode)
			}
		}
	})
}
