package opsendpoint

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storekit"
)

// Past the store's overall cap of single-use markers (made-up agents'
// tokens cost nothing), a lookup's token can't be used up: the answer is
// 429 rate_limited with Retry-After, not the 503 of a store that is down,
// and the Observer sees rate_limited with Reason "overall".
func TestReplayMarkersCap(t *testing.T) {
	st := memstore.New(memstore.Config{MaxReplayMarkers: 1})
	now := time.Unix(1_800_000_000, 0)
	e := &Endpoint{Store: st.Steps(), Clock: func() time.Time { return now }}
	use := func(key string) *observedWriter {
		w := &observedWriter{ResponseWriter: httptest.NewRecorder()}
		e.useReplay(w, context.Background(), Replay{Key: storekit.OnceKey("https://made-up.example/", "u", key), Until: now.Add(5 * time.Minute)})
		return w
	}
	if w := use("jti-1"); w.status != 0 {
		t.Fatalf("the first token: answered %d", w.status)
	}
	w := use("jti-2")
	rec := w.ResponseWriter.(*httptest.ResponseRecorder)
	if w.status != 429 || rec.Header().Get("Retry-After") == "" || w.outcome != "rate_limited" || w.reason != "overall" {
		t.Fatalf("past the cap: %d Retry-After %q, event %s/%s; want 429, rate_limited/overall", w.status, rec.Header().Get("Retry-After"), w.outcome, w.reason)
	}
}
