package kit_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/e2e/internal/browsertest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/templates"
	"github.com/opsgate/opsgate/webkit"
)

// chromeSite is a website that dresses the kit's pages in its own chrome
// (Kit.Chrome), with its own stylesheet served as /site.css.
type chromeSite struct {
	name   string
	css    string           // "" for the zero Chrome: no site stylesheet at all
	chrome templates.Chrome // Stylesheets is filled in
	check  func(t *testing.T, scheme string, m chromeMeasure)
}

// The light site of the issue: a stylesheet that says what its body text,
// links and buttons look like, and nothing about dark mode.
const lightSiteCSS = `
body { margin: 0; color: #1a1a1a; background: #fff; font-family: Georgia, serif; }
a { color: #0645ad; }
a:visited { color: #0b0080; }
.site-header, .site-footer { padding: 1rem 2rem; background: #f3f3f3; }
.site-header a { font-weight: bold; text-decoration: none; }
button { background: #0b57d0; color: #fff; border: 1px solid #0842a0; border-radius: 4px; padding: .5rem 1rem; }
`

// A minimal site: link colour and its own (generic) variables, no body
// colours: the browser's defaults set its page.
const minimalSiteCSS = `
:root { --fg: #222; --accent: #ffd400; --muted: #ccc; --card: #f0f0f0; --bg: #fff; }
a { color: #0645ad; }
`

// A site with a dark mode that says so (color-scheme), and sets the card's
// background through the kit's variable.
const darkAwareSiteCSS = `
:root { color-scheme: light dark; --opsgate-card: light-dark(#fffdf7, #202124); }
body { margin: 0; color: #1a1a1a; background: #fff; font-family: system-ui, sans-serif; }
a { color: #0645ad; }
.site-header, .site-footer { padding: 1rem 2rem; }
@media (prefers-color-scheme: dark) {
  body { color: #e8e8e8; background: #121212; }
  a { color: #8ab4f8; }
}
`

// A site whose dark mode is a media query only: its body text turns light
// in dark mode, but it never says color-scheme.
const darkByQuerySiteCSS = `
body { margin: 0; color: #1a1a1a; background: #fff; }
a { color: #0645ad; }
@media (prefers-color-scheme: dark) {
  body { color: #eeeeee; background: #181818; }
  a { color: #8ab4f8; }
}
`

// TestBrowserChromeContrast serves the kit's pages (the waiting page with
// a Continue button and with a Continue link, W65 W62; "try again shortly";
// "not known yet") inside sites' chrome and with none, in real Chromium
// under prefers-color-scheme light and dark, and a Content-Security-Policy
// that allows no inline style. Every text of the card (heading,
// paragraphs, state line, the Continue control's text on its own
// background) and the way back under it reach WCAG 2.x AA contrast,
// 4.5:1, against the background they are drawn on. A site's button rule
// styles the Continue button; its own variables named like the kit's old
// ones (--accent, --card) don't leak into the card.
//
// OPSGATE_SCREENSHOTS=dir keeps the screenshots there (they go to a
// temporary directory otherwise).
func TestBrowserChromeContrast(t *testing.T) {
	needChromium(t)
	shots := os.Getenv("OPSGATE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	header := templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, `<header class="site-header"><a href="/">Acme Hardware</a> · <a href="/orders">Orders</a></header>`)
		return err
	})
	footer := templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, `<footer class="site-footer"><p>© Acme Hardware · <a href="/help">Help</a></p></footer>`)
		return err
	})
	sites := []chromeSite{
		{
			name: "light site", css: lightSiteCSS,
			chrome: templates.Chrome{SiteName: "Acme Hardware", BackURL: "/orders", Header: header, Footer: footer},
			check: func(t *testing.T, scheme string, m chromeMeasure) {
				// The site's button rule is the Continue button's style
				// (a Continue link keeps the kit's: the site's a {} is
				// for text links).
				if b, ok := m["button"]; ok && b.Tag == "button" && (b.Background != "rgb(11, 87, 208)" || b.Radius != "4px") {
					t.Errorf("the site's button{} rule lost to the kit's: background %s, border-radius %s; want rgb(11, 87, 208), 4px", b.Background, b.Radius)
				}
				// A light site keeps a light card, whatever the OS prefers.
				if c := m["card"]; luminance(c.parsedBackground(t)) < 0.5 {
					t.Errorf("%s: a light site's card is dark: %s", scheme, c.Background)
				}
			},
		},
		{
			name: "minimal site", css: minimalSiteCSS,
			chrome: templates.Chrome{SiteName: "Acme Hardware", BackURL: "/orders"},
			check: func(t *testing.T, scheme string, m chromeMeasure) {
				// Its own --card and --accent are not the kit's.
				if c := m["card"]; c.Background == "rgb(240, 240, 240)" {
					t.Errorf("the site's own --card coloured the card")
				}
				if b, ok := m["button"]; ok && b.Background == "rgb(255, 212, 0)" {
					t.Errorf("the site's own --accent coloured the Continue control")
				}
				// The kit leaves the site's page to the site: no dark
				// canvas in a site that never asked for one.
				if m["page"].Scheme != "normal" {
					t.Errorf("%s: the kit set color-scheme %q on a site's page", scheme, m["page"].Scheme)
				}
			},
		},
		{
			name: "dark-aware site", css: darkAwareSiteCSS,
			chrome: templates.Chrome{SiteName: "Acme Hardware", BackURL: "/orders", Header: header, Footer: footer},
			check: func(t *testing.T, scheme string, m chromeMeasure) {
				// It set the card's background through --opsgate-card.
				want := map[string]string{"light": "rgb(255, 253, 247)", "dark": "rgb(32, 33, 36)"}[scheme]
				if c := m["card"]; c.Background != want {
					t.Errorf("%s: card background %s, want the site's --opsgate-card %s", scheme, c.Background, want)
				}
			},
		},
		{
			name: "dark-by-query site", css: darkByQuerySiteCSS,
			chrome: templates.Chrome{SiteName: "Acme Hardware", BackURL: "/orders", Footer: footer},
		},
		{
			name: "zero Chrome",
			check: func(t *testing.T, scheme string, m chromeMeasure) {
				// The kit's own page follows the OS.
				if l := luminance(m["card"].parsedBackground(t)); (scheme == "dark") != (l < 0.2) {
					t.Errorf("%s: the plain card's background %s doesn't follow the OS", scheme, m["card"].Background)
				}
			},
		},
	}

	dir := t.TempDir()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browsertest.ChromiumPath), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(dir),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true))
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(browser); err != nil { // start it
		t.Fatal(err)
	}

	for _, site := range sites {
		t.Run(site.name, func(t *testing.T) {
			srv := chromeSiteServer(t, site)
			for _, scheme := range []string{"light", "dark"} {
				t.Run(scheme, func(t *testing.T) {
					tab, cancel := chromedp.NewContext(browser)
					defer cancel()
					tab, cancelTimeout := context.WithTimeout(tab, 60*time.Second)
					defer cancelTimeout()
					consoleCtx, stopConsole := context.WithCancel(tab)
					defer stopConsole()
					console := chromedp.Console(consoleCtx)
					do := func(steps ...chromedp.Action[chromedp.Void]) {
						t.Helper()
						if err := chromedp.Do(tab, steps...); err != nil {
							t.Fatal(err)
						}
					}
					if _, err := chromedp.Call(tab, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
						Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
					}); err != nil {
						t.Fatal(err)
					}
					do(chromedp.EmulateViewport(900, 720), chromedp.Navigate(srv.URL+"/join"), chromedp.WaitVisible(chromedp.CSS("#joined")))

					for _, view := range []string{"waiting-button", "waiting-link", "unavailable", "unknown", "ratelimited"} {
						switch view {
						case "waiting-button":
							do(chromedp.Navigate(srv.URL+"/order"), chromedp.Click(chromedp.CSS("#go"), chromedp.NodeVisible), chromedp.WaitVisible(chromedp.CSS("#opsgate-waiting")))
						case "waiting-link":
							do(chromedp.Navigate(srv.URL+"/exchange?order=ord_9&size=M"), chromedp.WaitVisible(chromedp.CSS("#opsgate-waiting")))
						case "unknown":
							// Approved, its handler fails: the outcome is not known (W142).
							do(chromedp.Navigate(srv.URL+"/unknown?n="+scheme), chromedp.WaitVisible(chromedp.CSS("#opsgate-waiting")))
							srv.approve(srv.lastRef())
							do(chromedp.Navigate(srv.URL+"/unknown?n="+scheme), chromedp.WaitVisible(chromedp.CSS(".opsgate-card:not(#opsgate-waiting)")))
						default:
							do(chromedp.Navigate(srv.URL+"/"+view), chromedp.WaitVisible(chromedp.CSS(".opsgate-card")))
						}
						m := measure(t, tab)
						shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
						if err != nil {
							t.Fatal(err)
						}
						file := filepath.Join(shots, strings.ReplaceAll(site.name, " ", "-")+"-"+view+"-"+scheme+".png")
						if err := os.WriteFile(file, shot, 0o644); err != nil {
							t.Fatal(err)
						}
						t.Run(view, func(t *testing.T) {
							for _, part := range []string{"heading", "paragraph", "state", "button", "back"} {
								e, ok := m[part]
								if !ok {
									continue
								}
								ratio := contrast(e.parsedColor(t), e.parsedBackground(t))
								t.Logf("%s %s: %s on %s: %.2f:1", scheme, part, e.Color, e.Background, ratio)
								if ratio < 4.5 {
									t.Errorf("%s: %s text %s on %s has contrast %.2f:1, want ≥ 4.5:1 (WCAG AA); see %s", scheme, part, e.Color, e.Background, ratio, file)
								}
							}
							for _, need := range []string{"card", "heading", "paragraph"} {
								if _, ok := m[need]; !ok {
									t.Errorf("the page has no %s to measure", need)
								}
							}
							if strings.HasPrefix(view, "waiting") {
								if _, ok := m["button"]; !ok {
									t.Errorf("the waiting page has no Continue control")
								}
							}
							if site.check != nil {
								site.check(t, scheme, m)
							}
						})
					}

					// The kit's style is a file: nothing inline broke the CSP.
					time.AfterFunc(300*time.Millisecond, stopConsole)
					for msg, err := range console {
						if err != nil {
							break
						}
						if msg.Type == chromedp.ConsoleException || strings.Contains(msg.Text, "Content Security Policy") {
							t.Errorf("browser console %s: %s", msg.Type, msg.Text)
						}
					}
				})
			}
		})
	}
	t.Logf("screenshots in %s", shots)
}

// chromeSiteServer is the site: a Kit wearing its chrome, /join binds the
// browser to an agent's Session, /order holds a form whose POST is gated,
// a GET /exchange is gated too (its Continue is a link), /unavailable
// and /unknown are the kit's 503 pages and /ratelimited its 429.
func chromeSiteServer(t *testing.T, site chromeSite) *kitSite {
	s := newKitSite(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'")
			h.ServeHTTP(w, r)
		})
	})
	k := s.Kit
	k.Store = storedriver.AsStore(refusingStore{storedriver.Steps(k.Store)})
	k.Chrome = site.chrome
	if site.css != "" {
		k.Chrome.Stylesheets = []string{"/site.css"}
	}
	exchange := k.Gate(func(r *http.Request) (webkit.Action, error) {
		order, size := r.FormValue("order"), r.FormValue("size")
		if order == "" {
			return webkit.Action{}, fmt.Errorf(`field "order" is required`)
		}
		return webkit.Action{Key: "exchange:" + order, Terms: map[string]string{"order_id": order, "size": size}}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the exchange ran: nothing approved it")
	}))
	s.Mux.Handle("/exchange", exchange)
	s.Mux.HandleFunc("/order", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><meta charset="utf-8"><title>Order</title>
<form method="post" action="/exchange"><input name="order" value="ord_7"><input name="size" value="L"><button id="go">Exchange</button></form>`)
	})
	// The kit's refusals, each its own gated GET: the store refuses two
	// (refusingStore), and the third's handler fails once approved.
	for _, name := range []string{"unavailable", "ratelimited", "unknown"} {
		s.Mux.Handle("/"+name, k.Gate(func(r *http.Request) (webkit.Action, error) {
			return webkit.Action{Key: name + r.URL.RawQuery, Terms: map[string]string{"page": name}}, nil
		})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "the handler failed", http.StatusInternalServerError)
		})))
	}
	s.Mux.HandleFunc("/site.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css")
		io.WriteString(w, site.css)
	})
	return s
}

// chromeElement is what the page says of one element: its computed text
// colour, and the background it is drawn on (its own and its ancestors'
// backgrounds composed over the canvas).
type chromeElement struct {
	Color      string   `json:"color"`
	Background string   `json:"background"` // composed in Go from Layers
	Layers     []string `json:"layers"`     // background-color from the canvas down to the element
	Radius     string   `json:"radius"`
	Scheme     string   `json:"scheme"`
	Tag        string   `json:"tag"`
}

type chromeMeasure map[string]*chromeElement

// measureScript reads, for each part of the page, the computed colour and
// the background colours from the canvas (the system colour Canvas in the
// root's colour scheme) down to the element.
const measureScript = `(() => {
  const canvas = document.createElement("div");
  canvas.style.backgroundColor = "Canvas";
  document.documentElement.append(canvas);
  const canvasColor = getComputedStyle(canvas).backgroundColor;
  canvas.remove();
  const parts = {
    card: ".opsgate-card",
    heading: ".opsgate-card h1",
    paragraph: ".opsgate-card p:not(.opsgate-state)",
    state: ".opsgate-card .opsgate-state",
    button: ".opsgate-card .opsgate-button",
    back: ".opsgate-back a",
    page: "html",
  };
  const out = {};
  for (const [name, sel] of Object.entries(parts)) {
    const el = document.querySelector(sel);
    if (!el) continue;
    const layers = [];
    for (let e = el; e; e = e.parentElement) layers.unshift(getComputedStyle(e).backgroundColor);
    layers.unshift(canvasColor);
    const cs = getComputedStyle(el);
    out[name] = { color: cs.color, layers, radius: cs.borderTopLeftRadius, scheme: cs.colorScheme, tag: el.localName };
  }
  return out;
})()`

func measure(t *testing.T, tab context.Context) chromeMeasure {
	t.Helper()
	// A page reached by a click (the waiting page after the form's POST)
	// can show its elements before its stylesheets, the site's and the
	// kit's, have loaded: measure it as a person sees it, once loaded.
	for {
		done, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.readyState === "complete"`))
		if err != nil {
			t.Fatalf("the page never finished loading: %v", err)
		}
		if done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	m, err := chromedp.Run(tab, chromedp.Evaluate[chromeMeasure](measureScript))
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range m {
		bg := [3]float64{}
		for i, layer := range e.Layers {
			c, err := parseCSSColor(layer)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if i == 0 {
				c[3] = 1 // the canvas is opaque
			}
			bg = over(c, bg)
		}
		e.Background = fmt.Sprintf("rgb(%d, %d, %d)", int(math.Round(bg[0])), int(math.Round(bg[1])), int(math.Round(bg[2])))
		// An element's own opaque background reads as Chromium says it.
		if own, err := parseCSSColor(e.Layers[len(e.Layers)-1]); err == nil && own[3] == 1 {
			e.Background = e.Layers[len(e.Layers)-1]
		}
	}
	return m
}

func (e *chromeElement) parsedColor(t *testing.T) [3]float64 {
	t.Helper()
	fg, err := parseCSSColor(e.Color)
	if err != nil {
		t.Fatal(err)
	}
	return over(fg, e.parsedBackground(t))
}

func (e *chromeElement) parsedBackground(t *testing.T) [3]float64 {
	t.Helper()
	bg, err := parseCSSColor(e.Background)
	if err != nil {
		t.Fatal(err)
	}
	return [3]float64{bg[0], bg[1], bg[2]}
}

// over composes the colour c (with its alpha) over the opaque bg.
func over(c [4]float64, bg [3]float64) [3]float64 {
	a := c[3]
	return [3]float64{c[0]*a + bg[0]*(1-a), c[1]*a + bg[1]*(1-a), c[2]*a + bg[2]*(1-a)}
}

// parseCSSColor reads a computed colour as Chromium serializes it:
// rgb(r, g, b) or rgba(r, g, b, a), channels 0–255.
func parseCSSColor(s string) ([4]float64, error) {
	s = strings.TrimSpace(s)
	var body string
	switch {
	case strings.HasPrefix(s, "rgba(") && strings.HasSuffix(s, ")"):
		body = s[5 : len(s)-1]
	case strings.HasPrefix(s, "rgb(") && strings.HasSuffix(s, ")"):
		body = s[4 : len(s)-1]
	default:
		return [4]float64{}, fmt.Errorf("colour %q: want rgb() or rgba()", s)
	}
	parts := strings.Split(body, ",")
	if len(parts) != 3 && len(parts) != 4 {
		return [4]float64{}, fmt.Errorf("colour %q: want 3 or 4 channels", s)
	}
	c := [4]float64{0, 0, 0, 1}
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return [4]float64{}, fmt.Errorf("colour %q: %v", s, err)
		}
		c[i] = v
	}
	return c, nil
}

// luminance is WCAG 2.x relative luminance of an sRGB colour (0–255).
func luminance(c [3]float64) float64 {
	lin := func(v float64) float64 {
		v /= 255
		if v <= 0.04045 {
			return v / 12.92
		}
		return math.Pow((v+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(c[0]) + 0.7152*lin(c[1]) + 0.0722*lin(c[2])
}

// contrast is the WCAG 2.x contrast ratio of two opaque colours.
func contrast(a, b [3]float64) float64 {
	la, lb := luminance(a), luminance(b)
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05)
}

func TestContrastRatio(t *testing.T) {
	for _, c := range []struct {
		a, b [3]float64
		want float64
	}{
		{[3]float64{0, 0, 0}, [3]float64{255, 255, 255}, 21},
		{[3]float64{255, 255, 255}, [3]float64{255, 255, 255}, 1},
		{[3]float64{0x77, 0x77, 0x77}, [3]float64{255, 255, 255}, 4.48}, // the famous just-too-light grey
		{[3]float64{0x76, 0x76, 0x76}, [3]float64{255, 255, 255}, 4.54},
	} {
		if got := contrast(c.a, c.b); math.Abs(got-c.want) > 0.01 {
			t.Errorf("contrast(%v, %v) = %.3f, want %.2f", c.a, c.b, got, c.want)
		}
	}
	for _, bad := range []string{"", "red", "rgb(1, 2)", "rgb(a, b, c)", "color(srgb 1 0 0)"} {
		if _, err := parseCSSColor(bad); err == nil {
			t.Errorf("parseCSSColor(%q) gave no error", bad)
		}
	}
	if c, err := parseCSSColor("rgba(0, 0, 0, 0.06)"); err != nil || c[3] != 0.06 {
		t.Errorf("parseCSSColor rgba: %v %v", c, err)
	}
}
