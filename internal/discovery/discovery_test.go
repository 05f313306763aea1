package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestDiscovery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		d    Discovery
		want string // JSON, or "" for an error
	}{
		{"W01 W02 W04 endpoint with join", Discovery{Endpoint: "https://shop.example/poppy/operations", BrowserSessionEndpoint: "https://shop.example/poppy/join"},
			`{"extensions":{"operations":[{"endpoint":"https://shop.example/poppy/operations","version":"3"}]},"web":{"browser_session_endpoint":"https://shop.example/poppy/join"}}`},
		{"W05 no operations on the website", Discovery{}, `{"extensions":{"operations":[{"version":"3"}]}}`},
		{"W04 endpoint without join refused", Discovery{Endpoint: "https://shop.example/poppy/operations"}, ""},
		{"W03 http endpoint refused", Discovery{Endpoint: "http://shop.example/poppy/operations", BrowserSessionEndpoint: "https://shop.example/j"}, ""},
		{"relative endpoint refused", Discovery{Endpoint: "/poppy/operations", BrowserSessionEndpoint: "https://shop.example/j"}, ""},
		{"http join refused", Discovery{Endpoint: "https://shop.example/o", BrowserSessionEndpoint: "http://shop.example/j"}, ""},
		{"userinfo refused", Discovery{Endpoint: "https://u:p@shop.example/o", BrowserSessionEndpoint: "https://shop.example/j"}, ""},
		{"local development allows http on localhost", Discovery{Endpoint: "http://localhost:8080/poppy/operations", BrowserSessionEndpoint: "http://127.0.0.1:8080/j", AllowLocal: true},
			`{"extensions":{"operations":[{"endpoint":"http://localhost:8080/poppy/operations","version":"3"}]},"web":{"browser_session_endpoint":"http://127.0.0.1:8080/j"}}`},
		{"local development still refuses http elsewhere", Discovery{Endpoint: "http://shop.example/o", BrowserSessionEndpoint: "http://localhost/j", AllowLocal: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.d.JSON()
			if tc.want == "" {
				if !errors.Is(err, ErrDiscovery) {
					t.Fatalf("JSON() = %s, %v; want an ErrDiscovery", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("JSON() =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestDiscoveryAddToKeepsOtherMembers(t *testing.T) {
	t.Parallel()
	doc := map[string]any{
		"name":       "Example Shop",
		"extensions": map[string]any{"payments": []any{map[string]any{"version": "1"}}},
		"web":        map[string]any{"sign_in": "https://shop.example/signin"},
	}
	d := Discovery{Endpoint: "https://shop.example/poppy/operations", BrowserSessionEndpoint: "https://shop.example/poppy/join"}
	if err := d.AddTo(doc); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(doc)
	want := `{"extensions":{"operations":[{"endpoint":"https://shop.example/poppy/operations","version":"3"}],"payments":[{"version":"1"}]},"name":"Example Shop","web":{"browser_session_endpoint":"https://shop.example/poppy/join","sign_in":"https://shop.example/signin"}}`
	if string(got) != want {
		t.Errorf("AddTo =\n%s\nwant\n%s", got, want)
	}
	if err := d.AddTo(map[string]any{"web": "nope"}); err == nil {
		t.Error("AddTo a document whose web is not an object: no error")
	}
}

func ExampleDiscovery() {
	d := Discovery{
		Endpoint:               "https://shop.example/poppy/operations",
		BrowserSessionEndpoint: "https://shop.example/poppy/join",
	}
	b, err := d.JSON()
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
	// Output:
	// {"extensions":{"operations":[{"endpoint":"https://shop.example/poppy/operations","version":"3"}]},"web":{"browser_session_endpoint":"https://shop.example/poppy/join"}}
}

// An http:// URL on localhost without AllowLocal names the setting that
// allows it, so a developer knows what to turn on.
func TestDiscoveryNamesAllowLocal(t *testing.T) {
	_, err := Discovery{Endpoint: "http://127.0.0.1:8080/poppy/operations", BrowserSessionEndpoint: "http://127.0.0.1:8080/j"}.JSON()
	if err == nil || !strings.Contains(err.Error(), "AllowLocal") {
		t.Errorf("err %v, want one naming AllowLocal", err)
	}
	_, err = Discovery{Endpoint: "http://shop.example/o", BrowserSessionEndpoint: "https://shop.example/j"}.JSON()
	if err == nil || strings.Contains(err.Error(), "AllowLocal") {
		t.Errorf("err %v: AllowLocal would not allow shop.example", err)
	}
}
