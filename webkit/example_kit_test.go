package webkit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/opsgate/opsgate/webkit"
)

// A website gates its exchange form: an ordinary browser exchanges at once;
// a browser joined to a Session that declared operations v3 gets 403 with
// Poppy-Operation, and performs once its agent's approval is recorded at
// endpoint (not shown: package endpoint).
func ExampleKit_Gate() {
	kit := webkit.New( // share these keys between all instances of the website
		[]byte("32-byte-long-hash-key-for-cookie"), []byte("32-byte-long-encryption-key-1234"))
	// kit.Store = redisstore.New(redisClient, redisstore.Options{}) // for many instances

	exchange := kit.Gate(func(r *http.Request) (webkit.Action, error) {
		if r.Method != http.MethodPost {
			return webkit.Action{}, webkit.ErrNotGated // showing the form needs no approval
		}
		order, size := r.PostFormValue("order"), r.PostFormValue("size")
		return webkit.Action{
			Key:     "exchange:" + order,
			Terms:   map[string]string{"order_id": order, "size": size},
			Summary: "Exchange the jacket on order " + order + " for size " + size + ".",
		}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "exchanged")
	}))

	mux := http.NewServeMux() // endpoint.NewMount(…).Handler(mux) serves the endpoint and the kit's routes beside it
	mux.Handle("/orders/exchange", exchange)

	post := func(cookie *http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/orders/exchange", strings.NewReader(url.Values{"order": {"ord_7"}, "size": {"L"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Accept", "application/json")
		if cookie != nil {
			r.AddCookie(cookie)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}

	// An ordinary browser.
	w := post(nil)
	fmt.Print(w.Code, " ", w.Body.String())

	// The agent's browser, joined to a signed-out Session (the kit's join
	// endpoint or the website's login callback calls Bind).
	join := httptest.NewRecorder()
	_ = kit.Sessions.Bind(join, httptest.NewRequest("GET", "/", nil), webkit.Session{
		ID: "ses_1", Agent: "https://agent.example/client", User: "usr_1",
		Extensions: map[string]string{"operations": "3"},
	})
	w = post(join.Result().Cookies()[0])
	op := w.Header().Get("Poppy-Operation") // the Session's sid and the operation's ref
	fmt.Println(w.Code, strings.HasPrefix(op, `sid="ses_1", ref="`), w.Header().Get("Cache-Control"), w.Body.String())
	// Output:
	// 200 exchanged
	// 403 true no-store {"error":"approval_required"}
}
