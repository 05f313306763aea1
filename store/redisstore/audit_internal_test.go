package redisstore

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"testing/quick"
)

// An entry's head is written as json.Marshal writes it, byte for byte,
// whatever its strings hold (entryHead.encode).
func TestEntryHeadEncodedAsJSONWould(t *testing.T) {
	same := func(h entryHead) bool {
		want, _ := json.Marshal(h)
		if got := h.encode(); !bytes.Equal(got, want) {
			t.Errorf("encode(%+v)\n got %s\nwant %s", h, got, want)
			return false
		}
		return true
	}
	tricky := []string{"", "usr_1", "https://agent.example/client", `quote"d`, `back\slash`, "<script>&", "line\nbreak\t\x00\x1f",
		"\x7f", "é ü 日本", "\u2028\u2029", "\xff\xfe invalid UTF-8", "a\xc3", "emoji 🙂"}
	for _, s := range tricky {
		same(entryHead{ID: s, What: "claimed", At: -1, Agent: s, User: s})
		same(entryHead{ID: "e1", What: s, At: 1796052877123456789, Instance: s, Agent: "a", User: "u", Account: s, Session: s, Kind: s, Note: s})
	}
	r := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(3) > 0 {
				b[i] = byte(' ' + r.IntN(95))
			}
		}
		return string(b)
	}
	if err := quick.Check(func(at int64) bool {
		return same(entryHead{ID: str(), What: str(), At: at, Instance: str(), Agent: str(), User: str(), Account: str(), Session: str(), Kind: str(), Note: str()})
	}, &quick.Config{MaxCount: 5000}); err != nil {
		t.Error(err)
	}

	// And the tail the caller knows (tailOf), the same way.
	sameTail := func(k entryKnown) bool {
		want, _ := json.Marshal(k)
		if got := k.appendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("appendJSON(%+v)\n got %s\nwant %s", k, got, want)
			return false
		}
		return true
	}
	for _, s := range tricky {
		sameTail(entryKnown{Op: s, Revision: s, Summary: s, Expires: s, Digest: s, Terms: s, Approval: s, Used: s})
	}
	sameTail(entryKnown{Summary: "Exchange the jacket on order ord_1 for $70.00 more.", Terms: `{"order_id":"ord_1","size":"M"}`})
	if err := quick.Check(func() bool {
		return sameTail(entryKnown{Op: str(), Revision: str(), Summary: str(), Expires: str(), Digest: str(), Terms: str(), Approval: str(), Used: str()})
	}, &quick.Config{MaxCount: 5000}); err != nil {
		t.Error(err)
	}
}
