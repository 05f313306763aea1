package labels

import (
	"fmt"
	"testing"
)

// However many kinds a website names, a metric gets at most MaxKinds of
// them: the rest are "other" (a label is a series on every scraper).
func TestKindsBounded(t *testing.T) {
	var k Kinds
	for i := range MaxKinds {
		if got := k.Of(fmt.Sprint("kind", i)); got != fmt.Sprint("kind", i) {
			t.Fatalf("kind %d: %q", i, got)
		}
	}
	if got := k.Of("one-too-many"); got != "other" {
		t.Fatalf("beyond MaxKinds: %q", got)
	}
	if got := k.Of("kind3"); got != "kind3" {
		t.Fatalf("a kind already seen: %q", got)
	}
	if k.Of("") != "" || !Known("gate") || Known("metrics") {
		t.Fatal("empty kind or routes")
	}
}
