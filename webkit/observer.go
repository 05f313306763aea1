package webkit

import "context"

// Observer counts what the Gate does, so that Prometheus or OpenTelemetry
// can be plugged in without the kit depending on them. Each method is
// called once per event, on the request's goroutine, with the request's
// context and the action key; implementations must be quick and safe for
// concurrent use. Embed [NopObserver] to implement only some of them.
type Observer interface {
	// OperationIssued: a gated request got 403 with a ref (§4); the
	// operation may be new or reused (W19).
	OperationIssued(ctx context.Context, action string)
	// ApprovalTaken: a gated request used up a recorded approval (§6 W96).
	ApprovalTaken(ctx context.Context, action string)
	// Performed: the handler's outcome was Done (§7).
	Performed(ctx context.Context, action string)
	// NotPerformed: the handler's outcome was NotDone (W98).
	NotPerformed(ctx context.Context, action string)
	// Unknown: the handler failed with 5xx or a panic, or said so; the
	// operation stays performing (W142).
	Unknown(ctx context.Context, action string)
	// StoreError: the store failed during op ("take", "finish",
	// "lookup"). The request performed nothing when op is "take".
	StoreError(ctx context.Context, op string, err error)
}

// NopObserver observes nothing. It is the Kit's default.
type NopObserver struct{}

func (NopObserver) OperationIssued(context.Context, string)   {}
func (NopObserver) ApprovalTaken(context.Context, string)     {}
func (NopObserver) Performed(context.Context, string)         {}
func (NopObserver) NotPerformed(context.Context, string)      {}
func (NopObserver) Unknown(context.Context, string)           {}
func (NopObserver) StoreError(context.Context, string, error) {}
