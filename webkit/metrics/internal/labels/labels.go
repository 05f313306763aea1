// Package labels keeps the metrics adapters' labels bounded: whatever a
// website names its action kinds, a metric gets at most MaxKinds of them.
package labels

import "sync"

// MaxKinds bounds the distinct action kinds a metric is labelled with;
// the kinds seen after it are counted as "other".
const MaxKinds = 64

// Kinds admits the first MaxKinds kinds it is asked about.
type Kinds struct {
	mu   sync.Mutex
	seen map[string]bool
}

// Of returns the label for kind: kind itself while the set has room or
// already holds it, "other" beyond, "" for none.
func (k *Kinds) Of(kind string) string {
	if kind == "" || kind == "other" {
		return kind
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen[kind] {
		return kind
	}
	if len(k.seen) >= MaxKinds {
		return "other"
	}
	if k.seen == nil {
		k.seen = map[string]bool{}
	}
	k.seen[kind] = true
	return kind
}

// Known reports whether route is one of the kit's routes (webkit.Event's
// Route), so an adapter never makes a metric for anything else.
func Known(route string) bool {
	switch route {
	case "gate", "endpoint", "join", "status":
		return true
	}
	return false
}
