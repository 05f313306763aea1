package webkit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"slices"
)

// What the browser sent (§4 W62). The Gate gives describe, the handler and
// the waiting page's Continue control the body the browser sent. A
// middleware in front of the Gate may have read it first: a CSRF library
// (justinas/nosurf, gorilla/csrf) or a logging or method-override
// middleware that calls r.FormValue, r.PostFormValue or r.ParseForm. Then
// r.Body is spent and r.PostForm (r.MultipartForm for multipart/form-data)
// holds what it said, and the Gate encodes that form again: Continue posts
// the same fields, the CSRF library's token among them, and the handler
// reads them as before. A body spent with nothing parsed is a website
// wired the wrong way round; the Gate then says so loudly (errBodySpent)
// and performs nothing, rather than offer a Continue without the fields.

// errBodySpent is a body read before the Gate that left nothing the Gate
// can repeat.
var errBodySpent = errors.New("webkit: the request body was read before the Gate and not restored")

// sentBody returns r's body as the browser sent it: the bytes the Gate
// read, or, when a middleware had spent the body by parsing its form, that
// form encoded again. It may set r.ContentLength to the new body's length.
func (k *Kit) sentBody(r *http.Request) ([]byte, error) {
	body, err := k.readBody(r)
	if err != nil {
		return nil, err
	}
	switch {
	case r.ContentLength > 0 && int64(len(body)) < r.ContentLength && len(body) > 0:
		return nil, errBodySpent // read in part: nothing can be trusted
	case len(body) > 0 || r.ContentLength == 0:
		return body, nil
	}
	// Nothing left to read, though the browser may have sent a body.
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var form []byte
	switch {
	case mt == "application/x-www-form-urlencoded" && r.PostForm != nil:
		form = []byte(r.PostForm.Encode()) // keys sorted, each key's values in order
	case mt == "multipart/form-data" && r.MultipartForm != nil:
		if form, err = encodeMultipart(r.MultipartForm, params["boundary"], k.maxBody()); err != nil {
			return nil, err
		}
	case r.ContentLength > 0:
		return nil, errBodySpent
	default:
		return body, nil // chunked and empty: nothing says more was sent
	}
	if int64(len(form)) > k.maxBody() {
		return nil, errBodyTooLarge
	}
	r.ContentLength = int64(len(form))
	return form, nil
}

// encodeMultipart writes a parsed multipart form again under boundary, the
// fields in order of their names, then the files (a file is never
// repeated from the page: Continue says so, §4 W63).
func encodeMultipart(f *multipart.Form, boundary string, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if boundary != "" {
		if err := mw.SetBoundary(boundary); err != nil {
			return nil, errBodySpent
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.Value)) {
		for _, v := range f.Value[name] {
			if err := mw.WriteField(name, v); err != nil {
				return nil, err
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.File)) {
		for _, fh := range f.File[name] {
			if int64(buf.Len())+fh.Size > limit {
				return nil, errBodyTooLarge
			}
			h := make(textproto.MIMEHeader)
			h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": name, "filename": fh.Filename}))
			if ct := fh.Header.Get("Content-Type"); ct != "" {
				h.Set("Content-Type", ct)
			}
			pw, err := mw.CreatePart(h)
			if err != nil {
				return nil, err
			}
			src, err := fh.Open()
			if err != nil {
				return nil, fmt.Errorf("webkit: multipart file %q: %w", fh.Filename, err)
			}
			_, err = io.Copy(pw, src)
			src.Close()
			if err != nil {
				return nil, fmt.Errorf("webkit: multipart file %q: %w", fh.Filename, err)
			}
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// bodySpent answers a request whose body a middleware read and did not
// restore: the Gate can't know what the browser sent, so it performs
// nothing and issues nothing (W62: a Continue without the fields would
// not repeat the request). It is the website's wiring, not the client's
// request: 500, and an error in the log that names the fix.
func (k *Kit) bodySpent(w http.ResponseWriter, r *http.Request) {
	k.logger().LogAttrs(r.Context(), slog.LevelError,
		"opsgate: a middleware in front of the Gate read the request body and did not restore it, so the Gate can't know what the browser sent; nothing was performed. "+
			"Put that middleware inside the Gate, have it restore r.Body, or have it parse the form (r.ParseForm, r.FormValue): the Gate then uses r.PostForm",
		slog.String("path", r.URL.Path), slog.String("method", r.Method), slog.Int64("content_length", r.ContentLength))
	k.observe(r.Context(), Event{Route: routeGate, Outcome: "misconfigured", Reason: "body_read"})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusInternalServerError)
	io.WriteString(w, "server error: the website read this request before its approval step; nothing was done\n")
}

// readBody reads r's body up to MaxBody.
func (k *Kit) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	limit := k.maxBody()
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	var body []byte
	var err error
	if n := r.ContentLength; n >= 0 {
		// Its declared length, and one byte more to see that it ends
		// there: one allocation of the body's size, not io.ReadAll's
		// 512 bytes and up. Never more than 8 KiB before the bytes
		// arrive (a client that declares a large body and sends it
		// slowly holds no more than that); a body longer is read on,
		// one that ends early with an error (a client gone) fails.
		body = make([]byte, 0, min(n+1, 8<<10))
		for err == nil && len(body) < cap(body) {
			var m int
			m, err = r.Body.Read(body[len(body):cap(body)])
			body = body[:len(body)+m]
		}
		if err == io.EOF {
			err = nil
		} else if err == nil {
			var rest []byte
			rest, err = io.ReadAll(io.LimitReader(r.Body, limit+1-int64(len(body))))
			body = append(body, rest...)
		}
	} else {
		body, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
	}
	if err != nil {
		return nil, fmt.Errorf("webkit: request body: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, errBodyTooLarge
	}
	return body, nil
}

func restoreBody(r *http.Request, body []byte) {
	if body == nil && (r.Body == nil || r.Body == http.NoBody) {
		return
	}
	if rb, ok := r.Body.(*replayBody); ok { // restored before: rewind it
		rb.Reset(body)
		return
	}
	rb := &replayBody{}
	rb.Reset(body)
	r.Body = rb
}

// replayBody is the body the Gate read, given again to describe and then to
// the handler; one per request, rewound in between.
type replayBody struct{ bytes.Reader }

func (*replayBody) Close() error { return nil }
