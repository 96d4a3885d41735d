package startstop_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// service finishes its "work in flight" (a batch it waits on) before it
// stops, unless abandoned.
type service struct {
	startstop.Base
	inFlight  chan struct{} // closed by the test to let the batch finish
	finished  bool
	abandoned bool
	mu        sync.Mutex
}

func newService() *service {
	s := &service{inFlight: make(chan struct{})}
	s.Init(nil, func(fetchCtx, workCtx context.Context) error {
		<-fetchCtx.Done()
		select {
		case <-s.inFlight:
			s.mu.Lock()
			s.finished = true
			s.mu.Unlock()
		case <-workCtx.Done():
			s.mu.Lock()
			s.abandoned = true
			s.mu.Unlock()
		}
		return nil
	})
	return s
}

func TestBase(t *testing.T) {
	t.Parallel()

	t.Run("StoppedBeforeStartAndStopIsSafe", func(t *testing.T) {
		t.Parallel()
		var b startstop.Base
		select {
		case <-b.Stopped():
		default:
			t.Fatal("Stopped must be closed before Start")
		}
		require.NoError(t, b.Stop(context.Background()))
	})

	t.Run("PreflightErrorStartsNothing", func(t *testing.T) {
		t.Parallel()
		var b startstop.Base
		boom := errors.New("redis down")
		b.Init(func(context.Context) error { return boom }, func(context.Context, context.Context) error {
			t.Error("run must not start")
			return nil
		})
		require.ErrorIs(t, b.Start(context.Background()), boom)
		<-b.Stopped()
	})

	t.Run("StopWaitsForWorkInFlight", func(t *testing.T) {
		t.Parallel()
		s := newService()
		require.NoError(t, s.Start(context.Background()))
		require.NoError(t, s.Start(context.Background()), "a second Start is a no-op")
		done := make(chan error)
		go func() { done <- s.Stop(context.Background()) }()
		select {
		case <-done:
			t.Fatal("Stop returned before the work in flight finished")
		case <-time.After(50 * time.Millisecond):
		}
		close(s.inFlight)
		require.NoError(t, <-done)
		require.True(t, s.finished)
	})

	t.Run("StopGivesUpAtItsDeadline", func(t *testing.T) {
		t.Parallel()
		s := newService()
		require.NoError(t, s.Start(context.Background()))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, s.Stop(ctx), context.DeadlineExceeded)
		require.True(t, s.abandoned)
		<-s.Stopped()
	})

	t.Run("CancellingStartContextStops", func(t *testing.T) {
		t.Parallel()
		s := newService()
		close(s.inFlight)
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, s.Start(ctx))
		cancel()
		select {
		case <-s.Stopped():
		case <-time.After(5 * time.Second):
			t.Fatal("the service did not stop")
		}
		require.True(t, s.finished, "work in flight finishes")
	})

	t.Run("RestartAfterStop", func(t *testing.T) {
		t.Parallel()
		s := newService()
		close(s.inFlight)
		for range 3 {
			require.NoError(t, s.Start(context.Background()))
			require.NoError(t, s.Stop(context.Background()))
		}
	})

	t.Run("StartStopStress", func(t *testing.T) {
		t.Parallel()
		s := newService()
		close(s.inFlight)
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					_ = s.Start(context.Background())
					_ = s.Stop(context.Background())
				}
			}()
		}
		wg.Wait()
		require.NoError(t, s.Stop(context.Background()))
		<-s.Stopped()
	})

	t.Run("ErrKeepsWhatEndedTheRun", func(t *testing.T) {
		t.Parallel()
		var b startstop.Base
		crash := errors.New("crash")
		b.Init(nil, func(context.Context, context.Context) error { return crash })
		require.NoError(t, b.Start(context.Background()))
		<-b.Stopped()
		require.ErrorIs(t, b.Err(), crash)
	})
}
