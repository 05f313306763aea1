// Package webkit is what a website imports first to speak the Poppy
// `operations` extension v3 (operations-v3 §4 "Websites", §6 "Websites").
//
// # Vocabulary
//
// The protocol's nouns are plain Go types with the spec's JSON shapes:
// [Operation] (§3), [Approval] and [Decline] (§6), the declared
// [Extensions] (§2, poppy-core choice 4) and the verified [Session] a request
// is handled as, whose [Session.Owner] says which operations it can approve
// (§3 "Who can approve it").
//
// # Headers
//
// The three Structured Field headers (RFC 9651) have codecs that never panic
// and refuse anything longer than [MaxHeaderBytes]:
//
//   - Poppy-Operation (§4, W57): [FormatOperationHeader], [ParseOperationHeader].
//   - Poppy-Approval (§6, W84): [ParseApproval], [Approval.Header].
//   - Poppy-Extensions (poppy-core choice 4): [ParseExtensions], [Extensions.Header].
//
// Every parse error is a [*HeaderError] naming the header and member, and
// wraps one of [ErrMalformed], [ErrMissingMember], [ErrWrongType] or
// [ErrBadValue].
package webkit
