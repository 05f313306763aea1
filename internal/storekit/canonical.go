package storekit

import (
	"encoding/json"
	"slices"
	"strconv"
)

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

// AppendTerms appends v as JSON that CanonicalTerms reads as json.Marshal's
// encoding of v, without reflection, for the values a describe function
// usually builds: maps of strings to strings, integers, booleans, nil,
// and nested maps and slices of them. Printable ASCII strings other than
// '"' and '\' are written as they are (so that terms of such strings come
// out canonical already), any other string as json.Marshal writes it.
// ok is false, and b unchanged, for anything else (floats, structs,
// json.Marshaler, named types, deeper than maxCanonicalDepth): encode
// those with json.Marshal.
func AppendTerms(b []byte, v any) (_ []byte, ok bool) {
	out, ok := appendTerms(b, v, 0)
	if !ok {
		return b, false
	}
	return out, true
}

func appendTerms(b []byte, v any, depth int) ([]byte, bool) {
	if depth > maxCanonicalDepth {
		return b, false
	}
	switch t := v.(type) {
	case string:
		return appendTermString(b, t), true
	case bool:
		return strconv.AppendBool(b, t), true
	case nil:
		return append(b, "null"...), true
	case int:
		return strconv.AppendInt(b, int64(t), 10), true
	case int64:
		return strconv.AppendInt(b, t, 10), true
	case int32:
		return strconv.AppendInt(b, int64(t), 10), true
	case uint:
		return strconv.AppendUint(b, uint64(t), 10), true
	case uint64:
		return strconv.AppendUint(b, t, 10), true
	case uint32:
		return strconv.AppendUint(b, uint64(t), 10), true
	case map[string]string:
		return appendTermsMap(b, t, depth, appendTermsString)
	case map[string]any:
		return appendTermsMap(b, t, depth, appendTerms)
	case []string:
		return appendTermsSlice(b, t, depth, appendTermsString)
	case []any:
		return appendTermsSlice(b, t, depth, appendTerms)
	}
	return b, false
}

// appendTermsString is appendTermString as appendTerms is called.
func appendTermsString(b []byte, s string, _ int) ([]byte, bool) {
	return appendTermString(b, s), true
}

// appendTermsMap appends m with its members sorted by key, as json.Marshal
// writes a map; null for a nil map.
func appendTermsMap[V any](b []byte, m map[string]V, depth int, value func([]byte, V, int) ([]byte, bool)) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	var on [16]string // the keys on the stack, for the usual few
	keys := on[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendTermString(b, k), ':')
		var ok bool
		if b, ok = value(b, m[k], depth+1); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendTermsSlice appends a as a JSON array; null for a nil slice.
func appendTermsSlice[V any](b []byte, a []V, depth int, value func([]byte, V, int) ([]byte, bool)) ([]byte, bool) {
	if a == nil {
		return append(b, "null"...), true
	}
	b = append(b, '[')
	for i, e := range a {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = value(b, e, depth+1); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// appendTermString appends s as a JSON string: as it is between quotes
// when it is printable ASCII other than '"' and '\' (no escape needed),
// else as json.Marshal writes it (HTML characters and invalid UTF-8
// included).
func appendTermString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // a string: never fails
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
