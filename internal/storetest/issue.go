package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
)

// issuer is a store that issues the operation for an action without
// taking an approval: Take's 403 half. Both stores of this module are; it
// is not part of storedriver.Store, since the Gate only ever calls Take.
type issuer interface {
	Issue(ctx context.Context, owner store.Owner, action storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error)
}

// Issue returns the operation st issues for owner's action without taking
// an approval for it (§3 W19, W20, W24, W25, W36, W141; W145 while the
// action's operation is being performed), so that a test can set up
// operations to approve. st must have an Issue method, as the stores of
// this module have.
func Issue(ctx context.Context, st storedriver.Store, owner store.Owner, action storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	is, ok := st.(issuer)
	if !ok {
		return storedriver.TakeResult{}, fmt.Errorf("storetest: %T has no Issue method", st)
	}
	return is.Issue(ctx, owner, action, now)
}
