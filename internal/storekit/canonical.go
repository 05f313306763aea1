package storekit

// canonicalAlready reports, without allocating, whether b is a JSON object
// exactly as CanonicalTerms would write it: members sorted by key with no
// duplicate, no insignificant space, and strings of printable ASCII other
// than '"' and '\' (so that no escape can be written two ways). Terms a
// website builds from a map or a sorted struct usually are; the Gate then
// skips decoding and re-encoding them on every gated request.
func canonicalAlready(b []byte) bool {
	p := canonicalScanner{b: b}
	if !p.object(0) {
		return false
	}
	return p.i == len(b)
}

type canonicalScanner struct {
	b []byte
	i int
}

// maxCanonicalDepth bounds the fast path's recursion; deeper terms take the
// decoder's path, which has its own limit.
const maxCanonicalDepth = 64

func (p *canonicalScanner) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *canonicalScanner) object(depth int) bool {
	if depth > maxCanonicalDepth || p.peek() != '{' {
		return false
	}
	p.i++
	if p.peek() == '}' {
		p.i++
		return true
	}
	var prev []byte
	for first := true; ; first = false {
		key, ok := p.str()
		if !ok || (!first && string(key) <= string(prev)) {
			return false
		}
		prev = key
		if p.peek() != ':' {
			return false
		}
		p.i++
		if !p.value(depth) {
			return false
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

func (p *canonicalScanner) array(depth int) bool {
	if depth > maxCanonicalDepth {
		return false
	}
	p.i++ // '['
	if p.peek() == ']' {
		p.i++
		return true
	}
	for {
		if !p.value(depth) {
			return false
		}
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

func (p *canonicalScanner) value(depth int) bool {
	switch c := p.peek(); {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
				p.i += len(lit)
				return true
			}
		}
		return false
	}
}

// str reads a string of printable ASCII without '\'; it returns its bytes.
func (p *canonicalScanner) str() ([]byte, bool) {
	if p.peek() != '"' {
		return nil, false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return p.b[start:j], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// number reads a JSON number (RFC 8259 §6); CanonicalTerms keeps numbers
// as written, so any valid one is canonical.
func (p *canonicalScanner) number() bool {
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.peek() == '-' {
		p.i++
	}
	if p.peek() == '0' {
		p.i++
	} else if digits() == 0 {
		return false
	}
	if p.peek() == '.' {
		p.i++
		if digits() == 0 {
			return false
		}
	}
	if c := p.peek(); c == 'e' || c == 'E' {
		p.i++
		if c := p.peek(); c == '+' || c == '-' {
			p.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}
