package siteverify_test

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/webkit/identity"
)

func ExampleParseAuthorization() {
	h := http.Header{}
	h.Set("Authorization", "Bearer eyJhbGciOi.eyJzdWIiOi.Qp4w")
	token, err := siteverify.ParseAuthorization(h)
	fmt.Println(token, err)

	// A token combined with other credentials is refused (webkit/RULES.md
	// hardening).
	h.Set("Authorization", "Bearer abc, Basic dXNlcjpwdw==")
	_, err = siteverify.ParseAuthorization(h)
	fmt.Println(errors.Is(err, identity.ErrInvalid))
	// Output:
	// eyJhbGciOi.eyJzdWIiOi.Qp4w <nil>
	// true
}
