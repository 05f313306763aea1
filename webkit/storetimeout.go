package webkit

import (
	"net/http"
	"time"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// defaultStoreTimeout is the deadline of each store call New sets.
const defaultStoreTimeout = time.Second

func (k *Kit) storeTimeout() time.Duration {
	if k.StoreTimeout > 0 {
		return k.StoreTimeout
	}
	return defaultStoreTimeout
}

// release undoes, after the request, whatever Take may have claimed with
// token when the Gate could not confirm the claim (an error, a timeout, a
// lost reply) or never called the handler: the approval then applies to the
// next repeat (§7 W144; RULES.md "Claims are never stranded"). It runs in
// the background, so the 503 is not delayed: at once, then with backoff
// while the store fails (retry.go), for as long as the store remembers the
// token (storekit.ClaimTokenTTL).
func (k *Kit) release(r *http.Request, owner store.Owner, token string) {
	st := k.newRetryStep(r.URL.Path)
	st.release, st.owner, st.token, st.until = true, owner, token, time.Now().Add(storekit.ClaimTokenTTL)
	go func() {
		if k.try(st) {
			return
		}
		if !k.retryLater(st) {
			k.dropped(st)
		}
	}()
}
