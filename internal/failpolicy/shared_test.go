package failpolicy_test

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/testkit"
)

// memShared is a failpolicy.SharedStreak in memory, with the semantics of
// stream.Streak (whose scripts are tested against Redis in package
// stream); down makes every call fail, as an unreachable Redis.
type memShared struct {
	mu    sync.Mutex
	st    failpolicy.SharedState
	down  atomic.Bool
	calls atomic.Int64
	// pause, when set, holds the answer of the next call (done, not yet
	// returned): reached is closed when it is held, release lets it go.
	pause atomic.Pointer[pausePoint]
}

type pausePoint struct{ reached, release chan struct{} }

var _ failpolicy.SharedStreak = (*memShared)(nil)

func newMemShared() *memShared {
	return &memShared{st: failpolicy.SharedState{Halts: map[string]failpolicy.Failure{}}}
}

var errDown = errors.New("redis: connection refused")

func (m *memShared) do(op func()) (failpolicy.SharedState, error) {
	m.calls.Add(1)
	if m.down.Load() {
		return failpolicy.SharedState{}, errDown
	}
	m.mu.Lock()
	op()
	st := m.st
	st.Halts = maps.Clone(m.st.Halts)
	m.mu.Unlock()
	if p := m.pause.Swap(nil); p != nil {
		close(p.reached)
		<-p.release
	}
	return st, nil
}

func (m *memShared) Fail(_ context.Context, f failpolicy.Failure, limit int) (failpolicy.SharedState, error) {
	return m.do(func() {
		if m.st.Run.Code != f.Code {
			m.st.Run, m.st.N = f, 0
		}
		if m.st.N++; m.st.N >= limit {
			if _, ok := m.st.Halts[f.Class]; !ok {
				m.st.Halts[f.Class] = f
			}
		}
	})
}

func (m *memShared) Succeed(_ context.Context, source string) (failpolicy.SharedState, error) {
	return m.do(func() {
		record := source == ""
		if m.st.N > 0 && (m.st.Run.Class == failpolicy.ClassRecord) == record && (record || m.st.Run.Source == source) {
			m.st.Run, m.st.N = failpolicy.Failure{}, 0
		}
		for class, f := range m.st.Halts {
			if (record && class == failpolicy.ClassRecord) || (!record && class != failpolicy.ClassRecord && f.Source == source) {
				delete(m.st.Halts, class)
			}
		}
	})
}

func (m *memShared) Resume(_ context.Context, class string) ([]failpolicy.Failure, failpolicy.SharedState, error) {
	var cleared []failpolicy.Failure
	st, err := m.do(func() {
		for c, f := range m.st.Halts {
			if class == "" || c == class {
				cleared = append(cleared, f)
				delete(m.st.Halts, c)
			}
		}
		if class == "" || m.st.Run.Class == class {
			m.st.Run, m.st.N = failpolicy.Failure{}, 0
		}
		m.st.Resumes++
	})
	return cleared, st, err
}

func (m *memShared) Load(context.Context) (failpolicy.SharedState, error) { return m.do(func() {}) }

// TestSharedStreak: with a SharedStreak the rule is the whole component's:
// processes count into one run, see each other's halts, successes and the
// operator's resumes; failures of Redis, and everything while the shared
// state cannot be reached, count in the process.
func TestSharedStreak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgDown := failpolicy.Infrastructure(failpolicy.SourcePostgres)
	redisDown := failpolicy.Infrastructure(failpolicy.SourceRedis)
	poison := failpolicy.Failure{Code: "projection_failed", Class: failpolicy.ClassRecord, Source: failpolicy.SourcePostgres}
	// process is one process's rule over shared; resumed counts the
	// resumes it saw.
	type process struct {
		s       *failpolicy.Streak
		reg     *prometheus.Registry
		resumed *atomic.Int64
	}
	newProcess := func(t *testing.T, shared *memShared) process {
		reg := prometheus.NewRegistry()
		m, err := failpolicy.NewStreakMetrics(reg, "s")
		require.NoError(t, err)
		p := process{s: failpolicy.NewStreak("worker", 3, m, zap.NewNop()), reg: reg, resumed: &atomic.Int64{}}
		p.s.Share(shared, func() { p.resumed.Add(1) })
		return p
	}
	// sees waits until p, refreshing, reports halted for class.
	sees := func(t *testing.T, p process, class string, halted bool) {
		t.Helper()
		require.Eventually(t, func() bool {
			p.s.Refresh(ctx)
			return p.s.Halted(class) == halted
		}, 5*failpolicy.RefreshEvery, 10*time.Millisecond)
	}

	t.Run("ForgetDropsOnlyThisProcesssView", func(t *testing.T) {
		t.Parallel()
		shared := newMemShared()
		a := newProcess(t, shared)
		for range 3 {
			a.s.Fail(pgDown) // shared: the group's run and halt
		}
		for range 3 {
			a.s.Fail(redisDown) // this process's own run
		}
		require.True(t, a.s.Halted(failpolicy.ClassInfrastructure))
		require.Equal(t, 3.0, testkit.Metric(t, a.reg, "outboxd_error_streak", "code", redisDown.Code))

		a.s.Forget() // the process stopped doing the work
		require.False(t, a.s.AnyHalted())
		require.Zero(t, testkit.Metric(t, a.reg, "outboxd_retries_halted", "class", failpolicy.ClassInfrastructure))
		require.Zero(t, testkit.Series(t, a.reg, "outboxd_error_streak"), "no run left")
		st, err := shared.Load(ctx)
		require.NoError(t, err)
		require.Contains(t, st.Halts, failpolicy.ClassInfrastructure, "the group's halt stays")

		a.s.Refresh(ctx) // at once: Forget made the next read due
		require.True(t, a.s.Halted(failpolicy.ClassInfrastructure), "the group's halt, read again")
		code, n := a.s.Run()
		require.Equal(t, pgDown.Code, code, "the group's run, read again; the run of Redis failures was this process's alone, and is gone")
		require.Equal(t, 3, n)
	})

	t.Run("ProcessesCountIntoOneRun", func(t *testing.T) {
		t.Parallel()
		shared := newMemShared()
		a, b := newProcess(t, shared), newProcess(t, shared)
		a.s.Fail(pgDown)
		b.s.Fail(pgDown)
		require.False(t, a.s.AnyHalted() || b.s.AnyHalted(), "two failures: neither process alone nor the group at the limit")
		a.s.Fail(pgDown)
		require.True(t, a.s.Halted(failpolicy.ClassInfrastructure), "the group's third in a row")
		_, n := a.s.Run()
		require.Equal(t, 3, n)
		require.Equal(t, 3.0, testkit.Metric(t, a.reg, "outboxd_error_streak", "code", pgDown.Code), "the group's run")
		sees(t, b, failpolicy.ClassInfrastructure, true)
		require.Equal(t, 1.0, testkit.Metric(t, b.reg, "outboxd_retries_halted", "class", failpolicy.ClassInfrastructure))

		b.s.Succeed(failpolicy.SourcePostgres) // PostgreSQL answers one process
		require.False(t, b.s.AnyHalted())
		sees(t, a, failpolicy.ClassInfrastructure, false)
		require.Zero(t, a.resumed.Load(), "a success is no operator's resume")
	})

	t.Run("AnOperatorsResumeReachesEveryProcess", func(t *testing.T) {
		t.Parallel()
		shared := newMemShared()
		a, b := newProcess(t, shared), newProcess(t, shared)
		for range 3 {
			a.s.Fail(poison)
		}
		sees(t, b, failpolicy.ClassRecord, true)
		cleared, _, err := shared.Resume(ctx, failpolicy.ClassRecord) // outboxd retries resume --class record
		require.NoError(t, err)
		require.Equal(t, []failpolicy.Failure{poison}, cleared)
		sees(t, a, failpolicy.ClassRecord, false)
		sees(t, b, failpolicy.ClassRecord, false)
		require.Equal(t, int64(1), a.resumed.Load(), "the held entries are due now")
		require.Equal(t, int64(1), b.resumed.Load())

		for range 3 {
			b.s.Fail(poison)
		}
		a.s.Resume() // Worker.ResumeRetries
		sees(t, b, failpolicy.ClassRecord, false)
	})

	// A failure counted before the operator's resume whose answer comes
	// back after it does not halt again what the resume cleared.
	t.Run("AnAnswerOlderThanAResumeIsNotAdopted", func(t *testing.T) {
		t.Parallel()
		shared := newMemShared()
		a := newProcess(t, shared)
		for range 3 {
			a.s.Fail(poison)
		}
		require.True(t, a.s.Halted(failpolicy.ClassRecord))
		p := &pausePoint{reached: make(chan struct{}), release: make(chan struct{})}
		shared.pause.Store(p)
		done := make(chan struct{})
		go func() {
			defer close(done)
			a.s.Fail(poison) // the fourth, counted while halted
		}()
		<-p.reached
		a.s.Resume()
		require.False(t, a.s.AnyHalted())
		close(p.release)
		<-done
		require.False(t, a.s.AnyHalted(), "the answer from before the resume is stale")
		require.Zero(t, testkit.Metric(t, a.reg, "outboxd_retries_halted", "class", failpolicy.ClassRecord))
		require.Equal(t, int64(1), a.resumed.Load(), "one resume, seen once")
		a.s.Fail(poison) // a new run: counted from the shared state again
		_, n := a.s.Run()
		require.Equal(t, 1, n)
	})

	t.Run("UnreachableCountsInTheProcess", func(t *testing.T) {
		t.Parallel()
		shared := newMemShared()
		a := newProcess(t, shared)
		a.s.Fail(pgDown)
		shared.down.Store(true)
		a.s.Fail(pgDown)
		a.s.Fail(pgDown)
		require.True(t, a.s.Halted(failpolicy.ClassInfrastructure), "on from the group's count it knew")
		shared.down.Store(false)
		a.s.Succeed(failpolicy.SourcePostgres)
		require.False(t, a.s.AnyHalted())
	})

	t.Run("RedisFailuresStayInTheProcess", func(t *testing.T) {
		t.Parallel()
		shared := newMemShared()
		a := newProcess(t, shared)
		before := shared.calls.Load()
		for range 3 {
			a.s.Fail(redisDown)
		}
		require.Equal(t, before, shared.calls.Load(), "not written where it happens")
		require.True(t, a.s.Halted(failpolicy.ClassInfrastructure))
		require.Eventually(t, func() bool {
			a.s.Refresh(ctx)
			return shared.calls.Load() > before
		}, 5*failpolicy.RefreshEvery, 10*time.Millisecond)
		require.True(t, a.s.Halted(failpolicy.ClassInfrastructure), "the group's state, without it, does not clear it")
		_, n := a.s.Run()
		require.Equal(t, 3, n)
		a.s.Succeed(failpolicy.SourceRedis)
		require.False(t, a.s.AnyHalted())
		require.Equal(t, before+1, shared.calls.Load(), "only the refresh")
	})
}
