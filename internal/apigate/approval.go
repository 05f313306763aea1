package apigate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// MetaKey is where an MCP tool call carries the approval: a JSON object
// in params._meta (§6 "MCP", M50).
const MetaKey = "personalagentprotocol.org/approval"

// ApprovalOfHeader reads the approval an API request carries in
// Poppy-Approval (§6 "APIs"): nil, with why, when the request carries
// none, or a value that is no approval, which is then ignored as a whole
// (RFC 9651 §2, §4.2): one that doesn't parse as a Dictionary, a known
// member of another type, no operation_id, revision or approver, another
// approver (P51, P52). Unknown members are ignored (P53), input_type in
// an agent approval is dropped (P55), and an optional member too long to
// keep is absent, never refused (P57).
func ApprovalOfHeader(values []string) (*store.Approval, error) {
	if len(values) == 0 {
		return nil, nil
	}
	a, ignored, err := headers.ParseApprovalReport(values)
	if err != nil {
		return nil, err
	}
	for _, m := range ignored {
		if errors.Is(m, headers.ErrWrongType) {
			return nil, m
		}
	}
	return &a, nil
}

// ApprovalOfMeta reads the approval an MCP tool call carries in
// params._meta under MetaKey (§6 "MCP", M50): nil, with why, when it
// carries none, or a value that is no approval (M53: not a JSON object,
// a known member of another type, no operation_id, revision or approver,
// another approver), which the call is then handled without. Unknown
// members are ignored (M54), input_type in an agent approval is dropped
// (M56), and an optional member too long to keep is absent (M58).
func ApprovalOfMeta(meta map[string]any) (*store.Approval, error) {
	v, ok := meta[MetaKey]
	if !ok {
		return nil, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("_meta %q: not a JSON object", MetaKey)
	}
	str := func(name string, required bool) (string, error) {
		m, ok := obj[name]
		if !ok {
			if required {
				return "", fmt.Errorf("_meta %q: member %q is missing", MetaKey, name)
			}
			return "", nil
		}
		s, ok := m.(string)
		if !ok {
			return "", fmt.Errorf("_meta %q: member %q: %w", MetaKey, name, storekit.ErrWrongType)
		}
		return s, nil
	}
	var a store.Approval
	var err error
	if a.OperationID, err = str("operation_id", true); err != nil {
		return nil, err
	}
	if a.Revision, err = str("revision", true); err != nil {
		return nil, err
	}
	if !storekit.ValidID(a.OperationID) || !storekit.ValidID(a.Revision) {
		return nil, fmt.Errorf("_meta %q: operation_id and revision are 1 to 255 characters of A-Z a-z 0-9 - _", MetaKey)
	}
	approver, err := str("approver", true)
	if err != nil {
		return nil, err
	}
	if approver != headers.ApproverUser && approver != headers.ApproverAgent {
		return nil, fmt.Errorf("_meta %q: approver %.20q is neither user nor agent", MetaKey, approver)
	}
	a.Approver = store.Approver(approver)
	if m, ok := obj["approved_at"]; ok {
		sec, isInt := integer(m)
		switch {
		case !isInt: // M52, M53: Unix seconds are a JSON integer
			return nil, fmt.Errorf("_meta %q: member \"approved_at\" must be an integer: %w", MetaKey, storekit.ErrWrongType)
		case sec >= 0 && sec <= 999_999_999_999_999:
			a.ApprovedAt = time.Unix(sec, 0).UTC()
		}
	}
	if a.Approver == store.ApproverUser { // M56: with agent, not even its type matters
		if a.InputType, err = str("input_type", false); err != nil {
			return nil, err
		}
	}
	if a.Reference, err = str("reference", false); err != nil {
		return nil, err
	}
	if a.Reference != "" && !storekit.ValidID(a.Reference) {
		a.Reference = "" // not one of the IDs of spec 8.2: absent, never refused
	}
	a.InputType, a.Reference = storekit.KeptMembers(a.InputType, a.Reference)
	return &a, nil
}

// An API's answer, as a store keeps it with a performed operation (§7:
// a retry with the same approval gets the response the Company gave the
// first time): its status, the header fields that say what it is, and
// its body.
type apiAnswer struct {
	Status   int    `json:"s"`
	Type     string `json:"t,omitempty"`
	Location string `json:"l,omitempty"`
	Body     []byte `json:"b,omitempty"`
}

// EncodeAnswer is an API's answer as a store keeps it; nil when it would
// be longer than a store keeps (storekit.MaxAnswer): a retry then gets
// one that says the same (WriteAnswer).
func EncodeAnswer(status int, h http.Header, body []byte) []byte {
	if len(body) > storekit.MaxAnswer {
		return nil
	}
	b, err := json.Marshal(apiAnswer{Status: status, Type: h.Get("Content-Type"), Location: h.Get("Location"), Body: body})
	if err != nil || len(b) > storekit.MaxAnswer {
		return nil
	}
	return b
}

// WriteAnswer answers a retry of an API request whose operation was
// performed (§7 P90): the answer kept (EncodeAnswer), or, when none was,
// 200 with the operation's status, which says the same.
func WriteAnswer(w http.ResponseWriter, kept []byte, operationID string) {
	var a apiAnswer
	if len(kept) == 0 || json.Unmarshal(kept, &a) != nil || a.Status < 200 || a.Status > 599 {
		writeJSON(w, http.StatusOK, map[string]string{"operation_id": operationID, "status": "performed"})
		return
	}
	h := w.Header()
	if a.Type != "" {
		h.Set("Content-Type", a.Type)
	}
	if a.Location != "" {
		h.Set("Location", a.Location)
	}
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(a.Status)
	w.Write(a.Body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// IsCall reports whether r carries its Session on itself: an API request,
// or an HTTP request of an MCP session (RULES.md choices 7 and 8), not
// a joined browser's.
func IsCall(r *http.Request) bool {
	_, ok := r.Header[headers.Session]
	return ok
}

// integer is v, a decoded JSON value, as a whole number: a json.Number
// or a float64 without a fraction, within ±2^53.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, false
		}
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}
