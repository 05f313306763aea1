package continueform

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

// Parse builds the entry list as a browser does: document order,
// checked boxes only, the selected option, no disabled or unnamed
// controls, the pressed button, controls joined by their form attribute;
// the action resolved against <base>; line breaks as CR LF. Body encodes
// it as the browser's urlencoded serializer does.
func TestParseContinueLikeABrowser(t *testing.T) {
	page := `<!doctype html><base href="https://shop.example/orders/">
<form id="opsgate-continue" method="POST" action="ord_7/exchange?x=1#frag" enctype="bogus">
<input type="hidden" name="a" value="1 2&amp;3">
<input name="text" value="no
breaks">
<input type="checkbox" name="box" value="on-1" checked><input type="checkbox" name="box" value="off">
<input type="checkbox" name="plain" checked>
<input type="radio" name="r" value="x"><input type="radio" name="r" value="y" checked>
<select name="s"><option disabled>d</option><option>  first   one </option><option value="2">two</option></select>
<select name="m" multiple><option value="1" selected>1</option><option value="2">2</option><option value="3" selected>3</option></select>
<textarea name="t">one
two</textarea>
<input name="off" value="x" disabled>
<fieldset disabled><input name="fs" value="x"><legend><input name="inlegend" value="y"></legend><legend><input name="second" value="z"></legend></fieldset>
<fieldset disabled><legend><input name="firstlegend" value="kept"></legend></fieldset>
<input value="unnamed">
<input type="file" name="f">
<input type="hidden" name="_charset_">
<button name="go" value="yes">Continue</button><button name="other" value="no">Other</button>
</form>
<input form="opsgate-continue" name="outside" value="o">
<input name="elsewhere" value="not this form">`
	c, err := Parse("https://shop.example/orders/ord_7/exchange", []byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if c.Method != "POST" || c.URL != "https://shop.example/orders/ord_7/exchange?x=1" || c.Enctype != "application/x-www-form-urlencoded" || c.Link {
		t.Fatalf("control %+v", c)
	}
	want := []Field{
		{"a", "1 2&3"}, {"text", "nobreaks"}, {"box", "on-1"}, {"plain", "on"}, {"r", "y"}, {"s", "first one"},
		{"m", "1"}, {"m", "3"}, {"t", "one\r\ntwo"}, {"inlegend", "y"}, {"firstlegend", "kept"}, {"_charset_", "UTF-8"}, {"go", "yes"}, {"outside", "o"},
	}
	if !slices.Equal(c.Fields, want) {
		t.Fatalf("fields\n%q\nwant\n%q", c.Fields, want)
	}
	ct, body := c.Body()
	if ct != "application/x-www-form-urlencoded" || string(body) != "a=1+2%263&text=nobreaks&box=on-1&plain=on&r=y&s=first+one&m=1&m=3&t=one%0D%0Atwo&inlegend=y&firstlegend=kept&_charset_=UTF-8&go=yes&outside=o" {
		t.Errorf("body %s %s", ct, body)
	}

	get, err := Parse("https://shop.example/p", []byte(`<form id="opsgate-continue" action="/q?dropped=1"><input name="k" value="v w"><input type="submit" name="s" value="S"></form>`))
	if err != nil || get.Method != "GET" || get.URL != "https://shop.example/q?k=v+w&s=S" {
		t.Errorf("a GET form: %+v %v", get, err)
	}
	mp, err := Parse("https://shop.example/p", []byte(`<form id="opsgate-continue" method="post"><input name="n&quot;" value="v"><button formenctype="multipart/form-data" formaction="/z">Go</button></form>`))
	if err != nil || mp.Enctype != "multipart/form-data" || mp.URL != "https://shop.example/z" {
		t.Fatalf("formenctype, formaction: %+v %v", mp, err)
	}
	ct, body = mp.Body()
	if !strings.HasPrefix(ct, "multipart/form-data; boundary=") || !bytes.Contains(body, []byte(`Content-Disposition: form-data; name="n%22"`)) {
		t.Errorf("multipart %s\n%s", ct, body)
	}
	if _, err := Parse("https://shop.example/p", []byte(`<p id="opsgate-continue">Continue</p>`)); !errors.Is(err, ErrNoContinue) {
		t.Errorf("a <p> as the control: %v", err)
	}
	if _, err := Parse("/relative", nil); err == nil {
		t.Error("a relative page URL was accepted")
	}
}
