package failpolicy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestClassification(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		got  failpolicy.Failure
		want failpolicy.Failure
	}{
		{"StoreUnavailable", failpolicy.StoreFailure(fmt.Errorf("x: %w", store.ErrUnavailable)), failpolicy.Infrastructure(failpolicy.SourceStore)},
		{"StoreOther", failpolicy.StoreFailure(errors.New("no such table: events")), failpolicy.Unknown(failpolicy.SourceStore)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.got)
		})
	}
}

func TestStreak(t *testing.T) {
	t.Parallel()
	newStreak := func(t *testing.T) (*failpolicy.Streak, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		m, err := failpolicy.NewStreakMetrics(reg, "s")
		require.NoError(t, err)
		return failpolicy.NewStreak("worker", 3, m, zap.NewNop()), reg
	}
	pgDown := failpolicy.Infrastructure(failpolicy.SourcePostgres)
	redisDown := failpolicy.Infrastructure(failpolicy.SourceRedis)
	poison := failpolicy.Failure{Code: "postgres_22P05", Class: failpolicy.ClassRecord, Source: failpolicy.SourcePostgres}
	halted := func(t *testing.T, reg *prometheus.Registry, class string) float64 {
		return testkit.Metric(t, reg, "outboxd_retries_halted", "component", "worker", "class", class)
	}

	t.Run("OneSeriesForStreaksOfOneComponent", func(t *testing.T) {
		t.Parallel()
		// The partitions of a dispatcher: a Streak each, one series.
		reg := prometheus.NewRegistry()
		m, err := failpolicy.NewStreakMetrics(reg, "s")
		require.NoError(t, err)
		a := failpolicy.NewStreak("worker", 1, m, zap.NewNop())
		b := failpolicy.NewStreak("worker", 1, m, zap.NewNop())
		a.Fail(redisDown)
		b.Fail(redisDown)
		require.Equal(t, 1.0, halted(t, reg, failpolicy.ClassInfrastructure))
		_ = failpolicy.NewStreak("worker", 1, m, zap.NewNop()) // a partition that starts later
		require.Equal(t, 1.0, halted(t, reg, failpolicy.ClassInfrastructure), "a new Streak clears no one's halt")
		b.Succeed(failpolicy.SourceRedis)
		require.False(t, b.AnyHalted())
		require.Equal(t, 1.0, halted(t, reg, failpolicy.ClassInfrastructure), "a is still halted")
		a.Forget()
		require.Zero(t, halted(t, reg, failpolicy.ClassInfrastructure))
		a.Forget() // nothing held: no count below zero
		a.Fail(redisDown)
		require.Equal(t, 1.0, halted(t, reg, failpolicy.ClassInfrastructure))
	})

	t.Run("TripsAtTheLimitInARow", func(t *testing.T) {
		t.Parallel()
		s, reg := newStreak(t)
		require.Zero(t, halted(t, reg, failpolicy.ClassInfrastructure), "the series exists before any failure")
		s.Fail(pgDown)
		s.Fail(pgDown)
		s.Fail(redisDown) // another code: a new run
		s.Fail(pgDown)
		s.Fail(pgDown)
		require.False(t, s.AnyHalted())
		require.Zero(t, testkit.Metric(t, reg, "outboxd_error_streak", "code", redisDown.Code), "an ended run leaves no series")
		require.Equal(t, 2.0, testkit.Metric(t, reg, "outboxd_error_streak", "component", "worker", "code", pgDown.Code))
		s.Fail(failpolicy.Failure{Code: failpolicy.CodeBreakerOpen, Class: failpolicy.ClassInfrastructure}) // not an observation
		s.Fail(pgDown)
		require.True(t, s.Halted(failpolicy.ClassInfrastructure))
		require.False(t, s.Halted(failpolicy.ClassRecord))
		require.Equal(t, 1.0, halted(t, reg, failpolicy.ClassInfrastructure))
		code, n := s.Run()
		require.Equal(t, pgDown.Code, code)
		require.Equal(t, 3, n)
	})

	t.Run("ClearsOnASuccessOfTheSource", func(t *testing.T) {
		t.Parallel()
		s, reg := newStreak(t)
		for range 3 {
			s.Fail(pgDown)
		}
		s.Succeed(failpolicy.SourceRedis) // Redis answering says nothing about PostgreSQL
		require.True(t, s.Halted(failpolicy.ClassInfrastructure))
		s.SucceedRecord()
		require.True(t, s.Halted(failpolicy.ClassInfrastructure))
		s.Succeed(failpolicy.SourcePostgres)
		require.False(t, s.AnyHalted())
		require.Zero(t, halted(t, reg, failpolicy.ClassInfrastructure))
		_, n := s.Run()
		require.Zero(t, n)
	})

	t.Run("RecordClassClearsOnARecordThrough", func(t *testing.T) {
		t.Parallel()
		s, reg := newStreak(t)
		for range 3 {
			s.Fail(poison)
		}
		require.True(t, s.Halted(failpolicy.ClassRecord))
		s.Succeed(failpolicy.SourcePostgres) // PostgreSQL answered, the records still fail
		require.True(t, s.Halted(failpolicy.ClassRecord))
		s.SucceedRecord()
		require.False(t, s.Halted(failpolicy.ClassRecord))
		require.Zero(t, halted(t, reg, failpolicy.ClassRecord))
	})

	t.Run("OperatorResumes", func(t *testing.T) {
		t.Parallel()
		s, reg := newStreak(t)
		for range 3 {
			s.Fail(poison)
		}
		for range 3 {
			s.Fail(redisDown)
		}
		require.True(t, s.Halted(failpolicy.ClassRecord))
		require.True(t, s.Halted(failpolicy.ClassInfrastructure))
		s.Resume()
		require.False(t, s.AnyHalted())
		require.Zero(t, halted(t, reg, failpolicy.ClassRecord)+halted(t, reg, failpolicy.ClassInfrastructure))
		require.Zero(t, testkit.Metric(t, reg, "outboxd_error_streak"))
	})
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	state := prometheus.NewGauge(prometheus.GaugeOpts{Name: "state"})
	reg.MustRegister(state)
	errDown := errors.New("down")
	errRecord := errors.New("a bad record")
	b := failpolicy.NewBreaker(failpolicy.BreakerConfig{
		Name: "postgres", Failures: 3, Timeout: 100 * time.Millisecond, State: state,
		IsFailure: func(err error) bool { return errors.Is(err, errDown) },
	}, zap.NewNop())
	call := func(err error) error {
		_, got := b.Execute(func() (struct{}, error) { return struct{}{}, err })
		return got
	}
	gauge := func() float64 { return testkit.Metric(t, reg, "state") }

	require.Equal(t, 0.0, gauge())
	call(errDown)
	call(errDown)
	call(errRecord) // the dependency answered: the run of failures ends
	call(context.Canceled)
	call(errDown)
	call(errDown)
	require.Equal(t, 0.0, gauge(), "closed after 2 failures in a row")
	call(errDown)
	require.Equal(t, 2.0, gauge(), "open after 3 in a row")
	require.ErrorIs(t, call(nil), gobreaker.ErrOpenState)
	require.True(t, failpolicy.BreakerOpen(call(nil)))

	// Half-open after the timeout: one probe at a time.
	require.Eventually(t, func() bool { return b.State() == gobreaker.StateHalfOpen }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, 1.0, gauge())
	probing := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := b.Execute(func() (struct{}, error) { close(probing); <-release; return struct{}{}, nil })
		done <- err
	}()
	<-probing
	require.ErrorIs(t, call(nil), gobreaker.ErrTooManyRequests, "one probe only")
	close(release)
	require.NoError(t, <-done)
	require.Equal(t, 0.0, gauge(), "the probe closed it")
}
