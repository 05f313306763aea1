package webkit

import (
	"context"
	"log/slog"
	"net/http"
	"time"

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

// releaseDelays are when the Gate tries to release a claim it could not
// confirm: at once, then twice more, so that a store that was stalled (and
// may run the abandoned Take when it wakes) still gets the release.
var releaseDelays = []time.Duration{0, time.Second, 4 * time.Second}

// release undoes, after the request, whatever Take may have claimed with
// token when the Gate could not confirm the claim (an error, a timeout, a
// lost reply) or never called the handler: the approval then applies to the
// next repeat (§7 W144; RULES.md "Claims are never stranded"). It runs in
// the background on fresh contexts, so the 503 is not delayed, and ends
// after a few tries.
func (k *Kit) release(r *http.Request, owner store.Owner, token string) {
	st, timeout, now, logger := k.store(), k.storeTimeout(), k.now, k.logger()
	base := context.WithoutCancel(r.Context())
	path := r.URL.Path
	go func() {
		for i, d := range releaseDelays {
			if d > 0 {
				time.Sleep(d)
			}
			ctx, cancel := context.WithTimeout(base, timeout)
			released, err := st.Release(ctx, owner, token, now())
			cancel()
			if err == nil {
				if released {
					logger.LogAttrs(base, slog.LevelInfo, "opsgate: released a claim the Gate could not confirm; its approval applies to the next request (W144)",
						slog.String("path", path))
				}
				return
			}
			if i == len(releaseDelays)-1 {
				logger.LogAttrs(base, slog.LevelError, "opsgate: store failed",
					slog.String("op", "release"), slog.String("path", path), slog.String("error", err.Error()))
			}
		}
	}()
}
