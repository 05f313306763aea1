package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/store"
)

// countNew counts a new operation against its agent's cap of open
// operations (Options.MaxOpenPerAgent). An agent's Users are in many Cluster
// slots, so the count has a key of its own and costs one more round trip,
// only when Take or Issue made a new operation. Over the cap, the new
// operation is forgotten again (if nothing was recorded for it meanwhile)
// and the answer is store.ErrRateLimited.
func (s *Store) countNew(ctx context.Context, owner store.Owner, actKey string, op store.Operation, now time.Time) error {
	if s.maxOpenAgent <= 0 {
		return nil
	}
	sum := sha256.Sum256([]byte(owner.Agent))
	key := s.prefix + "agent:{" + base64.RawURLEncoding.EncodeToString(sum[:15]) + "}"
	n, err := s.run(ctx, s.client, agentStep, []string{key},
		store.Slot(owner.Agent, owner.User)+" "+op.ID, ns(op.ExpiresAt), ns(now), s.maxOpenAgent).Int()
	if err != nil {
		s.failed(err)
		return fmt.Errorf("agent's open operations: %w", err)
	}
	if n == 1 {
		return nil
	}
	base := s.base(owner.Agent, owner.User)
	if err := s.run(ctx, s.client, undoStep, []string{base + "op:" + op.ID, actKey}, base, op.ID).Err(); err != nil {
		s.failed(err)
		return fmt.Errorf("agent's open operations: %w", err)
	}
	return store.ErrRateLimited
}
