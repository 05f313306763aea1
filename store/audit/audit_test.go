package audit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

var owner = store.Owner{Agent: "https://agent.example/client", User: "usr_1", Account: "acct_1"}

// perform makes one operation performed on st at now: approval recorded,
// claimed, performed. It returns the operation's id.
func perform(ctx context.Context, st store.Store, key string, now time.Time) (string, error) {
	terms, _ := storekit.CanonicalTerms([]byte(`{"order_id":"` + key + `"}`))
	a := storedriver.TakeRequest{Key: key, Terms: terms, Summary: "Exchange " + key, Lifetime: 10 * time.Minute}
	is, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, now)
	if err != nil {
		return "", err
	}
	ap := store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: store.ApproverUser, Reference: "apr_" + key}
	if rep, err := storedriver.Steps(st).Record(ctx, owner, is.Ref, ap, now, storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
		return "", fmt.Errorf("record: %v %v", rep.Result, err)
	}
	a.ClaimToken = storekit.NewToken()
	res, err := storedriver.Steps(st).Take(ctx, owner, a, now)
	if err != nil || res.Claim == nil {
		return "", fmt.Errorf("take: %+v %v", res, err)
	}
	return is.Operation.ID, storedriver.Steps(st).Finish(ctx, *res.Claim, store.OutcomePerformed, now)
}

// sink is a hook that keeps what it was given, failing its first fails
// calls.
type sink struct {
	mu    sync.Mutex
	fails int
	calls int
	got   []store.Entry
}

func (s *sink) hook(ctx context.Context, e store.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fails > 0 {
		s.fails--
		return errors.New("the sink is down")
	}
	s.got = append(s.got, e)
	return nil
}

func (s *sink) whats() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w []string
	for _, e := range s.got {
		w = append(w, e.What)
	}
	return w
}

func fast(t *testing.T, now func() time.Time) {
	oldEvery, oldBackoff, oldClock := every, maxBackoff, clock
	every, maxBackoff, clock = 5*time.Millisecond, 20*time.Millisecond, now
	t.Cleanup(func() { every, maxBackoff, clock = oldEvery, oldBackoff, oldClock })
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Deliver pushes every entry, the ones written before it started and
// after, retries a failing hook without skipping, and within one run never
// pushes an entry twice.
func TestDeliver(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	tick := func() time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(time.Second); return now }
	// Deliver reads up to a second after the store's clock.
	fast(t, func() time.Time { mu.Lock(); defer mu.Unlock(); return now.Add(time.Second) })
	st := memstore.New(memstore.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := perform(ctx, st, "before", tick()); err != nil {
		t.Fatal(err)
	}
	s := &sink{fails: 3}
	done := make(chan error, 1)
	go func() { done <- Deliver(ctx, st, time.Time{}, s.hook) }()
	waitFor(t, "the first operation's entries", func() bool { return len(s.whats()) == 3 })
	if _, err := perform(ctx, st, "after", tick()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second operation's entries", func() bool { return len(s.whats()) == 6 })
	time.Sleep(50 * time.Millisecond) // more reads, overlapping the last
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Deliver returned %v, want context.Canceled", err)
	}
	want := []string{"approval recorded", "claimed", "performed", "approval recorded", "claimed", "performed"}
	if got := s.whats(); !slices.Equal(got, want) {
		t.Errorf("pushed %q, want %q (each once, in order)", got, want)
	}
	if s.calls != 6+3 {
		t.Errorf("hook called %d times, want 9 (3 failures retried)", s.calls)
	}
}

// The web server is killed (SIGKILL) right after the steps, while the
// hook is pushing their entries: the entries are still readable from the
// store, and a Deliver elsewhere pushes each of them.
func TestKilledBetweenStepAndHook(t *testing.T) {
	if addr := os.Getenv("OPSGATE_AUDIT_CHILD"); addr != "" {
		child(addr)
		return
	}
	inst := redistest.Start(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledBetweenStepAndHook$")
	cmd.Env = append(os.Environ(), "OPSGATE_AUDIT_CHILD="+inst.Addr)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var opID string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "operation "); ok {
			opID = id
		}
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the web server ended with %v, want killed", err)
	}
	if opID == "" {
		t.Fatal("the web server named no operation")
	}
	st := redisstore.New(inst.Client(t), redisstore.Options{})
	var stored []string
	for e, err := range st.Entries(t.Context(), opID, time.Now().Add(-time.Hour), time.Now().Add(time.Minute)) {
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, e.What)
	}
	want := []string{"approval recorded", "claimed", "performed"}
	if !slices.Equal(stored, want) {
		t.Fatalf("after the kill the store holds %q, want %q", stored, want)
	}
	fast(t, time.Now)
	s := &sink{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Deliver(ctx, st, time.Now().Add(-time.Hour), s.hook) }()
	waitFor(t, "the entries pushed again", func() bool { return len(s.whats()) == 3 })
	cancel()
	<-done // before fast's cleanup puts the pace back
	if got := s.whats(); !slices.Equal(got, want) {
		t.Errorf("pushed %q, want %q", got, want)
	}
}

// child is the web server TestKilledBetweenStepAndHook kills: it performs
// an operation, and kills itself in the hook, before it returns.
func child(addr string) {
	ctx := context.Background()
	st := redisstore.New(redis(addr), redisstore.Options{Durability: redisstore.DurableNone})
	id, err := perform(ctx, st, "killed", time.Now())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	fmt.Printf("operation %s\n", id)
	os.Stdout.Sync()
	_ = Deliver(ctx, st, time.Now().Add(-time.Hour), func(context.Context, store.Entry) error {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	})
}
