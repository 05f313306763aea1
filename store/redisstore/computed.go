package redisstore

import (
	"context"
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

	"github.com/opsgate/opsgate/store"
	"github.com/redis/go-redis/v9"
)

// Computed waiting operations (Options.ComputeWaiting).
//
// §3: "A Company doesn't have to store operations that haven't been
// performed." With ComputeWaiting, the 403 step stores nothing for an
// action that has no live operation: Take only reads (its token and the
// action key) and answers "compute". The operation is then computed from
// the request, and its ref carries it, sealed:
//
//   - operation_id: "op_" and 20 characters of HMAC(key, owner's slot,
//     action digest, epoch), so a repeated request keeps it (W19) and
//     another action never gets it (W21). The epoch is the Unix time
//     divided by Retention: an operation performed and then forgotten
//     (Retention after it was performed, at least) was computed in an
//     earlier epoch, so its id never comes back (W141).
//   - revision: expires_at's Unix seconds, "-", 16 characters of
//     HMAC(key, operation_id, expires_at, terms): other terms or another
//     expires_at is another revision (W24, W25, W36).
//   - ref: "<operation_id>.<revision>." (store.MakeRef, so every reader
//     of refs finds both) and the base64url of an AES-GCM seal of the
//     epoch, the action digest, the account, expires_at, terms and
//     summary, bound to the owner's slot: only this owner's Sessions can
//     open it, and a ref nobody was given, or one whose id or revision
//     was changed, is not found (W74).
//
// The operation is stored by the first approval sent for it (record.lua
// stores it as Take would have, then records): from then on every step
// sees it as if Take had stored it. Lookup of a ref whose operation is not
// stored answers from the ref itself.
//
// Only operations whose expires_at is at most Retention away are computed:
// a ref then expires before the operation it names can have been performed
// and forgotten, so it can never bring back a performed operation_id.
// Terms too long for a 2048-character ref are stored, as without
// ComputeWaiting.

// sealKeyName is the key (after the prefix) that holds the store's secret:
// 32 random bytes, made once by the first server that needs them, and
// read by every other server sharing the Redis.
const sealKeyName = "seal"

// sealer seals and opens computed refs, and computes their ids.
type sealer struct {
	sealKey []byte    // derives each ref's own AES-256-GCM key (refKey)
	idKey   []byte    // keys the HMACs of operation_ids and revisions
	macs    sync.Pool // of *macState, keyed with idKey
	// sealMacs are HMAC-SHA256 hashes keyed with sealKey.
	sealMacs sync.Pool
}

// saltSize is the random salt each ref's key is derived from: refs never
// share a key, so no count of refs can wear out AES-GCM's nonces (random
// 96-bit nonces under one key are safe for about 2^32 messages, which a
// busy site would seal in days).
const saltSize = 16

// refKey is the AES-256-GCM of the ref whose salt is salt: its key is
// HMAC-SHA256(sealKey, salt), used for that ref alone, with a zero nonce.
func (k *sealer) refKey(salt []byte) cipher.AEAD {
	m, _ := k.sealMacs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, k.sealKey)
	}
	m.Reset()
	m.Write(salt)
	var key [sha256.Size]byte
	block, err := aes.NewCipher(m.Sum(key[:0]))
	k.sealMacs.Put(m)
	if err != nil {
		panic(err) // a 32-byte key: never
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // AES's block size: never
	}
	return aead
}

// zeroNonce is the nonce of every ref: each has a key of its own.
var zeroNonce = make([]byte, 12)

// sealerState caches the store's sealer once it was read or made.
type sealerState struct {
	s  atomic.Pointer[sealer]
	mu sync.Mutex // held while reading the secret
}

// sealer returns the store's sealer, reading (or making) its secret in
// Redis on first use; an error leaves nothing cached, so the next call
// tries again.
func (s *Store) sealer(ctx context.Context) (*sealer, error) {
	if k := s.seal.s.Load(); k != nil {
		return k, nil
	}
	s.seal.mu.Lock()
	defer s.seal.mu.Unlock()
	if k := s.seal.s.Load(); k != nil {
		return k, nil
	}
	key := s.prefix + sealKeyName
	fresh := make([]byte, 32)
	rand.Read(fresh) // never fails (crypto/rand)
	if err := s.client.SetNX(ctx, key, fresh, 0).Err(); err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	secret, err := s.client.Get(ctx, key).Bytes()
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	if len(secret) != 32 {
		return nil, fmt.Errorf("seal key %q holds %d bytes, not 32", key, len(secret))
	}
	sub := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	k := &sealer{sealKey: sub("opsgate seal"), idKey: sub("opsgate id")}
	s.seal.s.Store(k)
	return k, nil
}

// computed is an operation computed from a request, as its ref seals it.
type computed struct {
	id      string // its operation_id once computed ("" before)
	epoch   string // the epoch its operation_id was computed in
	action  string // the action digest (store.ActionDigest)
	account string
	expires time.Time // whole seconds
	terms   []byte
	summary string
}

// epochOf is the epoch of now: operation_ids computed in one epoch are
// the same for one action.
func (s *Store) epochOf(now time.Time) string {
	return strconv.FormatInt(now.UnixNano()/int64(s.retention), 10)
}

// mac is HMAC-SHA256 with the sealer's id key over parts, then terms,
// each ended by a 0, written into sum.
func (k *sealer) mac(sum *[sha256.Size]byte, terms []byte, parts ...string) []byte {
	m, _ := k.macs.Get().(*macState)
	if m == nil {
		m = &macState{h: hmac.New(sha256.New, k.idKey)}
	}
	m.h.Reset()
	m.buf = m.buf[:0]
	for _, p := range parts {
		m.buf = append(append(m.buf, p...), 0)
	}
	if terms != nil {
		m.buf = append(append(m.buf, terms...), 0)
	}
	m.h.Write(m.buf)
	out := m.h.Sum(sum[:0])
	k.macs.Put(m)
	return out
}

// macState is a keyed HMAC and the buffer mac writes into it at once.
type macState struct {
	h   hash.Hash
	buf []byte
}

// idChars writes the first n characters of sum's base64url: ID
// characters of spec 8.2 (W22, W23).
func idChars(sum []byte, n int) string {
	var buf [44]byte
	base64.RawURLEncoding.Encode(buf[:], sum[:32])
	return string(buf[:n])
}

// operation is the operation c describes for the owner whose keys start
// with base: its computed operation_id and revision.
func (k *sealer) operation(base string, c computed) store.Operation {
	id := c.id
	if id == "" {
		id = k.operationID(base, c)
	}
	sec := strconv.FormatInt(c.expires.Unix(), 10)
	var sum [sha256.Size]byte
	rev := sec + "-" + idChars(k.mac(&sum, c.terms, id, sec), 16)
	return store.Operation{ID: id, Revision: rev, Summary: c.summary, Terms: c.terms, ExpiresAt: c.expires}
}

// operationID is the operation_id c describes for the owner whose keys
// start with base.
func (k *sealer) operationID(base string, c computed) string {
	var sum [sha256.Size]byte
	return "op_" + idChars(k.mac(&sum, nil, base, c.action, c.epoch), 20)
}

// sealedLen is the length of c's fields as seal writes them, before the
// seal's nonce and tag.
func sealedLen(c computed) int {
	n := 8 // expires_at
	for _, l := range [...]int{len(c.epoch), len(c.action), len(c.account), len(c.terms), len(c.summary)} {
		n += l + (bits.Len64(uint64(l)|1)+6)/7 // the length's uvarint
	}
	return n
}

// sealedSize is the length of the ref that seals c: its operation_id and
// revision (at most 23 and 28 characters), then the base64url of a salt,
// the fields and the tag.
func sealedSize(c computed) int {
	return 23 + 1 + 28 + 1 + base64.RawURLEncoding.EncodedLen(saltSize+sealedLen(c)+16)
}

// seal returns the ref of op, computed as c, for the owner whose keys
// start with base.
func (k *sealer) seal(base string, op store.Operation, c computed) string {
	ns := saltSize
	buf := make([]byte, ns, ns+sealedLen(c)+16)
	rand.Read(buf)
	plain := buf[ns:]
	for _, f := range [...]string{c.epoch, c.action, c.account} {
		plain = binary.AppendUvarint(plain, uint64(len(f)))
		plain = append(plain, f...)
	}
	plain = binary.AppendUvarint(plain, uint64(len(c.terms)))
	plain = append(plain, c.terms...)
	plain = binary.AppendUvarint(plain, uint64(len(c.summary)))
	plain = append(plain, c.summary...)
	plain = binary.BigEndian.AppendUint64(plain, uint64(c.expires.Unix()))
	sealed := k.refKey(buf[:ns]).Seal(buf[ns:ns], zeroNonce, plain, []byte(base))
	sealed = buf[:ns+len(sealed)]
	ref := make([]byte, 0, len(op.ID)+len(op.Revision)+2+base64.RawURLEncoding.EncodedLen(len(sealed)))
	ref = append(append(append(append(ref, op.ID...), '.'), op.Revision...), '.')
	return string(base64.RawURLEncoding.AppendEncode(ref, sealed))
}

var errNotSealed = errors.New("not a computed ref of this store and owner")

// open reads a computed ref sealed for the owner whose keys start with
// base, and returns its operation too. Any other ref, or one altered, is
// errNotSealed.
func (k *sealer) open(base, ref string) (store.Operation, computed, error) {
	op, c, err := k.openSeal(base, ref)
	if err != nil {
		return op, c, err
	}
	if id, rev, ok := store.SplitRef(ref); !ok || id != op.ID || rev != op.Revision {
		return op, c, errNotSealed
	}
	return op, c, nil
}

func (k *sealer) openSeal(base, ref string) (store.Operation, computed, error) {
	var c computed
	var op store.Operation
	_, sealed := sealedPart(ref)
	raw, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil || len(raw) < saltSize {
		return op, c, errNotSealed
	}
	plain, err := k.refKey(raw[:saltSize]).Open(nil, zeroNonce, raw[saltSize:], []byte(base))
	if err != nil {
		return op, c, errNotSealed
	}
	var f [5][]byte
	for i := range f {
		l, w := binary.Uvarint(plain)
		if w <= 0 || l > uint64(len(plain)-w) {
			return op, c, errNotSealed
		}
		f[i], plain = plain[w:w+int(l)], plain[w+int(l):]
	}
	if len(plain) != 8 {
		return op, c, errNotSealed
	}
	c = computed{epoch: string(f[0]), action: string(f[1]), account: string(f[2]), terms: f[3], summary: string(f[4]),
		expires: time.Unix(int64(binary.BigEndian.Uint64(plain)), 0).UTC()}
	return k.operation(base, c), c, nil
}

// sealedPart splits a ref into "<operation_id>.<revision>" and what
// follows it ("" for a stored operation's ref).
func sealedPart(ref string) (named, sealed string) {
	id, rest, _ := strings.Cut(ref, ".")
	rev, sealed, _ := strings.Cut(rest, ".")
	return id + "." + rev, sealed
}

// isComputedRef reports whether ref has the form of a computed one.
func isComputedRef(ref string) bool {
	_, sealed := sealedPart(ref)
	return sealed != "" && store.ValidRef(ref)
}

// computable reports whether Take may compute the operation for action
// rather than store it, and returns what it would be.
func (s *Store) computable(owner store.Owner, digest string, action store.Action, now time.Time) (computed, bool) {
	expires := action.ExpiresAt
	if expires.IsZero() {
		expires = now.Add(action.Lifetime)
	}
	expires = time.Unix(expires.Unix(), 0).UTC()
	c := computed{epoch: s.epochOf(now), action: digest, account: owner.Account,
		expires: expires, terms: action.Terms, summary: action.Summary}
	if !s.compute || expires.Sub(now) > s.retention || sealedSize(c) > store.MaxRefLength {
		return c, false
	}
	return c, true
}

// mayCompute lets the step that issues for action (its keys and args
// from issueArgs, for the owner whose keys start with base) answer "compute" rather than store a new operation, when the
// operation can be computed: it returns the sealer and what to compute.
// k is nil when the step is to store it.
func (s *Store) mayCompute(ctx context.Context, base string, owner store.Owner, action store.Action, now time.Time, keys []string, args []any) (c computed, k *sealer, err error) {
	c, ok := s.computable(owner, strings.TrimPrefix(keys[0], base+"act:"), action, now)
	if !ok {
		return c, nil, nil
	}
	if k, err = s.sealer(ctx); err != nil {
		s.failed(err)
		return c, nil, err
	}
	// The seed ends with "." and the operation_id to compute (lib.lua issue).
	c.id = k.operationID(base, c)
	args[7] = args[7].(string) + "." + c.id
	return c, k, nil
}

// lookupComputed is Lookup for a computed ref: the stored operation when
// its first approval stored it, else the operation the ref seals, while
// it has not expired and its action has no other live operation.
func (s *Store) lookupComputed(ctx context.Context, owner store.Owner, ref string, now time.Time) (store.Record, bool, error) {
	k, err := s.sealer(ctx)
	if err != nil {
		return store.Record{}, false, err
	}
	base := s.base(owner.Agent, owner.User)
	op, c, err := k.open(base, ref)
	if err != nil {
		return store.Record{}, false, nil // W74
	}
	var h *redis.MapStringStringCmd
	var act *redis.StringCmd
	if _, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HGetAll(ctx, base+"op:"+op.ID)
		act = p.Get(ctx, base+"act:"+c.action)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return store.Record{}, false, err
	}
	if rec, ok := record(h.Val(), op.ID, now); ok {
		rec.Owner.Agent, rec.Owner.User = owner.Agent, owner.User
		return rec, true, nil
	}
	if now.After(op.ExpiresAt) {
		return store.Record{}, false, nil
	}
	if other, _, _ := strings.Cut(act.Val(), " "); other != "" && other != op.ID {
		k, err := s.client.HGet(ctx, base+"op:"+other, "k").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return store.Record{}, false, err
		}
		if until, ok := parseTime(k); ok && !now.After(until) {
			// The action has another live operation: this one was
			// never stored, and never will be (record.lua).
			return store.Record{}, false, nil
		}
	}
	return store.Record{Owner: store.Owner{Agent: owner.Agent, User: owner.User, Account: c.account}, Current: op, Status: store.Waiting}, true, nil
}

// recordComputed runs record.lua for a computed ref: keys and args as
// Record made them, then what storing the operation needs. The agent's
// count is kept in the same step on a single Redis; on a Cluster it is
// counted first, in a step of its own, so that an approval over the cap
// records nothing (counting an operation already counted changes nothing).
func (s *Store) recordComputed(ctx context.Context, owner store.Owner, c computed, opID string, keys []string, args []any, now time.Time) ([]string, error) {
	args = append(args, "c", c.account, c.terms, c.summary, ns(c.expires), owner.Agent, owner.User, s.maxOpenOwner, ttlMs(c.expires, now))
	if s.maxOpenAgent > 0 && !s.agentInStep.Load() {
		// On a Cluster: count first, then record.
		n, err := s.run(ctx, s.client, agentStep, []string{s.agentKey(owner.Agent)},
			agentMember(owner, opID), ns(c.expires), ns(now), s.maxOpenAgent).Int()
		if err != nil {
			return nil, fmt.Errorf("agent's open operations: %w", err)
		}
		if n != 1 {
			return []string{"limited"}, nil
		}
	}
	v, _, err := withAgentCount(s, owner, keys, args, func(keys []string, args []any) ([]string, error) {
		return s.run(ctx, s.client, recordStep, keys, args...).StringSlice()
	}, s.maxOpenAgent)
	return v, err
}
