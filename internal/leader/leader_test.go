package leader_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/leader"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// stuckLeases grants the lease, then answers renewals with renew (a
// replica set that lost its majority never acknowledges: the renewal hangs
// until its context ends).
type stuckLeases struct {
	renew func(ctx context.Context) error
}

func (s *stuckLeases) AcquireLease(_ context.Context, name, owner string, now time.Time, ttl time.Duration) (store.Lease, error) {
	return store.Lease{Name: name, Owner: owner, Term: 1, Expires: now.Add(ttl)}, nil
}

func (s *stuckLeases) RenewLease(ctx context.Context, l store.Lease, _ time.Time, _ time.Duration) (store.Lease, error) {
	return l, s.renew(ctx)
}

func (s *stuckLeases) ReleaseLease(context.Context, store.Lease) (bool, error) { return true, nil }

// leadUntilLost runs an elector over leases until its first leadership
// ends and returns why it ended.
func leadUntilLost(t *testing.T, leases leader.Leases, ttl time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	lost := make(chan error, 1)
	e := leader.New(leases, leader.Config{Name: "l", Owner: "me", TTL: ttl}, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx, context.Background(), func(ctx context.Context, _ store.Lease) error {
			<-ctx.Done()
			once.Do(func() { lost <- context.Cause(ctx) })
			return ctx.Err()
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case err := <-lost:
		return err
	case <-time.After(20 * ttl):
		t.Fatal("the leadership never ended")
		return nil
	}
}

// TestStuckRenewalEndsLeadershipBeforeExpiry: each renewal is bounded by the
// time the lease has left, so a renewal stuck behind an unreachable majority
// cannot keep a leader leading past its lease (while a standby takes over).
func TestStuckRenewalEndsLeadershipBeforeExpiry(t *testing.T) {
	t.Parallel()
	leases := &stuckLeases{renew: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}
	err := leadUntilLost(t, leases, 300*time.Millisecond)
	require.ErrorIs(t, err, leader.ErrLost)
	require.ErrorContains(t, err, "expired")
}

// TestFencedRenewalEndsLeadership: a renewal refused because another owner
// holds a newer term ends the leadership at once.
func TestFencedRenewalEndsLeadership(t *testing.T) {
	t.Parallel()
	leases := &stuckLeases{renew: func(context.Context) error { return store.ErrFenced }}
	err := leadUntilLost(t, leases, 300*time.Millisecond)
	require.ErrorIs(t, err, leader.ErrLost)
	require.True(t, errors.Is(err, store.ErrFenced))
}
