// Package computed computes a waiting operation from the request and seals
// it into its ref, for a store that doesn't store operations that haven't
// been performed (§3: "A Company doesn't have to store operations that
// haven't been performed"): redisstore and the memory store share it.
//
//   - operation_id: "op_" and 20 characters of an HMAC of the owner's
//     key base, the action digest and the epoch, so a repeated request
//     keeps it (W19) and no other action or owner gets it (W21).
//   - revision: expires_at's Unix seconds, "-", 16 characters of an HMAC
//     of the operation_id, expires_at and terms (W24, W25, W36).
//   - ref: "<operation_id>.<revision>." and the base64url of an AES-256-GCM
//     seal (a key per hour, a random nonce) of what the operation needs,
//     with the owner's key base as additional data: only that owner opens
//     it, and a ref changed in any byte is not one (W74).
package computed

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opsgate/opsgate/internal/storekit"
)

// SecretSize is the size of a Sealer's secret.
const SecretSize = 32

// Op is an operation computed from a request, as its ref seals it.
type Op struct {
	ID      string // its operation_id once computed ("" before)
	Epoch   string // the epoch its operation_id was computed in (Epoch)
	Action  string // the action digest (storekit.ActionDigest)
	Account string
	Expires time.Time // whole seconds
	// Minted is when it was computed (the caller's clock): an approval
	// stores it only if no neighbour (Neighbours) was performed since.
	Minted  time.Time
	Terms   []byte
	Summary string
}

// Epoch is the epoch of now for a store that remembers a performed
// operation at least retention: operation_ids computed in one epoch are
// the same for one action. A performed operation is forgotten at least
// retention after it was computed, so the epoch has moved on by then and
// its operation_id never comes back (W141).
func Epoch(now time.Time, retention time.Duration) string {
	n := now.UnixNano() / int64(retention)
	// The latest one is kept: it is the same for a whole retention, and
	// every 403 asks for it.
	if e := lastEpoch.Load(); e != nil && e.n == n {
		return e.s
	}
	e := &epoch{n, strconv.FormatInt(n, 10)}
	lastEpoch.Store(e)
	return e.s
}

// Crosses reports whether an operation computed at now whose expires_at
// is expires could still be approved in a later epoch than now's: after
// the turn the same action computes another operation_id, so a store
// stores such an operation when its ref is returned, under the
// operation_id computed now, and the action keeps that one operation_id
// on both sides of the turn (§3 W19, W20). With the default lifetime of
// 10 minutes, only the last 10 minutes of an epoch store anything at the
// 403.
func Crosses(now, expires time.Time, retention time.Duration) bool {
	return expires.UnixNano()/int64(retention) != now.UnixNano()/int64(retention)
}

// epoch is an epoch's number and its decimal form.
type epoch struct {
	n int64
	s string
}

var lastEpoch atomic.Pointer[epoch]

// New returns the operation a request asks for, to be computed at now by
// a store that remembers a performed operation for retention: its
// expires_at is fixed when given, else now+lifetime, in whole seconds.
// ok is false when it must be stored instead: an expires_at more than
// retention away (its ref could outlive a performed operation of the same
// id), or a ref longer than maxRef.
func New(now time.Time, retention time.Duration, action, account string, fixed time.Time, lifetime time.Duration, terms []byte, summary string, maxRef int) (c Op, ok bool) {
	expires := fixed
	if expires.IsZero() {
		expires = now.Add(lifetime)
	}
	expires = time.Unix(expires.Unix(), 0).UTC()
	c = Op{Epoch: Epoch(now, retention), Action: action, Account: account, Expires: expires, Minted: now, Terms: terms, Summary: summary}
	return c, expires.Sub(now) <= retention && Size(c) <= maxRef
}

// Sealer computes operations' ids and seals and opens their refs. It is
// safe for concurrent use.
type Sealer struct {
	sealKey   []byte                    // derives each period's AES-256-GCM key (key)
	idKey     []byte                    // keys the HMACs of operation_ids and revisions
	macs      sync.Pool                 // of *macState, keyed with idKey
	scratch   sync.Pool                 // of *[]byte, Seal's buffer
	cur, prev atomic.Pointer[periodKey] // the latest periods' keys
}

// NewSealer returns the Sealer of a secret of SecretSize random bytes,
// which every web server sharing a store must share.
func NewSealer(secret []byte) (*Sealer, error) {
	if len(secret) != SecretSize {
		return nil, fmt.Errorf("a secret of %d bytes, not %d", len(secret), SecretSize)
	}
	sub := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	return &Sealer{sealKey: sub("opsgate seal"), idKey: sub("opsgate id")}, nil
}

// NewSecret returns a fresh secret.
func NewSecret() []byte {
	s := make([]byte, SecretSize)
	rand.Read(s) // never fails (crypto/rand)
	return s
}

// keyPeriod is how long one AES-256-GCM key seals refs: each ref has a
// random 96-bit nonce, and random nonces under one key are safe for about
// 2^32 messages (a collision chance of 2^-32, SP 800-38D); a key of its
// own per hour keeps even 50,000 refs a second (2^27.4 an hour) far below
// that, and costs one key derivation an hour.
const keyPeriod = time.Hour

// headSize is what a sealed part starts with: the key's period (8 bytes,
// authenticated as additional data) and the nonce.
const headSize = 8 + 12

// tagSize is AES-GCM's tag.
const tagSize = 16

// periodKey is one period's AES-256-GCM.
type periodKey struct {
	n    int64
	aead cipher.AEAD
}

// period is the key period of t.
func period(t time.Time) int64 { return t.UnixNano() / int64(keyPeriod) }

// key returns the AES-256-GCM of period n: HMAC-SHA256(sealKey, n) as its
// key; nil for a period after the next one, whose refs were never sealed
// (the next one's may be, by a server whose clock is ahead). The latest
// two periods' keys are kept, and only this clock's period or one next to
// it becomes one of them: a ref naming any other is answered without
// displacing the keys that seal and open today's.
func (k *Sealer) key(n int64) cipher.AEAD {
	for _, p := range [...]*atomic.Pointer[periodKey]{&k.cur, &k.prev} {
		if c := p.Load(); c != nil && c.n == n {
			return c.aead
		}
	}
	now := period(time.Now())
	if n > now+1 {
		return nil
	}
	m := hmac.New(sha256.New, k.sealKey)
	m.Write(binary.BigEndian.AppendUint64(nil, uint64(n)))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		panic(err) // a 32-byte key: never
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // AES's block size: never
	}
	if n < now-1 {
		return aead
	}
	if c := k.cur.Load(); c == nil || n > c.n {
		k.prev.Store(c)
		k.cur.Store(&periodKey{n, aead})
	} else if p := k.prev.Load(); n < c.n && (p == nil || n > p.n) {
		k.prev.Store(&periodKey{n, aead}) // the period before, after a restart
	}
	return aead
}

// macState is a keyed HMAC and the buffer mac writes into it at once.
type macState struct {
	h   hash.Hash
	buf []byte
	sum []byte // the last sum
}

// mac is HMAC-SHA256 with the id key over parts, then tail (when not
// nil), then terms (when not nil), each ended by a 0, written into sum.
func (k *Sealer) mac(sum *[sha256.Size]byte, terms, tail []byte, parts ...string) []byte {
	m, _ := k.macs.Get().(*macState)
	if m == nil {
		m = &macState{h: hmac.New(sha256.New, k.idKey)}
	}
	m.h.Reset()
	m.buf = m.buf[:0]
	for _, p := range parts {
		m.buf = append(append(m.buf, p...), 0)
	}
	if tail != nil {
		m.buf = append(append(m.buf, tail...), 0)
	}
	if terms != nil {
		m.buf = append(append(m.buf, terms...), 0)
	}
	m.h.Write(m.buf)
	// Summed into the pooled state, then copied: sum passed to the
	// hash.Hash would escape to the heap on every call.
	m.sum = m.h.Sum(m.sum[:0])
	copy(sum[:], m.sum)
	k.macs.Put(m)
	return sum[:]
}

// appendIDChars appends the first n characters of sum's base64url: ID
// characters of spec 8.2 (W22, W23).
func appendIDChars(dst, sum []byte, n int) []byte {
	var buf [44]byte
	base64.RawURLEncoding.Encode(buf[:], sum[:32])
	return append(dst, buf[:n]...)
}

// ID is the operation_id c describes for the owner whose keys start with
// base.
func (k *Sealer) ID(base string, c Op) string {
	var sum [sha256.Size]byte
	var id [23]byte // in one allocation: the string
	return string(appendIDChars(append(id[:0], "op_"...), k.mac(&sum, nil, nil, base, c.Action, c.Epoch), 20))
}

// Neighbours are the operation_ids c's action gets in the epochs just
// before and after c's. At an epoch's turn, two requests get two
// operation_ids; a store that computes operations stores c's only while
// neither neighbour is remembered, unless the neighbour was performed
// before c was minted (c is then the action's next operation, W141), so
// the action still has one operation at a time (W19), and a ref handed out
// before its operation was performed never stores a second.
func (k *Sealer) Neighbours(base string, c Op) (before, after string) {
	e, err := strconv.ParseInt(c.Epoch, 10, 64)
	if err != nil {
		return "", ""
	}
	b, a := c, c
	b.Epoch, a.Epoch = strconv.FormatInt(e-1, 10), strconv.FormatInt(e+1, 10)
	return k.ID(base, b), k.ID(base, a)
}

// Revision is the revision of c's terms and expires_at in operation id.
func (k *Sealer) Revision(id string, c Op) string {
	var rev [20 + 1 + 16]byte // in one allocation: the string
	sec := strconv.AppendInt(rev[:0], c.Expires.Unix(), 10)
	var sum [sha256.Size]byte
	sum2 := k.mac(&sum, c.Terms, sec, id)
	return string(appendIDChars(append(sec, '-'), sum2, 16))
}

// sealedLen is the length of c's fields as Seal writes them, before the
// salt and the tag.
func sealedLen(c Op) int {
	n := 16 // expires_at, minted
	for _, l := range [...]int{len(c.Epoch), len(c.Action), len(c.Account), len(c.Terms), len(c.Summary)} {
		n += l + (bits.Len64(uint64(l)|1)+6)/7 // the length's uvarint
	}
	return n
}

// Size is the length of the ref that seals c: its operation_id and
// revision (at most 23 and 28 characters), then the base64url of the
// salt, the fields and the tag.
func Size(c Op) int {
	return 23 + 1 + 28 + 1 + base64.RawURLEncoding.EncodedLen(headSize+sealedLen(c)+tagSize)
}

// Seal returns the ref of operation id, revision rev, computed as c, for
// the owner whose keys start with base. It is on every 403 the Gate
// answers: the seal is made in a pooled buffer, and the ref is its only
// allocation.
func (k *Sealer) Seal(base, id, rev string, c Op) string {
	n := period(time.Now())
	size := headSize + sealedLen(c) + tagSize
	scratch, _ := k.scratch.Get().(*[]byte)
	if scratch == nil {
		scratch = new([]byte)
	}
	if cap(*scratch) < size+len(base)+8 {
		*scratch = make([]byte, 0, size+len(base)+8)
	}
	// The seal, then its additional data after it (the AEAD writes no
	// further than size).
	buf := (*scratch)[:headSize:size]
	binary.BigEndian.PutUint64(buf, uint64(n))
	rand.Read(buf[8:headSize])
	plain := buf[headSize:]
	for _, f := range [...]string{c.Epoch, c.Action, c.Account} {
		plain = binary.AppendUvarint(plain, uint64(len(f)))
		plain = append(plain, f...)
	}
	plain = binary.AppendUvarint(plain, uint64(len(c.Terms)))
	plain = append(plain, c.Terms...)
	plain = binary.AppendUvarint(plain, uint64(len(c.Summary)))
	plain = append(plain, c.Summary...)
	plain = binary.BigEndian.AppendUint64(plain, uint64(c.Expires.Unix()))
	plain = binary.BigEndian.AppendUint64(plain, uint64(c.Minted.UnixNano()))
	ad := append(append((*scratch)[size:size], base...), buf[:8]...)
	sealed := k.key(n).Seal(buf[headSize:headSize], buf[8:headSize], plain, ad)
	sealed = buf[:headSize+len(sealed)]
	var ref strings.Builder
	ref.Grow(len(id) + len(rev) + 2 + base64.RawURLEncoding.EncodedLen(len(sealed)))
	ref.WriteString(id)
	ref.WriteByte('.')
	ref.WriteString(rev)
	ref.WriteByte('.')
	storekit.AppendBase64(&ref, sealed)
	k.scratch.Put(scratch)
	return ref.String()
}

// additional is a seal's additional data: the owner's key base and the
// key's period.
func (k *Sealer) additional(base string, period []byte) []byte {
	return append(append(make([]byte, 0, len(base)+len(period)), base...), period...)
}

// Issue returns the revision of c (its ID set) and the ref that seals it,
// for the owner whose keys start with base: what a store answers for a
// computed operation.
func (k *Sealer) Issue(base string, c Op) (rev, ref string) {
	rev = k.Revision(c.ID, c)
	return rev, k.Seal(base, c.ID, rev, c)
}

// ErrNotSealed is a ref that is not a computed one of this Sealer and
// owner, or one altered.
var ErrNotSealed = errors.New("not a computed ref of this store and owner")

var strictBase64 = base64.RawURLEncoding.Strict()

// parts splits a ref into its operation_id, its revision, and what
// follows them ("" for a stored operation's ref).
func parts(ref string) (id, rev, sealed string) {
	id, rest, _ := strings.Cut(ref, ".")
	rev, sealed, _ = strings.Cut(rest, ".")
	return id, rev, sealed
}

// IsSealed reports whether ref has the form of a computed one: something
// follows its revision.
func IsSealed(ref string) bool {
	_, _, sealed := parts(ref)
	return sealed != ""
}

// Open reads a ref sealed for the owner whose keys start with base: its
// operation_id, its revision and what it was computed from (c.ID set).
// The operation_id and revision it names must be the ones computed from
// its seal.
func (k *Sealer) Open(base, ref string) (c Op, rev string, err error) {
	id, rev, sealed := parts(ref)
	// Strict, and no line breaks (which any base64 decoder skips): a ref
	// differing only in the bits base64 leaves unused, or in a line break,
	// would otherwise open to the same seal, so one ref could be written
	// several ways (W74: a ref changed anywhere is not found).
	raw, err := strictBase64.DecodeString(sealed)
	if err != nil || strings.ContainsAny(sealed, "\r\n") || len(raw) < headSize+tagSize {
		return c, "", ErrNotSealed
	}
	n := int64(binary.BigEndian.Uint64(raw))
	if n < 0 {
		return c, "", ErrNotSealed
	}
	aead := k.key(n)
	if aead == nil {
		return c, "", ErrNotSealed
	}
	plain, err := aead.Open(nil, raw[8:headSize], raw[headSize:], k.additional(base, raw[:8]))
	if err != nil {
		return c, "", ErrNotSealed
	}
	var f [5][]byte
	for i := range f {
		l, w := binary.Uvarint(plain)
		if w <= 0 || l > uint64(len(plain)-w) {
			return c, "", ErrNotSealed
		}
		f[i], plain = plain[w:w+int(l)], plain[w+int(l):]
	}
	if len(plain) != 16 {
		return c, "", ErrNotSealed
	}
	c = Op{Epoch: string(f[0]), Action: string(f[1]), Account: string(f[2]), Terms: f[3], Summary: string(f[4]),
		Expires: time.Unix(int64(binary.BigEndian.Uint64(plain)), 0).UTC(),
		Minted:  time.Unix(0, int64(binary.BigEndian.Uint64(plain[8:]))).UTC()}
	c.ID = k.ID(base, c)
	if c.ID != id || k.Revision(c.ID, c) != rev {
		return Op{}, "", ErrNotSealed
	}
	return c, rev, nil
}
