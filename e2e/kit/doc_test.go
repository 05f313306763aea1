// Package kit_test runs the kit's packages with the routers and CSRF
// libraries websites put around them (chi, gorilla/mux, nosurf), which the
// kit's own module does not require.
package kit_test
