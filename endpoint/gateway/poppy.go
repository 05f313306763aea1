package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/endpoint"
)

const poppyJSONPath = "/.well-known/poppy.json"

// How the upstream's own poppy.json is fetched.
const (
	poppyFresh   = time.Minute     // how long one fetch serves
	poppyTimeout = 2 * time.Second // how long one fetch may take
	poppyMax     = 64 << 10        // the longest document read
)

// poppyJSON serves /.well-known/poppy.json (§2): the upstream's own
// document, if it has one, with the kit's members (the operations
// extension, the join endpoint, the name) put in, the kit's winning.
type poppyJSON struct {
	own      map[string]any // the Mount's document
	ownBytes []byte
	url      string
	client   *http.Client
	logger   *slog.Logger

	mu      sync.Mutex
	doc     []byte // the last document served
	fetched time.Time
}

func newPoppyJSON(m *endpoint.Mount, upstream *url.URL, client *http.Client, logger *slog.Logger) (*poppyJSON, error) {
	rec := &recorder{header: http.Header{}, code: http.StatusOK}
	req, _ := http.NewRequest(http.MethodGet, poppyJSONPath, nil) // a constant URL: never fails
	m.ServeHTTP(rec, req)
	p := &poppyJSON{ownBytes: rec.body.Bytes(), client: client, logger: logger,
		url: strings.TrimRight(upstream.String(), "/") + poppyJSONPath}
	if rec.code != http.StatusOK || json.Unmarshal(p.ownBytes, &p.own) != nil {
		return nil, fmt.Errorf("poppy.json: the kit's document could not be read (%d)", rec.code)
	}
	p.doc = p.ownBytes
	return p, nil
}

func (p *poppyJSON) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	doc := p.current(r.Context())
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodHead {
		return
	}
	w.Write(doc)
}

// current returns the document, fetching the upstream's again when the
// last fetch is older than poppyFresh. When the upstream can't be read,
// the last document stays.
func (p *poppyJSON) current(ctx context.Context) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.fetched.IsZero() && time.Since(p.fetched) < poppyFresh {
		return p.doc
	}
	p.fetched = time.Now()
	doc, err := p.fetch(context.WithoutCancel(ctx))
	if err != nil {
		p.logger.LogAttrs(ctx, slog.LevelWarn, "opsgate-gateway: the upstream's poppy.json could not be read; serving the last one",
			slog.String("error", err.Error()))
		return p.doc
	}
	p.doc = doc
	return doc
}

// fetch reads the upstream's poppy.json and merges the kit's members in:
// none (404) is the kit's alone.
func (p *poppyJSON) fetch(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, poppyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	res, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusGone {
		return p.ownBytes, nil
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("upstream answered %s", res.Status)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, poppyMax+1))
	if err != nil {
		return nil, err
	}
	if len(body) > poppyMax {
		return nil, fmt.Errorf("upstream's poppy.json is over %d bytes", poppyMax)
	}
	var theirs map[string]any
	if err := json.Unmarshal(body, &theirs); err != nil || theirs == nil {
		return nil, fmt.Errorf("upstream's poppy.json is not a JSON object")
	}
	return mergePoppy(theirs, p.own)
}

// mergePoppy puts own's members into theirs: objects (extensions, web)
// member by member, anything else whole; own wins.
func mergePoppy(theirs, own map[string]any) ([]byte, error) {
	for k, v := range own {
		om, ok1 := v.(map[string]any)
		tm, ok2 := theirs[k].(map[string]any)
		if ok1 && ok2 {
			for kk, vv := range om {
				tm[kk] = vv
			}
			continue
		}
		theirs[k] = v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(theirs); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// recorder keeps what the Mount writes for its own poppy.json.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }
