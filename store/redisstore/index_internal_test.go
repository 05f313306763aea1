package redisstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/opsgate/opsgate/internal/storekit"
)

// crc16 is CRC-16/XMODEM, as Redis Cluster computes slots: its check
// value, Redis's own examples (CLUSTER KEYSLOT), and the bit-by-bit
// definition on random tags.
func TestCRC16(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3 (CRC-16/XMODEM's check value)", got)
	}
	for tag, slot := range map[string]int{"foo": 12182, "bar": 5061, "somekey": 11058, "user1000": 3443} {
		if got := hashSlot(tag); got != slot {
			t.Errorf("hashSlot(%q) = %d, want %d", tag, got, slot)
		}
	}
	bitwise := func(s string) uint16 {
		var crc uint16
		for i := 0; i < len(s); i++ {
			crc ^= uint16(s[i]) << 8
			for range 8 {
				if crc&0x8000 != 0 {
					crc = crc<<1 ^ 0x1021
				} else {
					crc <<= 1
				}
			}
		}
		return crc
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 10_000 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		if got, want := crc16(string(b)), bitwise(string(b)); got != want {
			t.Fatalf("crc16(%q) = %#x, bit by bit %#x", b, got, want)
		}
	}
}

// The performing index named from an owner's base is the index of the
// Cluster slot of the owner's keys.
func TestIndexKeyOfBase(t *testing.T) {
	for _, prefix := range []string{"", "opsgate:", "shop{1}:"} {
		s := &rstore{prefix: prefix}
		for i := range 50 {
			agent, user := fmt.Sprintf("https://agent%d.example/client", i), fmt.Sprintf("usr_%d", i*7)
			want := prefix + "pf:{" + slotTag(hashSlot(storekit.Slot(agent, user))) + "}"
			if got := s.indexKeyOfBase(s.base(agent, user)); got != want {
				t.Fatalf("prefix %q: indexKeyOfBase = %q, want %q", prefix, got, want)
			}
		}
	}
}
