package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
)

// Form is a form the checker would submit while looking for the gated
// action, as List reports it.
type Form struct {
	Method string `json:"method"`
	URL    string `json:"url"`
	// Page is the page the form is on; "" for Config.Action.
	Page string `json:"page,omitempty"`
	// Fields is what the checker would send, urlencoded (or the JSON body
	// of Config.Action); the value of a field named like a CSRF token is
	// shown as "…".
	Fields string `json:"fields"`
	// Choice is a field whose other values (Others) the checker also
	// sends, to ask for other terms.
	Choice string   `json:"choice,omitempty"`
	Others []string `json:"others,omitempty"`
	// SignedIn: found by the signed-in browser only (with a token URL),
	// which submits forms when looking for the account's action.
	SignedIn bool `json:"signed_in,omitempty"`
	// Skipped says why the checker never submits this form (a sign-in or
	// sign-out form, a search, the join); "" for one it submits.
	Skipped string `json:"skipped,omitempty"`
	// Via is the front-end framework that sends the request, as the
	// checker then sends it: "htmx" (an element with hx-post, hx-put,
	// hx-patch or hx-delete: HX-Request and its hx-headers) or "turbo" (a
	// form on a page that loads Turbo: Turbo's Accept, its X-CSRF-Token
	// from the csrf-token meta, Turbo-Frame); "" for a form's own
	// submission.
	Via string `json:"via,omitempty"`
	// Headers names the headers the checker adds (their values, which may
	// be tokens, are never shown).
	Headers []string `json:"headers,omitempty"`
}

// Listing is what List found.
type Listing struct {
	Site  string `json:"site"`
	Start string `json:"start"`
	// Forms are the forms found, those the checker would submit first.
	Forms []Form `json:"forms"`
	// Notes say how the crawl went: whether the browser could join, what
	// it could not load.
	Notes []string `json:"notes,omitempty"`
}

// List crawls the site as Run does and returns the forms Run would submit
// to find the gated action, and those it leaves alone, without submitting
// any: the browser only loads pages (and joins the agent's Session, as
// Run does, through the site's join; with a token URL, a signed-in one
// too). With Config.Action, that action is the only one Run submits, and
// List returns it without crawling.
func List(ctx context.Context, cfg Config) (Listing, error) {
	c, err := newChecker(cfg)
	if err != nil {
		return Listing{}, err
	}
	l := Listing{Site: c.origin, Start: c.cfg.StartPath}
	if cfg.Action != "" {
		a, _ := parseAction(cfg.Action)
		a.url = c.origin + a.url
		l.Forms = []Form{formOf(a, "")}
		l.Notes = append(l.Notes, "the action is named (-action): the checker submits only it, and no crawl is made")
		return l, nil
	}
	if err := c.startAgents(); err != nil {
		return Listing{}, err
	}
	defer c.stopAgents()
	if !c.checkDiscovery(ctx) {
		l.Notes = append(l.Notes, "poppy.json lists no operations endpoint or join: crawling as a browser joined to nothing")
	} else if c.cfg.Login != "" {
		// Signing in submits the login form, and only it.
		cs, err := c.signIn(ctx)
		if err != nil {
			return l, err
		}
		c.cookies = append(slices.Clone(c.cookies), cs...)
		l.Notes = append(l.Notes, "signed in through the login form (Login): the only form submitted")
	}
	b := c.newBrowser()
	if c.disc.join != "" {
		if err := b.join(ctx, c.a.session(false), joinOpts{declare: true}); err != nil {
			l.Notes = append(l.Notes, fmt.Sprintf("the join failed (%v): crawling as a browser joined to nothing", err))
		}
	}
	forms, skipped := b.crawlAll(ctx)
	slices.SortStableFunc(forms, func(x, y *action) int { return boolRank(x.choice == "") - boolRank(y.choice == "") })
	seen := map[string]bool{}
	for _, f := range forms {
		seen[f.method+" "+f.url] = true
		l.Forms = append(l.Forms, formOf(f, ""))
	}
	if c.cfg.TokenURL != "" {
		sb := c.newBrowser()
		if err := sb.join(ctx, c.a.session(true), joinOpts{signedIn: true, declare: true}); err != nil {
			l.Notes = append(l.Notes, fmt.Sprintf("the signed-in join failed: %v", err))
		} else {
			more, skippedIn := sb.crawlAll(ctx)
			for _, f := range more {
				if !seen[f.method+" "+f.url] {
					seen[f.method+" "+f.url] = true
					fm := formOf(f, "")
					fm.SignedIn = true
					l.Forms = append(l.Forms, fm)
				}
			}
			skipped = append(skipped, skippedIn...)
		}
	}
	done := map[string]bool{}
	for _, f := range skipped {
		if done[f.method+" "+f.url] {
			continue
		}
		done[f.method+" "+f.url] = true
		why := "it is the browser join"
		if f.url != c.disc.join {
			low := strings.ToLower(f.url)
			if u, err := url.Parse(f.url); err == nil {
				low = strings.ToLower(u.Path)
			}
			i := slices.IndexFunc(skipForm, func(w string) bool { return strings.Contains(low, w) })
			why = "its path names " + `"` + skipForm[max(i, 0)] + `"` + ": the checker never submits sign-in, sign-out, sign-up, reset, search or session forms"
		}
		l.Forms = append(l.Forms, formOf(f, why))
	}
	if len(forms) == 0 {
		l.Notes = append(l.Notes, fmt.Sprintf("no POST form and no htmx or Turbo request found from %s: name the action with -action", c.cfg.StartPath))
	}
	return l, nil
}

func formOf(a *action, skipped string) Form {
	f := Form{Method: a.method, URL: a.url, Page: a.page, Choice: a.choice, Others: a.others, Skipped: skipped, Via: a.framework}
	for k := range a.request("", "").header {
		f.Headers = append(f.Headers, k)
	}
	slices.Sort(f.Headers)
	if a.json != nil {
		f.Fields = string(a.json)
	} else {
		f.Fields = redactedFields(a.fields)
	}
	return f
}

// WriteText writes the listing for a person: the forms the checker would
// submit, in the order it would, then those it never submits.
func (l Listing) WriteText(w io.Writer) {
	fmt.Fprintf(w, "forms of %s the checker would submit, crawling from %s (none was submitted):\n", l.Site, l.Start)
	n := 0
	for _, f := range l.Forms {
		if f.Skipped != "" {
			continue
		}
		n++
		fmt.Fprintf(w, "  %d. %s\n", n, strings.TrimSpace(f.Method+" "+f.URL+" "+f.Fields))
		var more []string
		if f.Page != "" {
			more = append(more, "on "+f.Page)
		}
		if f.Choice != "" && len(f.Others) > 0 {
			more = append(more, fmt.Sprintf("also with %s=%s, to ask for other terms", f.Choice, strings.Join(f.Others, " or ")))
		}
		if f.SignedIn {
			more = append(more, "submitted signed in only")
		}
		if f.Via != "" {
			more = append(more, "sent as "+f.Via+" sends it")
		}
		if len(f.Headers) > 0 {
			more = append(more, "with the headers "+strings.Join(f.Headers, ", ")+" (values not shown)")
		}
		if len(more) > 0 {
			fmt.Fprintf(w, "     %s\n", strings.Join(more, "; "))
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	first := true
	for _, f := range l.Forms {
		if f.Skipped == "" {
			continue
		}
		if first {
			fmt.Fprintln(w, "never submitted:")
			first = false
		}
		fmt.Fprintf(w, "  %s %s (%s)\n", f.Method, f.URL, f.Skipped)
	}
	for _, note := range l.Notes {
		fmt.Fprintf(w, "note: %s\n", note)
	}
}

// WriteJSON writes the listing as one JSON object.
func (l Listing) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(l)
}
