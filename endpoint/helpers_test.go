package endpoint_test

// The helpers below are the Mount tests' share of the endpoint's flow
// helpers (internal/opsendpoint/flow_test.go).

const origin = "https://shop.example"

var cookieKeys = [][]byte{[]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")}
