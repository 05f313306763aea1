package headers

import (
	"errors"
	"fmt"

	"github.com/opsgate/opsgate/store"
)

// The endpoint reads the approval the Personal Agent sends (§6). Here, the
// spec's own user approval, with a member a later version might add (W85).
func ExampleParseApproval() {
	values := []string{`operation_id="exc_5Rt2", revision="1791487200-k3Jd9Qx2mW8v", approver="user", approved_at=1791487260, input_type="tap", sig=:AAAA:`}
	a, err := ParseApproval(values) // r.Header.Values(headers.Approval)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(a.OperationID, a.Revision, a.Approver, a.ApprovedAt.Unix(), a.InputType)

	_, err = ParseApproval([]string{`operation_id="exc_5Rt2", revision="1791487200-k3Jd9Qx2mW8v", approver="robot"`})
	fmt.Println(err)
	fmt.Println(errors.Is(err, ErrBadValue))
	// Output:
	// exc_5Rt2 1791487200-k3Jd9Qx2mW8v user 1791487260 tap
	// Poppy-Approval: member "approver": must be "user" or "agent"
	// true
}

// The website's 403 names the operation with its ref and the Session it
// handled the request as (§4).
func ExampleFormatOperation() {
	h, err := FormatOperation("ses_Hq3vT8nW2kLm9xRb", "exc_5Rt2.1791487200.k3Jd9Qx2mW8v")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(Operation + ": " + h)

	sid, ref, _ := ParseOperation([]string{h})
	fmt.Println(sid, ref)
	// Output:
	// Poppy-Operation: sid="ses_Hq3vT8nW2kLm9xRb", ref="exc_5Rt2.1791487200.k3Jd9Qx2mW8v"
	// ses_Hq3vT8nW2kLm9xRb exc_5Rt2.1791487200.k3Jd9Qx2mW8v
}

// Only a declaration of operations with major version 3 counts (§2, W13).
func ExampleParseExtensions() {
	for _, h := range []string{`"operations";v="3"`, `"operations";v="2", "payments";v="1"`, `operations;v=3.1`} {
		ext, err := ParseExtensions([]string{h})
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(DeclaresOperations(ext), FormatExtensions(ext))
	}
	// Output:
	// true "operations";v="3"
	// false "operations";v="2", "payments";v="1"
	// true "operations";v="3.1"
}

// The reference agent writes the approval it sends to endpoint (§6); an
// agent approval never carries input_type (A35).
func ExampleFormatApproval() {
	a := store.Approval{OperationID: "exc_5Rt2", Revision: "1791487200-k3Jd9Qx2mW8v", Approver: ApproverAgent, InputType: "tap", Reference: "apr_01JD8ZK3R4"}
	h, err := FormatApproval(a)
	fmt.Println(h, err)
	// Output:
	// operation_id="exc_5Rt2", revision="1791487200-k3Jd9Qx2mW8v", approver="agent", reference="apr_01JD8ZK3R4" <nil>
}
