package storetest_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/storetest"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// brokenClaim breaks one rule of the port: its Claim stamps the original
// whatever its state, so two reconcilers would both publish it.
type brokenClaim struct {
	store.Store
}

func (b brokenClaim) Claim(ctx context.Context, ids []string, at, _ time.Time) (store.Claimed, error) {
	return b.Store.Claim(ctx, ids, at, at.Add(time.Hour)) // every earlier claim counts as void
}

// forgetfulRollback breaks RollbackClaims: it restores no stamp, whatever
// each original had before the claim.
type forgetfulRollback struct {
	store.Store
}

func (f forgetfulRollback) RollbackClaims(ctx context.Context, at time.Time, claimed []*outbox.Event) (int, error) {
	bare := make([]*outbox.Event, len(claimed))
	for i, ev := range claimed {
		c := *ev
		c.LastRequeuedAt = nil
		bare[i] = &c
	}
	return f.Store.RollbackClaims(ctx, at, bare)
}

// markOnly breaks MarkRelayed: it marks the batch but writes no
// checkpoint.
type markOnly struct {
	store.Store
}

func (m markOnly) MarkRelayed(ctx context.Context, lease store.Lease, ids []string, cp store.Checkpoint) error {
	return m.MarkDispatched(ctx, lease, ids, cp.At)
}

// recorder is a testing.TB that records a failure instead of failing the
// test, so a check can be run against a store that must fail it.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed bool
}

func (r *recorder) Errorf(string, ...any) { r.mu.Lock(); r.failed = true; r.mu.Unlock() }
func (r *recorder) Error(...any)          { r.Errorf("") }
func (r *recorder) Fail()                 { r.Errorf("") }
func (r *recorder) FailNow()              { r.Errorf(""); runtime.Goexit() }
func (r *recorder) Fatal(...any)          { r.FailNow() }
func (r *recorder) Fatalf(string, ...any) { r.FailNow() }
func (r *recorder) Failed() bool          { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }
func (r *recorder) Helper()               {}

// runCheck runs the named check against h and reports whether it failed.
func runCheck(t *testing.T, name string, h storetest.Harness) bool {
	t.Helper()
	for _, c := range storetest.Checks() {
		if c.Name != name {
			continue
		}
		rec := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Run(rec, h)
		}()
		<-done
		return rec.Failed()
	}
	t.Fatalf("no check %q", name)
	return false
}

// TestSuiteCanFail proves the suite catches a store that breaks a rule the
// components rely on: the conditional claim. The same checks pass on the
// real store.
func TestSuiteCanFail(t *testing.T) {
	t.Parallel()
	good := storetest.Harness{Open: func(t testing.TB, _ storetest.Options) store.Store { return testkit.NewSQLite(t) }}
	broken := storetest.Harness{Open: func(t testing.TB, _ storetest.Options) store.Store {
		return brokenClaim{testkit.NewSQLite(t)}
	}}
	for _, name := range []string{"ClaimIsConditional", "ClaimManyTakesTheCandidatesInOrder", "ConcurrentClaimsOneWinner"} {
		require.False(t, runCheck(t, name, good), "%s fails on the real store", name)
		require.True(t, runCheck(t, name, broken), "%s does not catch a claim that ignores its conditions", name)
	}
	forgetful := storetest.Harness{Open: func(t testing.TB, _ storetest.Options) store.Store {
		return forgetfulRollback{testkit.NewSQLite(t)}
	}}
	require.False(t, runCheck(t, "RollbackManyRestoresEachOwnStamp", good))
	require.True(t, runCheck(t, "RollbackManyRestoresEachOwnStamp", forgetful), "a rollback that forgets the stamps before the claim")
}

// TestSuiteCatchesARelayWithoutItsCheckpoint: MarkRelayed must write the
// checkpoint with the marks.
func TestSuiteCatchesARelayWithoutItsCheckpoint(t *testing.T) {
	t.Parallel()
	good := storetest.Harness{Open: func(t testing.TB, _ storetest.Options) store.Store { return testkit.NewSQLite(t) }}
	broken := storetest.Harness{Open: func(t testing.TB, _ storetest.Options) store.Store { return markOnly{testkit.NewSQLite(t)} }}
	const name = "MarkRelayedMarksAndCheckpointsTogether"
	require.False(t, runCheck(t, name, good), "%s fails on the real store", name)
	require.True(t, runCheck(t, name, broken), "%s does not catch a relay without its checkpoint", name)
}
