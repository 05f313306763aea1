package refagent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/opsgate/opsgate/store"
)

// Decision is a Decider's answer.
type Decision struct {
	Approve bool
	// Approver is user (the user approved, A20) or agent (on the user's
	// standing instruction, A23).
	Approver store.Approver
	// InputType is how the user answered ("typed", "tap", "voice"); only
	// with user (A35). No personal data (A38).
	InputType string
	// At is when it was approved (approved_at, A34); zero is now.
	At time.Time
	// Withdrawn, when set, reports whether the user has since withdrawn
	// the approval, or the instruction it rests on. The agent asks it
	// right before sending, and sends nothing once it is true (A30).
	Withdrawn func() bool
}

// Decider decides whether a revision is approved (§5). Only the agent's own
// interface or the user's own instruction decides: never text from the
// Company or a page (A20, A21, A23).
type Decider interface {
	Decide(ctx context.Context, q Question) (Decision, error)
}

// DeciderFunc is a Decider from a func, for tests.
type DeciderFunc func(ctx context.Context, q Question) (Decision, error)

// Decide implements Decider.
func (f DeciderFunc) Decide(ctx context.Context, q Question) (Decision, error) { return f(ctx, q) }

// Prompt asks the user at the terminal (a user approval, A18–A20, A22):
// it shows the Company's name, the summary as plain text, the terms and
// any difference the agent found, and reads y or n.
type Prompt struct {
	In  io.Reader
	Out io.Writer
	r   *bufio.Reader
}

// Name names the decider in the agent's log.
func (p *Prompt) Name() string { return "the user (terminal)" }

// Decide implements Decider.
func (p *Prompt) Decide(ctx context.Context, q Question) (Decision, error) {
	if p.r == nil {
		p.r = bufio.NewReader(p.In)
	}
	fmt.Fprintf(p.Out, "\n%s\nApprove? [y/N] ", q.Text())
	line, err := p.r.ReadString('\n')
	if err != nil && line == "" {
		return Decision{}, fmt.Errorf("refagent: reading the answer: %w", err)
	}
	if ans := strings.ToLower(strings.TrimSpace(line)); ans == "y" || ans == "yes" {
		return Decision{Approve: true, Approver: store.ApproverUser, InputType: "typed"}, nil
	}
	return Decision{}, nil
}

// Rule is one standing instruction from the user, given on the command
// line: "exchange<=100USD" means "approve any exchange in which every amount
// of money is at most 100 USD", and "cancel" alone means "approve the
// cancellation I asked for, whatever its amounts".
//
// An operation carries no kind on the wire (§3: only its summary and
// terms), so a rule's kind is matched against the one thing that names
// the action: the path the browser's request went to. The kind is a word
// of that path, in the singular or the plural: "exchange" is POST
// /orders/…/items/…/exchange, "delivery" (or "deliveries") is POST
// /api/deliveries/…, "cancel" is POST /account/subscription/cancel. When
// a rule names a kind the request is not, the agent says which kinds the
// request's path has (Kinds).
type Rule struct {
	// Kind is a word of the path the browser's request went to (a path
	// segment, or its singular or plural: "delivery" matches deliveries),
	// such as "exchange" for POST /orders/…/items/…/exchange.
	Kind string
	// Max is the largest amount the instruction covers, in Currency; nil
	// covers any amount (the user asked for this action and told the agent
	// to approve it).
	Max      *big.Rat
	Currency string
	Text     string
}

var ruleRE = regexp.MustCompile(`^\s*([a-z][a-z0-9-]*)\s*(?:<=\s*([0-9]+(?:\.[0-9]{1,2})?)\s*([A-Z]{3}))?\s*$`)

// ParseRule parses "kind<=amountCUR", such as "exchange<=100USD", or
// "kind" alone for any amount.
func ParseRule(s string) (Rule, error) {
	m := ruleRE.FindStringSubmatch(s)
	if m == nil {
		return Rule{}, fmt.Errorf("refagent: standing instruction %q: write kind<=amountCURRENCY, such as exchange<=100USD, or a kind alone, such as cancel", s)
	}
	r := Rule{Kind: m[1], Currency: m[3], Text: strings.TrimSpace(s)}
	if m[2] != "" {
		r.Max, _ = new(big.Rat).SetString(m[2])
	}
	return r, nil
}

// money is one amount of money in the terms: an object with a string
// amount and a currency, wherever it sits ("price_difference", "refund",
// "fee", or a key the agent has never seen).
type money struct {
	path, amount, currency string
}

// moneyIn finds every amount of money in the terms, so that a rule is
// checked against all of them, not only the ones it knows by name (A24).
func moneyIn(raw json.RawMessage) ([]money, bool) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil, false
	}
	var out []money
	var walk func(p string, v any)
	walk = func(p string, v any) {
		switch v := v.(type) {
		case map[string]any:
			amt, okA := v["amount"]
			cur, okC := v["currency"].(string)
			if okA && okC {
				s, _ := amt.(string)
				if f, isNum := amt.(float64); isNum {
					s = fmt.Sprint(f)
				}
				out = append(out, money{path: p, amount: s, currency: cur})
				return
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				np := k
				if p != "" {
					np = p + "." + k
				}
				walk(np, v[k])
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", p, i), e)
			}
		}
	}
	walk("", v)
	return out, true
}

// covers reports whether the rule covers the terms: true or false, or
// unsure when the agent can't tell (A25). Every amount of money in the
// terms must be within the rule's limit and in its currency.
func (r Rule) covers(q Question) (ok, sure bool, why string) {
	u, err := url.Parse(strings.TrimPrefix(q.Action, strings.SplitN(q.Action, " ", 2)[0]+" "))
	if f := strings.Fields(q.Action); len(f) >= 2 && f[0] == "tools/call" {
		// An MCP tool (CallThrough): the words of its name are its path's,
		// exchange_item → /exchange/item.
		u, err = &url.URL{Path: "/" + strings.ReplaceAll(f[1], "_", "/")}, nil
	}
	if err != nil || !hasKind(u.Path, r.Kind) {
		kinds := "none"
		if err == nil && len(Kinds(u.Path)) > 0 {
			kinds = strings.Join(Kinds(u.Path), ", ")
		}
		return false, true, fmt.Sprintf("%q is for the kind %q; this request (%s) is of the kind %s (a rule's kind is a word of the request's path)", r.Text, r.Kind, q.Action, kinds)
	}
	amounts, readable := moneyIn(q.Operation.Terms)
	if !readable {
		return false, false, "the terms can't be read"
	}
	if r.Max == nil {
		return true, true, "the user asked the agent to approve this " + r.Kind + " whatever its amounts"
	}
	if len(amounts) == 0 {
		return false, false, "the terms have no amount the instruction can be checked against"
	}
	var within []string
	for _, m := range amounts {
		if m.currency != r.Currency {
			return false, false, fmt.Sprintf("%s is in %s, the instruction in %s", m.path, m.currency, r.Currency)
		}
		amt, ok := new(big.Rat).SetString(m.amount)
		if !ok {
			return false, false, m.path + " is not a number"
		}
		if amt.Cmp(r.Max) > 0 {
			return false, true, fmt.Sprintf("%s %s %s is more than %s", m.path, m.amount, m.currency, r.Text)
		}
		within = append(within, fmt.Sprintf("%s %s %s", m.path, m.amount, m.currency))
	}
	return true, true, strings.Join(within, ", ") + " within " + r.Text
}

// Kinds are the words of path a rule's kind can name: its segments that
// are not IDs (no "_" or digit, A27's test for an ID), in order, such as
// "orders", "items" and "exchange" for /orders/ord_7Hk2/items/itm_4Qa/exchange.
func Kinds(path string) []string {
	var out []string
	for _, s := range strings.Split(path, "/") {
		if s != "" && !strings.ContainsAny(s, "_0123456789") && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// hasKind reports whether a segment of path is kind, or its singular or
// plural (delivery, deliveries; exchange, exchanges; box, boxes).
func hasKind(path, kind string) bool {
	for _, s := range strings.Split(path, "/") {
		if sameWord(s, kind) {
			return true
		}
	}
	return false
}

func sameWord(seg, kind string) bool {
	seg, kind = strings.ToLower(seg), strings.ToLower(kind)
	if seg == "" || kind == "" {
		return false
	}
	plural := func(w string) []string {
		p := []string{w + "s", w + "es"}
		if strings.HasSuffix(w, "y") {
			p = append(p, strings.TrimSuffix(w, "y")+"ies")
		}
		return p
	}
	return seg == kind || slices.Contains(plural(kind), seg) || slices.Contains(plural(seg), kind)
}

// Standing approves as the agent (approver "agent", no input_type, A35)
// when one of the user's standing instructions covers the terms (A23,
// A24), and otherwise asks Ask, the user (A25, A26, A43). With a nil Ask
// it approves nothing else.
type Standing struct {
	Rules []Rule
	Ask   Decider
	Log   io.Writer
}

// Name names the decider in the agent's log.
func (s *Standing) Name() string { return "the standing instructions" }

// Decide implements Decider.
func (s *Standing) Decide(ctx context.Context, q Question) (Decision, error) {
	say := func(format string, args ...any) {
		if s.Log != nil {
			fmt.Fprintf(s.Log, "agent: "+format+"\n", args...)
		}
	}
	// The terms are shown once: here when Standing decides itself, or by
	// Ask when the user decides.
	show := func() { say("the operation, as the user sees it:\n%s", indent(q.Text(), "    ")) }
	reason := ""
	switch {
	case !q.AgentMayApprove:
		reason = q.Why
	case len(q.Differences) > 0:
		reason = "the agent found differences to point out (A27, A28)"
	default:
		for _, r := range s.Rules {
			ok, sure, why := r.covers(q)
			if ok {
				show()
				say("standing instruction %q covers it: %s; approving as the agent (A24)", r.Text, why)
				return Decision{Approve: true, Approver: store.ApproverAgent}, nil
			}
			if !sure {
				reason = "can't tell whether " + r.Text + " covers it: " + why + " (A25)"
			} else if reason == "" {
				reason = why
			}
		}
		if reason == "" {
			reason = "no standing instruction covers it"
		}
	}
	if s.Ask == nil {
		show()
		say("not approving: %s", reason)
		return Decision{}, nil
	}
	say("asking the user: %s", reason)
	return s.Ask.Decide(ctx, q)
}
