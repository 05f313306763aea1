// Package headers reads and writes the Poppy headers of the operations
// extension: Poppy-Operation (§4, W57), Poppy-Approval (§6, W84) and
// Poppy-Extensions (webkit/RULES.md choice 4). Every parser reads all of a
// header's field lines, as RFC 9651 Structured Fields, and refuses anything
// longer than MaxBytes before parsing it. Every parse error is an *Error
// naming the header and member, and wraps one of ErrMalformed,
// ErrMissingMember, ErrWrongType or ErrBadValue.
//
// A website never parses these headers itself: the Gate (package webkit),
// the endpoint, webkittest, the checker and the reference agent do, from
// here. An approval is read into the record the store keeps
// (store.Approval), which is what the endpoint records.
package headers

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// The Poppy headers' names.
const (
	Operation  = "Poppy-Operation"  // §4: the website's 403 names the operation's ref
	Approval   = "Poppy-Approval"   // §6: the approval sent to endpoint
	Extensions = "Poppy-Extensions" // §2, RULES.md choice 4: declared extensions
	Session    = "Poppy-Session"    // RULES.md choice 1: the Session JWT, a credential never logged
	Version    = "Poppy-Version"    // RULES.md choice 4: "1.0"
)

// The two approvers of §6, as store.Approval.Approver holds them.
const (
	ApproverUser  = "user"
	ApproverAgent = "agent"
)

// MaxBytes is the longest header value (all its field lines joined)
// that a parser reads. A longer one is refused with ErrMalformed before any
// parsing, so that a hostile header costs nothing. A valid Poppy-Operation
// (a 2048-character ref) or Poppy-Approval fits easily.
const MaxBytes = 8192

// Sentinels for errors.Is: every Error (and every member error from
// ValidateApproval and ValidateOperation) wraps exactly one of them.
var (
	// ErrMalformed: the value is not the Structured Field it must be (W84),
	// or is longer than MaxBytes.
	ErrMalformed = errors.New("malformed header")
	// ErrMissingMember: a required member is absent (W78).
	ErrMissingMember = errors.New("missing member")
	// ErrWrongType: a known member has another Structured Field type (W57,
	// W84).
	ErrWrongType = storekit.ErrWrongType
	// ErrBadValue: a known member has the right type and a value the spec
	// doesn't allow (W59, W78, spec 8.2).
	ErrBadValue = errors.New("bad member value")
)

// Error says which header, and which member of it, is wrong.
type Error struct {
	Header string // e.g. "Poppy-Approval"
	Member string // e.g. "approver"; "" when the header as a whole is wrong
	Err    error  // wraps ErrMalformed, ErrMissingMember, ErrWrongType or ErrBadValue
}

func (e *Error) Error() string {
	if e.Member == "" {
		return e.Header + ": " + e.Err.Error()
	}
	return e.Header + ": member " + strconv.Quote(e.Member) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// errTooLong is refused before parsing (MaxBytes).
var errTooLong = memberReason{ErrMalformed, "longer than " + strconv.Itoa(MaxBytes) + " bytes"}

// headerTooLong reports whether values, joined as RFC 9651 joins field lines
// (", "), are longer than MaxBytes. It stops counting early, so it
// never overflows.
func headerTooLong(values []string) bool {
	n := 0
	for i, v := range values {
		if i > 0 {
			n += 2
		}
		n += len(v)
		if n > MaxBytes {
			return true
		}
	}
	return false
}

// parseHeaderDictionary parses a Dictionary header, refusing it whole when
// too long or malformed.
func parseHeaderDictionary(header string, values []string) (*httpsfv.Dictionary, error) {
	if headerTooLong(values) {
		return nil, &Error{Header: header, Err: errTooLong}
	}
	dict, err := httpsfv.UnmarshalDictionary(values)
	if err != nil || dict == nil {
		return nil, &Error{Header: header, Err: malformed("a Structured Field Dictionary", err)}
	}
	return dict, nil
}

func malformed(what string, err error) error {
	text := "not " + what
	if err != nil {
		text += " (" + err.Error() + ")"
	}
	return memberReason{ErrMalformed, text}
}

var (
	errNotString  = memberReason{ErrWrongType, "must be a String"}
	errNotInteger = memberReason{ErrWrongType, "must be an Integer"}
)

// dictionaryString returns the String member name: present is false when it
// is absent. Parameters on the member are ignored (RFC 9651 extensibility).
func dictionaryString(dict *httpsfv.Dictionary, name string) (value string, present bool, err error) {
	m, ok := dict.Get(name)
	if !ok {
		return "", false, nil
	}
	item, ok := m.(httpsfv.Item)
	if !ok {
		return "", true, errNotString
	}
	s, ok := item.Value.(string)
	if !ok {
		return "", true, errNotString
	}
	return s, true, nil
}

// requiredID reads a String member that must be an ID of spec 8.2.
func requiredID(dict *httpsfv.Dictionary, name string, valid func(string) bool, bad error) (string, error) {
	s, present, err := dictionaryString(dict, name)
	switch {
	case err != nil:
		return "", err
	case !present:
		return "", errMemberMissing
	case !valid(s):
		return "", bad
	}
	return s, nil
}

// FormatOperation returns the Poppy-Operation value for the website's
// 403 (§4, W53, W57): a Dictionary with the Strings sid and ref. ref must be
// 1 to 2048 characters of A–Z a–z 0–9 - _ . (W59), and sid ValidSID.
func FormatOperation(sid, ref string) (string, error) {
	switch {
	case sid == "":
		return "", &Error{Header: Operation, Member: "sid", Err: errMemberMissing}
	case !ValidSID(sid):
		return "", &Error{Header: Operation, Member: "sid", Err: errSIDValue}
	}
	if ref == "" {
		return "", &Error{Header: Operation, Member: "ref", Err: errMemberMissing}
	}
	if !storekit.ValidRef(ref) {
		return "", &Error{Header: Operation, Member: "ref", Err: errRefValue}
	}
	// Written directly: both members were validated above, and this is on
	// every 403 the Gate answers (httpsfv is kept for parsing). A ref has no
	// character a String escapes; a sid may have '"' or '\\'.
	n := len(`sid="", ref=""`) + len(sid) + len(ref)
	for i := 0; i < len(sid); i++ {
		if sid[i] == '"' || sid[i] == '\\' {
			n++
		}
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(`sid="`)
	for i := 0; i < len(sid); i++ {
		if sid[i] == '"' || sid[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(sid[i])
	}
	b.WriteString(`", ref="`)
	b.WriteString(ref)
	b.WriteByte('"')
	return b.String(), nil
}

// ParseOperation reads a Poppy-Operation header (§4, W57), given every
// field line (r.Header.Values). Members other than sid and ref are ignored.
// A ref that breaks W59 is refused, so the reference agent never sends one
// to endpoint.
func ParseOperation(values []string) (sid, ref string, err error) {
	dict, err := parseHeaderDictionary(Operation, values)
	if err != nil {
		return "", "", err
	}
	if sid, err = requiredID(dict, "sid", ValidSID, errSIDValue); err != nil {
		return "", "", &Error{Header: Operation, Member: "sid", Err: err}
	}
	if ref, err = requiredID(dict, "ref", storekit.ValidRef, errRefValue); err != nil {
		return "", "", &Error{Header: Operation, Member: "ref", Err: err}
	}
	return sid, ref, nil
}

// ParseApproval reads a Poppy-Approval header (§6, W84), given every field
// line (r.Header.Values): a Dictionary whose operation_id, revision, approver,
// input_type and reference are Strings and approved_at an Integer.
//
// operation_id, revision and approver are required (W78), and approver is
// "user" or "agent"; a missing or malformed required member refuses the
// header. Optional members may be missing (W82), any input_type is accepted
// (W83), and members the kit doesn't know are ignored (W85), so a later
// version can add members. A malformed optional member (approved_at that is
// not a non-negative Integer, an input_type or reference that is not a
// String, a reference with characters an ID can't have) is treated as
// absent, never as a reason to refuse the approval (§6 "MUST NOT reject …
// because an optional member is missing"): [ParseApprovalReport] says which.
// With "agent", input_type is dropped whatever it holds, because the Company
// ignores it there (W80).
func ParseApproval(values []string) (store.Approval, error) {
	a, _, err := ParseApprovalReport(values)
	return a, err
}

// ParseApprovalReport is [ParseApproval] that also returns the optional
// members it treated as absent because they were malformed, so that the
// endpoint can say so in its log.
func ParseApprovalReport(values []string) (a store.Approval, ignored []*Error, err error) {
	dict, err := parseHeaderDictionary(Approval, values)
	if err != nil {
		return store.Approval{}, nil, err
	}
	fail := func(member string, err error) (store.Approval, []*Error, error) {
		return store.Approval{}, nil, &Error{Header: Approval, Member: member, Err: err}
	}
	ignore := func(member string, err error) {
		ignored = append(ignored, &Error{Header: Approval, Member: member, Err: err})
	}

	if a.OperationID, err = requiredID(dict, "operation_id", storekit.ValidID, errIDValue); err != nil {
		return fail("operation_id", err)
	}
	if a.Revision, err = requiredID(dict, "revision", storekit.ValidID, errIDValue); err != nil {
		return fail("revision", err)
	}
	approver, present, err := dictionaryString(dict, "approver")
	switch {
	case err != nil:
		return fail("approver", err)
	case !present:
		return fail("approver", errMemberMissing)
	case approver != ApproverUser && approver != ApproverAgent:
		return fail("approver", errApproverValue)
	}
	a.Approver = store.Approver(approver)

	// W82: the optional members below are read when well formed and
	// otherwise treated as absent.
	if m, ok := dict.Get("approved_at"); ok {
		item, _ := m.(httpsfv.Item)
		switch sec, ok := item.Value.(int64); {
		case !ok:
			ignore("approved_at", errNotInteger)
		case sec < 0:
			ignore("approved_at", errApprovedAtValue)
		default:
			a.ApprovedAt = time.Unix(sec, 0).UTC()
		}
	}

	if a.Approver == ApproverUser { // W80: with agent, not even its type matters
		if a.InputType, _, err = dictionaryString(dict, "input_type"); err != nil {
			a.InputType = ""
			ignore("input_type", err) // W83: an input_type of another type is not recognised, not refused
		} else if len(a.InputType) > storekit.MaxInputType {
			a.InputType = ""
			ignore("input_type", errInputTypeLong) // kept as absent: bounded bytes per approval, never refused
		}
	}

	reference, present, err := dictionaryString(dict, "reference")
	switch {
	case err != nil:
		ignore("reference", err)
	case present && !storekit.ValidID(reference):
		ignore("reference", errIDValue)
	case len(reference) > storekit.MaxKeptReference:
		ignore("reference", errReferenceLong) // kept as absent, never refused
	default:
		a.Reference = reference
	}
	return a, ignored, nil
}

// FormatApproval returns the Poppy-Approval value for a (§6), in the
// spec's member order. approved_at is written only when set, and input_type
// only with "user" (A35, W80). A value longer than MaxBytes, which no
// parser would read, is refused with ErrMalformed.
func FormatApproval(a store.Approval) (string, error) {
	if member, err := checkApproval(a); err != nil {
		return "", &Error{Header: Approval, Member: member, Err: err}
	}
	dict := httpsfv.NewDictionary()
	dict.Add("operation_id", httpsfv.NewItem(a.OperationID))
	dict.Add("revision", httpsfv.NewItem(a.Revision))
	dict.Add("approver", httpsfv.NewItem(string(a.Approver)))
	if !a.ApprovedAt.IsZero() {
		dict.Add("approved_at", httpsfv.NewItem(a.ApprovedAt.Unix()))
	}
	if a.Approver == ApproverUser && a.InputType != "" {
		dict.Add("input_type", httpsfv.NewItem(a.InputType))
	}
	if a.Reference != "" {
		dict.Add("reference", httpsfv.NewItem(a.Reference))
	}
	h, err := marshalHeader(Approval, dict)
	if err == nil && len(h) > MaxBytes { // only a huge input_type gets here
		return "", &Error{Header: Approval, Err: errTooLong}
	}
	return h, err
}

func marshalHeader(header string, v httpsfv.StructuredFieldValue) (string, error) {
	s, err := httpsfv.Marshal(v)
	if err != nil { // unreachable: every member was checked first
		return "", &Error{Header: header, Err: malformed("serializable", err)}
	}
	return s, nil
}

// ParseExtensions reads a Poppy-Extensions header (RULES.md choice 4),
// given every field line: a List of Tokens or Strings, each naming an
// extension, with a `v` parameter giving its version, e.g.
// `"operations";v="3"`. A `v` that is a Token, Integer or Decimal is kept as
// its text; any other `v`, or none, gives the version "". Other extensions and
// versions are kept, for DeclaresOperations to ignore (§2, W13), and
// members that are neither Token nor String are skipped. When a name is
// declared twice, the first declaration is kept, unless a later one declares
// operations v3: an agent that declares it supports it.
func ParseExtensions(values []string) (map[string]string, error) {
	if headerTooLong(values) {
		return nil, &Error{Header: Extensions, Err: errTooLong}
	}
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		return nil, &Error{Header: Extensions, Err: malformed("a Structured Field List", err)}
	}
	ext := map[string]string{}
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			continue // an Inner List declares nothing
		}
		var name string
		switch v := item.Value.(type) {
		case string:
			name = v
		case httpsfv.Token:
			name = string(v)
		default:
			continue
		}
		version := versionText(item.Params)
		if old, seen := ext[name]; seen {
			if name != OperationsExtension || majorVersionIs3(old) || !majorVersionIs3(version) {
				continue
			}
		}
		ext[name] = version
	}
	return ext, nil
}

// versionText is the text of a `v` parameter, or "".
func versionText(params *httpsfv.Params) string {
	if params == nil {
		return ""
	}
	v, _ := params.Get("v")
	switch v := v.(type) {
	case string:
		return v
	case httpsfv.Token:
		return string(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		// RFC 9651 §4.1.5 text: at most three fractional digits, at least one.
		s := strings.TrimRight(strconv.FormatFloat(v, 'f', 3, 64), "0")
		if strings.HasSuffix(s, ".") {
			s += "0"
		}
		return s
	}
	return ""
}

// FormatExtensions returns the Poppy-Extensions value declaring e (RULES.md
// choice 4), sorted by name, each name a String with its version in `v`, e.g.
// `"operations";v="3"`. A version "" is written without `v`. A name or
// version that cannot be a String (not printable ASCII) is left out. The
// result is not limited to MaxBytes: the caller declares what it chose.
func FormatExtensions(e map[string]string) string {
	names := make([]string, 0, len(e))
	for name := range e {
		names = append(names, name)
	}
	slices.Sort(names)
	var list httpsfv.List
	for _, name := range names {
		version := e[name]
		if !sfPrintable(name) || !sfPrintable(version) {
			continue
		}
		item := httpsfv.NewItem(name)
		if version != "" {
			item.Params.Add("v", version)
		}
		list = append(list, item)
	}
	s, err := httpsfv.Marshal(list)
	if err != nil { // unreachable: every name and version is printable ASCII
		return ""
	}
	return s
}

// OperationsExtension is this extension's name in Poppy-Extensions and poppy.json.
const OperationsExtension = "operations"

// DeclaresOperations reports whether the declarations (as ParseExtensions
// returns them) count as declaring operations v3 (§2): the major version
// must be 3, so "3" and "3.1" count, and "2", "4" and "" don't (W13).
func DeclaresOperations(ext map[string]string) bool {
	return majorVersionIs3(ext[OperationsExtension])
}

func majorVersionIs3(v string) bool {
	major, _, _ := strings.Cut(v, ".")
	return major == "3"
}

// ValidateOperation reports the first member of o that breaks §3 in its
// wire form: operation_id and revision use the spec 8.2 ID characters (W22,
// W23), terms is a JSON object (W16), and expires_at is set (W15).
func ValidateOperation(o store.Operation) error {
	if err := checkIDMember(o.ID, true); err != nil {
		return objectMemberError("operation", "operation_id", err)
	}
	if err := checkIDMember(o.Revision, true); err != nil {
		return objectMemberError("operation", "revision", err)
	}
	if len(bytes.TrimSpace(o.Terms)) == 0 {
		return objectMemberError("operation", "terms", errMemberMissing)
	}
	if _, err := storekit.CanonicalTerms(o.Terms); err != nil {
		return objectMemberError("operation", "terms", memberReason{ErrBadValue, "must be a JSON object"})
	}
	if o.ExpiresAt.IsZero() {
		return objectMemberError("operation", "expires_at", errMemberMissing)
	}
	return nil
}

// ValidateApproval reports the first member of a that breaks §6:
// operation_id and revision are IDs, approver is user or agent (W78),
// approved_at fits an Integer of Unix seconds, input_type fits a String,
// and reference, when present, is an ID. Missing optional members are never
// an error (W82), nor is an input_type the kit doesn't know (W83); an
// input_type with agent is ignored (W80), never an error.
func ValidateApproval(a store.Approval) error {
	if member, err := checkApproval(a); err != nil {
		return objectMemberError("approval", member, err)
	}
	return nil
}

// checkApproval is ValidateApproval's work, shared with FormatApproval so
// that both name the same member.
func checkApproval(a store.Approval) (member string, err error) {
	if err := checkIDMember(a.OperationID, true); err != nil {
		return "operation_id", err
	}
	if err := checkIDMember(a.Revision, true); err != nil {
		return "revision", err
	}
	switch a.Approver {
	case ApproverUser, ApproverAgent:
	case "":
		return "approver", errMemberMissing
	default:
		return "approver", errApproverValue
	}
	if !a.ApprovedAt.IsZero() {
		if sec := a.ApprovedAt.Unix(); sec < 0 || sec > sfMaxInteger {
			return "approved_at", errApprovedAtValue
		}
	}
	if a.Approver == ApproverUser && !sfPrintable(a.InputType) {
		return "input_type", memberReason{ErrBadValue, "must be printable ASCII"}
	}
	if err := checkIDMember(a.Reference, false); err != nil {
		return "reference", err
	}
	return "", nil
}

// sfMaxInteger is the largest RFC 9651 Integer (15 digits).
const sfMaxInteger = 999_999_999_999_999

var (
	errMemberMissing   = memberReason{ErrMissingMember, "missing"}
	errApproverValue   = memberReason{ErrBadValue, `must be "user" or "agent"`}
	errApprovedAtValue = memberReason{ErrBadValue, "must be Unix seconds from 0 to 999999999999999"}
	errIDValue         = memberReason{ErrBadValue, "must be 1 to 255 characters of A-Z a-z 0-9 - _"}
	errRefValue        = memberReason{ErrBadValue, "must be 1 to 2048 characters of A-Z a-z 0-9 - _ ."}
	errSIDValue        = memberReason{ErrBadValue, "must be 1 to 255 characters of visible ASCII"}
	errInputTypeLong   = memberReason{ErrBadValue, fmt.Sprintf("is longer than the %d bytes kept", storekit.MaxInputType)}
	errReferenceLong   = memberReason{ErrBadValue, fmt.Sprintf("is longer than the %d characters kept", storekit.MaxKeptReference)}
)

// ValidSID reports whether s can be a Session's sid in Poppy-Operation: 1 to
// 255 characters of visible ASCII (the kit's choice, matching what
// webkit/identity accepts in a Session JWT, so that every Session it
// verifies can be named in an RFC 9651 String).
func ValidSID(s string) bool {
	if len(s) == 0 || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkIDMember checks an ID of spec 8.2 (RULES.md choice 6); "" is missing when
// required and absent otherwise.
func checkIDMember(s string, required bool) error {
	switch {
	case s == "" && required:
		return errMemberMissing
	case s == "":
		return nil
	case !storekit.ValidID(s):
		return errIDValue
	}
	return nil
}

// sfPrintable reports whether s fits an RFC 9651 String.
func sfPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// memberReason is a reason a member is wrong, worded for people, that still
// matches its sentinel with errors.Is.
type memberReason struct {
	kind error
	text string
}

func (r memberReason) Error() string { return r.text }
func (r memberReason) Unwrap() error { return r.kind }

// objectMemberError names the object and member a reason is about, outside a
// header (JSON, or a value about to be written).
func objectMemberError(object, member string, err error) error {
	return fmt.Errorf("%s: member %q: %w", object, member, err)
}
