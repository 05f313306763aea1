package webkit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/opsgate/opsgate/pages"
)

// rateLimited answers a gated request that would open one operation more
// than the owner's or the agent's cap (store.ErrRateLimited;
// webkit/RULES.md "Bounded work"): 429 with Retry-After, nothing performed
// and nothing issued. A script that accepts JSON gets
// {"error":"rate_limited"}.
func (k *Kit) rateLimited(w http.ResponseWriter, r *http.Request) {
	pages.NoStore(w.Header())
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(k.retryAfter()/time.Second))))
	if pages.WantsJSON(r) {
		pages.WriteJSON(w, http.StatusTooManyRequests, map[string]string{"error": "rate_limited"})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte("Too many actions are waiting for approval. Approve or finish some, then try again later.\n"))
}
