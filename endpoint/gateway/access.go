package gateway

import (
	"fmt"
	"strings"
)

// AgentRules says, in plain words, what a browser an agent joined may do
// through the gateway under this config: which requests are gated, which
// unsafe ones pass without approval, what is refused, how paths and
// method overrides are read, and when the website is told whom a request
// is for. opsgate-gateway -check-config prints it.
func (c *Config) AgentRules() string {
	var b strings.Builder
	fmt.Fprintf(&b, "What a browser joined to an agent's Session may do (%s):\n", c.file)
	if c.routing == routingStrict {
		b.WriteString("  paths: routing: strict: matched with their case and trailing slash, after decoding once and removing dot segments\n")
	} else {
		b.WriteString("  paths: matched whatever their case, one trailing slash ignored, after decoding once and removing dot segments (routing: lenient)\n")
	}
	b.WriteString("  GET, HEAD, OPTIONS: always proxied\n")
	if len(c.actions) == 0 {
		b.WriteString("  gated: nothing\n")
	}
	for _, a := range c.actions {
		how := "its key, terms and summary from the config"
		if a.describe != nil {
			how = "described by " + a.describe.String()
		}
		var reads []string
		for _, src := range []string{"path", "query", "form", "json"} {
			for _, n := range a.fields[src] {
				reads = append(reads, "{"+src+"."+n+"}")
			}
		}
		if len(reads) > 0 {
			how += "; reads " + strings.Join(reads, " ")
		}
		switch {
		case a.reads("form"):
			how += " (a form body)"
		case a.reads("json"):
			how += " (a JSON body)"
		}
		fmt.Fprintf(&b, "  gated (line %d): %s: waits for approval, %s\n", a.line, a.pattern, how)
	}
	for _, p := range c.pass {
		fmt.Fprintf(&b, "  passes without approval (line %d): %s\n", p.line, p.source)
	}
	b.WriteString("  refused (403): every other POST, PUT, PATCH, DELETE or other unsafe request; add it to pass: if it needs no approval\n")
	b.WriteString("  refused (400): a path encoded twice or holding \\ or ;, a compressed body")
	if len(c.overrides) == 0 {
		b.WriteString(", a _method field or member (method override headers are removed)\n")
	} else {
		fmt.Fprintf(&b, "; method override honoured as the website does: %s (a POST's overridden method is matched)\n", strings.Join(c.overrides, ", "))
	}
	b.WriteString("  refused (400) before any operation: a field the terms read sent twice, a body of another content type than the placeholders read, a body that does not parse\n")
	fmt.Fprintf(&b, "  timeouts: body %s, upstream's answer %s, headers %s, idle %s\n", c.timeouts.body, c.timeouts.upstream, c.timeouts.header, c.timeouts.idle)
	who := "on the approved repeat alone"
	if c.identityOn == identityOnJoined {
		who = "on every request of an agent's browser"
	}
	signed := "signed with " + c.identityKeyEnv
	if c.identityKey == nil {
		signed = "NOT signed (no identity_key_env)"
	}
	fmt.Fprintf(&b, "  identity (%sAgent, %sUser, %sAccount): %s, %s\n", c.identityPrefix, c.identityPrefix, c.identityPrefix, who, signed)
	if len(c.ownLogin) > 0 {
		fmt.Fprintf(&b, "  a browser with the website's own login (%s) is handled as an ordinary one: the website's own approval flow must confirm with the person (W56)\n", strings.Join(c.ownLogin, ", "))
	}
	return b.String()
}
