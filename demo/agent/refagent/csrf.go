package refagent

import (
	"slices"

	"github.com/opsgate/opsgate/internal/continueform"
)

// CSRF tokens are not terms (A27). A site protected by a token-in-form
// CSRF library puts a hidden field with a per-Session or per-page secret in
// every form it renders, and the browser's request carries it: nosurf's
// csrf_token, gorilla/csrf's gorilla.csrf.Token, Rails'
// authenticity_token, Django's csrfmiddlewaretoken, Laravel's and
// Symfony's _token, Express' and Spring's _csrf, ASP.NET's
// __RequestVerificationToken, Tornado's _xsrf, WordPress' _wpnonce. The
// token is never among an operation's terms (it is not what the user
// approves), so comparing it would make every action on such a site look
// like another action: a WARNING on every approval, and a standing
// instruction that never approves anything. And it is a credential of the
// user's Session with the site: the agent never prints its value.
//
// The agent knows only the request its browser sent (from the browser's
// network events, A08), not the page the form was on, so it tells a token
// by its field's name. It does not load the form's page a second time to
// see which hidden values change between loads: that would be a request
// the user did not ask for, in the user's Session, and a site that issues
// one token per rendered page (a synchronizer token) would then refuse the
// token the waiting page's Continue is about to send.

// IsCSRFField reports whether a form or JSON field of the browser's request
// is treated as a CSRF token: left out of the comparison with the terms
// (A27), and its value never printed. name is the field's name; for a JSON
// body, a member's key at any depth ("meta.csrf_token" is one). The rule
// is the kit's one (internal/continueform), which the test tools use too.
func IsCSRFField(name string) bool { return continueform.IsCSRFField(name) }

// csrfNames returns the names of the fields in asked that are CSRF tokens,
// sorted and once each, and asked without them.
func csrfNames(asked [][2]string) (names []string, rest [][2]string) {
	for _, kv := range asked {
		if kv[0] != "path" && IsCSRFField(kv[0]) {
			if !slices.Contains(names, kv[0]) {
				names = append(names, kv[0])
			}
			continue
		}
		rest = append(rest, kv)
	}
	slices.Sort(names)
	return names, rest
}
