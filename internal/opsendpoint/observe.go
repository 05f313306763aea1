package opsendpoint

import (
	"net/http"

	"github.com/opsgate/opsgate/webkit"
)

// observedWriter remembers the endpoint's answer for the Observer. Where
// the status alone doesn't say what happened (a 400 may be a malformed
// request, a ref not found or a failed check), the code notes it.
type observedWriter struct {
	http.ResponseWriter
	status          int
	outcome, reason string
}

func (w *observedWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *observedWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *observedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// note says what the answer being written means (webkit.Event's endpoint
// outcomes); the first note stands.
func note(w http.ResponseWriter, outcome, reason string) {
	if ow, ok := w.(*observedWriter); ok && ow.outcome == "" {
		ow.outcome, ow.reason = outcome, reason
	}
}

// event is the answer as the Observer sees it: the note, or what the
// status says when nothing was noted.
func (w *observedWriter) event() webkit.Event {
	e := webkit.Event{Route: "endpoint", Outcome: w.outcome, Reason: w.reason}
	if e.Outcome != "" {
		return e
	}
	switch {
	case w.status == http.StatusNoContent:
		e.Outcome = "recorded"
	case w.status == http.StatusOK || w.status == 0:
		e.Outcome = "status"
	case w.status == http.StatusForbidden:
		e.Outcome = "operation"
	case w.status == http.StatusUnauthorized:
		e.Outcome, e.Reason = "unauthenticated", "session"
	case w.status == http.StatusServiceUnavailable:
		e.Outcome, e.Reason = "unavailable", "verification"
	default:
		e.Outcome = "invalid_request"
	}
	return e
}
