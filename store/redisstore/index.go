package redisstore

import (
	"strconv"
	"sync"
)

// The index of performing operations (Store.Performing): one sorted set per
// Redis Cluster hash slot, "<prefix>pf:{<tag>}", whose tag hashes to that
// slot, so that the steps that claim, start, release and finish an
// operation keep it in the same atomic step (take.lua, finish.lua,
// release.lua, tidy.lua): every key of a step is in one slot. Its members
// are the keys of the slot's operations being performed, scored by when
// each was claimed (whole milliseconds). Performing reads the 16,384 sets
// (each Cluster master its own slots' sets, through the Cluster client),
// never the keyspace: its cost follows the operations performing, plus a
// fixed pass over the slots, however many other keys the Redis holds.

// hashSlots is the number of Redis Cluster hash slots.
const hashSlots = 16384

// indexKeyOfBase is the index of performing operations of the hash slot
// of the owner whose keys start with base (rstore.base): the owner's slot
// is read from base, not hashed again.
func (s *rstore) indexKeyOfBase(base string) string {
	slot := base[len(s.prefix)+1 : len(base)-2] // prefix "{" slot "}:"
	return s.indexKeyOfSlot(hashSlot(slot))
}

// indexKeyOfSlot is the index of hash slot n.
func (s *rstore) indexKeyOfSlot(n int) string {
	return s.prefix + "pf:{" + slotTag(n) + "}"
}

// hashSlot is the Redis Cluster hash slot of a key whose hash tag is tag
// (CRC16/XMODEM of the tag, modulo 16,384).
func hashSlot(tag string) int {
	return int(crc16(tag) % hashSlots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster
// computes key slots, a byte at a time from crc16Table.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

// crc16Table is the CRC of each byte value, shifted in bit by bit.
var crc16Table = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

var (
	slotTagsOnce sync.Once
	slotTags     []string
)

// slotTag is the shortest decimal number (the first found counting up from
// 0) whose hash slot is n: the same on every web server, so they all keep
// and read the same index keys.
func slotTag(n int) string {
	slotTagsOnce.Do(func() {
		tags := make([]string, hashSlots)
		left := hashSlots
		for i := 0; left > 0; i++ {
			t := strconv.Itoa(i)
			if h := hashSlot(t); tags[h] == "" {
				tags[h] = t
				left--
			}
		}
		slotTags = tags
	})
	return slotTags[n]
}
