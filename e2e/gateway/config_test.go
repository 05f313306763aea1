package gateway_test

import (
	"encoding/base64"
	"strings"
	"testing"
)

// shopConfig is the gateway tests' shop (endpoint/gateway/gateway_test.go
// has the same): UPSTREAM is replaced by the upstream's URL.
const shopConfig = `
origin: https://shop.example
upstream: UPSTREAM
name: Ridgeline Outfitters
store: memory
cookie_keys:
  - hash_env: GW_TEST_HASH
    encryption_env: GW_TEST_ENC
own_login_cookies: [_shop_session]
chrome:
  stylesheets: [/assets/site.css]
  header: '<header class="site-header">Ridgeline masthead</header>'
  footer: '<footer class="site-footer">Ridgeline footer</footer>'
actions:
  - match: POST /orders/{order}/exchange
    key: "exchange:{path.order}"
    terms:
      order_id: "{path.order}"
      size: "{form.size}"
      price_difference: {amount: "0.00", currency: USD}
    summary: "Exchange the jacket on order {path.order} for size {form.size}."
    lifetime: 5m
    kind: exchange
  - match: POST /api/deliveries/{order}
    key: "delivery:{path.order}"
    terms:
      order_id: "{path.order}"
      date: "{json.date}"
      window: "{json.slot.window}"
      guests: "{json.guests}"
    summary: "Move the delivery of order {path.order} to {json.date} ({json.slot.window})."
    kind: delivery
`

// setKeys puts cookie keys in the environment variables the configs name.
func setKeys(t testing.TB) {
	t.Setenv("GW_TEST_HASH", base64.StdEncoding.EncodeToString([]byte(strings.Repeat("h", 32))))
	t.Setenv("GW_TEST_ENC", base64.StdEncoding.EncodeToString([]byte(strings.Repeat("e", 32))))
}
