package discovery

import (
	"errors"
	"testing"
)

// AllowLocal admits plain http only where it can't reach the internet:
// loopback, and the names RFC 6761 reserves (*.localhost, *.test). W03
// holds everywhere else, AllowLocal or not.
func TestDiscoveryAllowLocalNames(t *testing.T) {
	for host, ok := range map[string]bool{
		"localhost:8080": true, "127.0.0.1": true, "[::1]:9000": true,
		"shop.localhost": true, "shop.test": true, "SHOP.TEST.": true,
		"shop.example": false, "test.shop.example": false, "shoptest": false, "10.0.0.1": false,
	} {
		d := Discovery{Endpoint: "http://" + host + "/poppy/operations", BrowserSessionEndpoint: "http://" + host + "/poppy/join", AllowLocal: true}
		if _, err := d.Fragment(); (err == nil) != ok || (err != nil && !errors.Is(err, ErrDiscovery)) {
			t.Errorf("%s: %v", host, err)
		}
		d.AllowLocal = false
		if _, err := d.Fragment(); err == nil {
			t.Errorf("%s without AllowLocal: W03 wants HTTPS", host)
		}
	}
}
