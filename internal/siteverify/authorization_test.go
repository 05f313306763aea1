package siteverify

import (
	"errors"
	"net/http"
	"testing"

	"github.com/opsgate/opsgate/webkit/identity"
)

func TestCheckAccessToken(t *testing.T) {
	t.Parallel()
	s := Caller{ClientID: "https://agent.example/agent"}
	if err := CheckAccessToken(s, identity.AccessToken{ClientID: s.ClientID, Account: "a"}); err != nil {
		t.Errorf("same agent: %v", err)
	}
	for _, id := range []string{"", "https://other.example/agent"} {
		if err := CheckAccessToken(s, identity.AccessToken{ClientID: id}); !errors.Is(err, identity.ErrInvalid) {
			t.Errorf("client_id %q: err = %v, want identity.ErrInvalid", id, err)
		}
	}
}

func TestParseAuthorization(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		want   string
		ok     bool
	}{
		{"none", nil, "", true},
		{"bearer", []string{"Bearer abc.DEF-_~+/=="}, "abc.DEF-_~+/==", true},
		{"scheme case-insensitive", []string{"bearer abc"}, "abc", true},
		{"two headers", []string{"Bearer abc", "Bearer def"}, "", false},
		{"token with other credentials", []string{"Bearer abc, Basic dXNlcjpwdw=="}, "", false},
		{"two tokens", []string{"Bearer abc def"}, "", false},
		{"Basic", []string{"Basic dXNlcjpwdw=="}, "", false},
		{"DPoP", []string{"DPoP abc"}, "", false},
		{"empty token", []string{"Bearer "}, "", false},
		{"no token", []string{"Bearer"}, "", false},
		{"two spaces", []string{"Bearer  abc"}, "", false},
		{"padding inside", []string{"Bearer ab=c"}, "", false},
		{"non-ASCII", []string{"Bearer abç"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("Authorization", v)
			}
			got, err := ParseAuthorization(h)
			if tt.ok != (err == nil) || got != tt.want {
				t.Fatalf("ParseAuthorization(%q) = %q, %v", tt.values, got, err)
			}
			if err != nil && !errors.Is(err, errMalformedAuthorization) {
				t.Errorf("err = %v, want errMalformedAuthorization", err)
			}
		})
	}
}
