// Package failpolicy is the failure policy that the
// worker and the dispatcher share:
//
//   - every failure is classified (Failure: a bounded code, a class, the
//     dependency that failed) in one place per dependency;
//   - a circuit breaker around each dependency opens after
//     BreakerFailuresDefault (5) consecutive infrastructure failures, stays
//     open BreakerTimeoutDefault (30s) and lets one probe through when
//     half-open (NewBreaker);
//   - the error-streak rule (Streak): the same error code
//     StreakLimitDefault (50) times in a row halts automatic retries of its
//     class and raises an alarm until it clears. With a SharedStreak
//     (package stream keeps one in Redis) the run and the halts are the
//     whole component's: every process of the consumer group counts into
//     one run and sees the same halts.
//
// The numbers are defaults; each component's Config can change them.
package failpolicy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/store"
)

// Defaults of the policy (the circuit breaker, the rule for a
// repeated error code).
const (
	// BreakerFailuresDefault is how many consecutive infrastructure
	// failures open a circuit.
	BreakerFailuresDefault = 5
	// BreakerTimeoutDefault is how long a circuit stays open before it
	// lets one probe through (half-open).
	BreakerTimeoutDefault = 30 * time.Second
	// StreakLimitDefault is how many times in a row one error code may
	// repeat before automatic retries of its class halt.
	StreakLimitDefault = 50
)

// Classes of failure, as the streak rule and the metrics name them.
const (
	// ClassInfrastructure: a dependency is down, restarting, overloaded or
	// timing out. Not a record's fault: consumption pauses, nothing is
	// charged to a record, nothing is dead-lettered.
	ClassInfrastructure = "infrastructure"
	// ClassRecord: the record itself fails (the NON_RETRYABLE and
	// POISON): charged to the record's delivery budget.
	ClassRecord = "record"
	// ClassUnknown: an error no rule recognises. Bounded: charged to the
	// records where a record can be blamed, and always counted by the
	// streak rule, so it can never stall a consumer silently.
	ClassUnknown = "unknown"
)

// Classes lists every class, for metrics that show each one.
var Classes = []string{ClassInfrastructure, ClassRecord, ClassUnknown}

// Sources of a failure: the dependency (or step) that failed.
const (
	SourceRedis    = "redis"
	SourceStore    = "store"
	SourcePostgres = "postgres"
)

// CodeBreakerOpen is the code of a call an open circuit refused. It is not
// a new observation of the dependency, so Streak.Fail ignores it.
const CodeBreakerOpen = "breaker_open"

// Failure is one failed attempt as the policy sees it.
type Failure struct {
	// Code names the error, from a bounded set (it is a metric label):
	// "postgres_57P01", "redis_unavailable", "original_missing", …
	Code string
	// Class is ClassInfrastructure, ClassRecord or ClassUnknown.
	Class string
	// Source is the dependency that failed: SourceRedis, SourceStore,
	// SourcePostgres, or "" for a record's own failure found before any
	// dependency answered (an unreadable message).
	Source string
	// Hold marks a dependency that answers but refuses writes for lack of
	// room (Redis over its maxmemory): the caller holds and retries at its
	// usual pace, and the streak rule never counts it (room comes back by
	// itself as entries are trimmed; halting would only slow that down).
	Hold bool
}

// Infrastructure returns the Failure of source being unavailable.
func Infrastructure(source string) Failure {
	return Failure{Code: source + "_unavailable", Class: ClassInfrastructure, Source: source}
}

// CodeRedisOOM is the code of Redis refusing a write over its maxmemory.
const CodeRedisOOM = SourceRedis + "_oom"

// Full returns the Failure of Redis refusing writes for lack of memory: an
// infrastructure failure that holds (Failure.Hold), never a record's.
func Full() Failure {
	return Failure{Code: CodeRedisOOM, Class: ClassInfrastructure, Source: SourceRedis, Hold: true}
}

// Unknown returns the Failure of an unrecognised error from source.
func Unknown(source string) Failure {
	return Failure{Code: source + "_unknown", Class: ClassUnknown, Source: source}
}

// BreakerOpen reports an error of a circuit that refused the call (open,
// or half-open with its one probe already out).
func BreakerOpen(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// Unavailable reports an error that says a dependency cannot serve now
// whatever the request: a network error, a timeout, a closed connection or
// client, a store outage (store.ErrUnavailable), a refusing circuit.
func Unavailable(err error) bool {
	var ne net.Error
	switch {
	case err == nil:
		return false
	case store.IsUnavailable(err), BreakerOpen(err), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	return false
}

// StoreFailure classifies an error of the store: an outage
// (store.ErrUnavailable) or unknown.
func StoreFailure(err error) Failure {
	switch {
	case BreakerOpen(err):
		return Failure{Code: CodeBreakerOpen, Class: ClassInfrastructure, Source: SourceStore}
	case Unavailable(err):
		return Infrastructure(SourceStore)
	}
	return Unknown(SourceStore)
}

// BreakerConfig is a circuit's numbers.
type BreakerConfig struct {
	// Name names the circuit in logs ("postgres", "store", "redis").
	Name string
	// Failures is how many consecutive failures open it.
	Failures int
	// Timeout is how long it stays open before one probe.
	Timeout time.Duration
	// IsFailure tells which errors count as failures; the others count as
	// successes (the dependency answered). A cancelled context counts as
	// neither.
	IsFailure func(error) bool
	// State is set to the circuit's state on every change: 0 closed, 1
	// half-open, 2 open (gobreaker.State's values).
	State prometheus.Gauge
}

// NewBreaker returns a circuit breaker with cfg's numbers: it opens after
// cfg.Failures consecutive failures, stays open cfg.Timeout, then lets one
// probe through (half-open); the probe's success closes it, its failure
// opens it again. Changes are logged (open at warn level) and exported in
// cfg.State. A refused call fails with gobreaker.ErrOpenState or
// gobreaker.ErrTooManyRequests (BreakerOpen).
func NewBreaker(cfg BreakerConfig, logger *zap.Logger) *gobreaker.CircuitBreaker[struct{}] {
	cfg.State.Set(float64(gobreaker.StateClosed))
	failures := uint32(max(cfg.Failures, 1))
	return gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         cfg.Name,
		MaxRequests:  1,
		Timeout:      cfg.Timeout,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsSuccessful: func(err error) bool { return err == nil || !cfg.IsFailure(err) },
		IsExcluded:   func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			cfg.State.Set(float64(to))
			fields := []zap.Field{zap.String("breaker", name), zap.Stringer("from", from), zap.Stringer("to", to)}
			if to == gobreaker.StateOpen {
				logger.Warn("circuit opened; pausing calls", append(fields, zap.Duration("open_for", cfg.Timeout))...)
				return
			}
			logger.Info("circuit changed state", fields...)
		},
	})
}

// StreakMetrics are the series of the streak rule, shared by the
// components of one stream on one registry.
type StreakMetrics struct {
	streak *prometheus.GaugeVec
	halted *prometheus.GaugeVec

	mu sync.Mutex
	// halts counts, per component and class, the Streaks that hold a
	// halt: the series is 1 while any does (the partitions of a
	// dispatcher each have a Streak, and one's clear is not another's).
	halts map[[2]string]int
}

// halt counts one more (delta 1) or one fewer (-1) Streak of component
// that holds a halt of class, and sets the series.
func (m *StreakMetrics) halt(component, class string, delta int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{component, class}
	m.halts[k] = max(m.halts[k]+delta, 0)
	v := 0.0
	if m.halts[k] > 0 {
		v = 1
	}
	m.halted.WithLabelValues(component, class).Set(v)
}

// RetriesHaltedMetric is the gauge of halted retries (labels stream,
// component, class): 1 while a class's automatic retries are halted. Other
// packages read it from a registry by this name (package status).
const RetriesHaltedMetric = ometrics.Namespace + "_" + retriesHaltedName

// retriesHaltedName is RetriesHaltedMetric within the namespace.
const retriesHaltedName = "retries_halted"

// NewStreakMetrics registers outboxd_error_streak{stream,component,code}
// and outboxd_retries_halted{stream,component,class} on reg (nil: kept, not
// exported).
func NewStreakMetrics(reg prometheus.Registerer, stream string) (*StreakMetrics, error) {
	f := ometrics.NewFactory(reg, "", stream)
	m := &StreakMetrics{
		halts: map[[2]string]int{},
		streak: f.GaugeVec("error_streak",
			"Current run of one identical error code in a component (reset by a success of what failed); at the streak limit (50) automatic retries of its class halt.",
			"component", "code"),
		halted: f.GaugeVec(retriesHaltedName,
			"1 while a component's automatic retries of a class are halted because one error code repeated streak-limit times in a row, else 0.",
			"component", "class"),
	}
	return m, f.Err()
}

// Timing of a shared Streak.
const (
	// SharedTimeout bounds each call of a Streak to its SharedStreak.
	SharedTimeout = time.Second
	// RefreshEvery is how often Streak.Refresh reads the shared state: how
	// soon a process sees a halt, a resume or a success of another.
	RefreshEvery = time.Second
)

// SharedState is the state of a streak rule that every process of a
// component shares.
type SharedState struct {
	// Run is the failure of the current run (a zero Failure: none), N how
	// many times in a row it came, in every process together.
	Run Failure
	N   int
	// Halts are the halted classes and the failure that halted each.
	Halts map[string]Failure
	// Resumes counts the operator's resumes so far: a change tells every
	// process that an operator cleared halts (Streak's onResume).
	Resumes int64
}

// SharedStreak keeps a Streak's state where every process of a component
// sees it (stream.Streak: a hash in Redis, one per consumer group). Each
// call changes the state in one step and returns the state after it.
type SharedStreak interface {
	// Fail counts f into the run (a new run when its code differs) and
	// halts f's class when the run reaches limit.
	Fail(ctx context.Context, f Failure, limit int) (SharedState, error)
	// Succeed ends a run of infrastructure or unknown failures of source
	// and clears their halts; source "" says a record went through (it
	// ends a run of record failures and clears their halt).
	Succeed(ctx context.Context, source string) (SharedState, error)
	// Resume is the operator's action: it clears the halt of class (every
	// halt for ""), ends the run of that class and counts a resume; it
	// returns the halts it cleared.
	Resume(ctx context.Context, class string) ([]Failure, SharedState, error)
	// Load reads the state.
	Load(ctx context.Context) (SharedState, error)
}

// Streak is the error-streak rule of one component ("the same
// error code 50 times in a row stops automatic retries and raises the
// alarm").
//
// It counts the current run of one identical error code (Fail); a success
// of what failed ends the run (Succeed, SucceedRecord). When a run reaches
// the limit, automatic retries of the run's class halt: Halted reports it,
// outboxd_retries_halted{component,class} is 1 and an error is logged.
// What "halted" means is the component's to define and document (the
// worker and the dispatcher do); it never means dead-lettering. A halt
// clears on a success of its class (a success of the halting source for
// infrastructure and unknown failures, a record projected for record
// failures), or on an operator action (Resume), and that is logged at info
// level.
//
// Shared (Share), the run and the halts are the whole component's: every
// failure and every success that ends a run or clears a halt goes to the
// SharedStreak, and the answer becomes this process's view; Refresh reads
// what the other processes did. Failures of Redis itself (SourceRedis) are
// counted in the process only, and so is everything while the SharedStreak
// cannot be reached: the rule still holds in each process.
//
// A Streak is safe for concurrent use.
type Streak struct {
	component string
	limit     int
	metrics   *StreakMetrics
	logger    *zap.Logger

	mu    sync.Mutex
	cur   Failure
	n     int
	halts map[string]Failure // class -> the failure that halted it

	shared   SharedStreak
	onResume func()
	// resumes is the shared resume count last seen (known once read).
	resumes      int64
	resumesKnown bool
	// tried is when the shared state was last read or written (Unix
	// nanoseconds).
	tried atomic.Int64
	// epoch counts the resumes this process applied or saw: an answer of
	// the SharedStreak to a call begun in an earlier epoch may predate the
	// resume (a failure counted before it, read back after it) and is not
	// adopted, or it would halt again what the operator just cleared. The
	// next call or Refresh brings the state it missed.
	epoch atomic.Int64
}

// NewStreak returns the rule for component ("worker", "dispatcher") with
// limit (at least 1). m may be shared by several Streaks.
func NewStreak(component string, limit int, m *StreakMetrics, logger *zap.Logger) *Streak {
	s := &Streak{component: component, limit: max(limit, 1), metrics: m, logger: logger, halts: map[string]Failure{}}
	for _, c := range Classes {
		m.halted.WithLabelValues(component, c).Add(0) // the series exists before any halt
	}
	return s
}

// Share makes the rule the whole component's, kept in shared (see the
// type). onResume, when set, is called when an operator's resume is seen,
// whichever process ran it. Call it before the Streak is used.
func (s *Streak) Share(shared SharedStreak, onResume func()) {
	s.shared, s.onResume = shared, onResume
}

// Fail records one failure. A refused call of an open circuit
// (CodeBreakerOpen) is not an observation and is ignored, nor is a hold
// (Failure.Hold: a full Redis).
func (s *Streak) Fail(f Failure) {
	if f.Code == CodeBreakerOpen || f.Code == "" || f.Hold {
		return
	}
	if s.shared != nil && f.Source != SourceRedis {
		epoch := s.epoch.Load()
		st, err := call(func(ctx context.Context) (SharedState, error) { return s.shared.Fail(ctx, f, s.limit) })
		if s.tried.Store(time.Now().UnixNano()); err == nil {
			s.adopt(st, epoch)
			return
		}
		// Not reachable: count in this process, on from the last run seen.
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Code != s.cur.Code {
		s.endRun()
		s.cur = f
	}
	s.n++
	s.metrics.streak.WithLabelValues(s.component, f.Code).Set(float64(s.n))
	if s.n >= s.limit {
		s.halt(f.Class, f)
	}
}

// call runs op with a context bounded by SharedTimeout.
func call[T any](op func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), SharedTimeout)
	defer cancel()
	return op(ctx)
}

// halt halts class because of f, unless it is halted already.
func (s *Streak) halt(class string, f Failure) {
	if _, halted := s.halts[class]; halted {
		return
	}
	s.halts[class] = f
	s.metrics.halt(s.component, class, 1)
	s.logger.Error("error code repeated; automatic retries of its class halted until it clears",
		zap.String("component", s.component), zap.String("class", class), zap.String("code", f.Code),
		zap.Int("streak", s.n), zap.String("source", f.Source), zap.Bool("shared", s.shared != nil))
}

// Succeed records that source answered: it ends a run of infrastructure or
// unknown failures of source and clears their halts.
func (s *Streak) Succeed(source string) {
	s.mu.Lock()
	shared := false
	if s.n > 0 && s.cur.Class != ClassRecord && s.cur.Source == source {
		s.endRun()
		shared = true
	}
	for _, class := range []string{ClassInfrastructure, ClassUnknown} {
		if f, ok := s.halts[class]; ok && f.Source == source {
			s.clear(class, "a success of "+source)
			shared = true
		}
	}
	s.mu.Unlock()
	if shared && source != SourceRedis {
		s.share(func(ctx context.Context) (SharedState, error) { return s.shared.Succeed(ctx, source) })
	}
}

// SucceedRecord records that a record went through: it ends a run of
// record failures and clears their halt.
func (s *Streak) SucceedRecord() {
	s.mu.Lock()
	shared := false
	if s.n > 0 && s.cur.Class == ClassRecord {
		s.endRun()
		shared = true
	}
	if _, ok := s.halts[ClassRecord]; ok {
		s.clear(ClassRecord, "a record went through")
		shared = true
	}
	s.mu.Unlock()
	if shared {
		s.share(func(ctx context.Context) (SharedState, error) { return s.shared.Succeed(ctx, "") })
	}
}

// share runs op on the SharedStreak, when there is one, and adopts its
// answer.
func (s *Streak) share(op func(ctx context.Context) (SharedState, error)) {
	if s.shared == nil {
		return
	}
	epoch := s.epoch.Load()
	st, err := call(op)
	if s.tried.Store(time.Now().UnixNano()); err == nil {
		s.adopt(st, epoch)
	}
}

// Refresh reads the shared state, when the last read or write is older
// than RefreshEvery, and adopts it: a halt another process reached, a
// resume, a run another process ended. The component calls it from its
// loop. Without a SharedStreak it does nothing.
func (s *Streak) Refresh(ctx context.Context) {
	if s.shared == nil || time.Since(time.Unix(0, s.tried.Load())) < RefreshEvery {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, SharedTimeout)
	defer cancel()
	epoch := s.epoch.Load()
	st, err := s.shared.Load(ctx)
	if s.tried.Store(time.Now().UnixNano()); err == nil {
		s.adopt(st, epoch)
	}
}

// adopt makes st this process's view: the run, the halts (a halt of a
// Redis failure, which only this process can see, stays) and the resumes.
// st answers a call begun in epoch; from an earlier epoch it is stale and
// ignored (see Streak.epoch).
func (s *Streak) adopt(st SharedState, epoch int64) {
	s.mu.Lock()
	if epoch != s.epoch.Load() {
		s.mu.Unlock()
		return
	}
	resumed := s.resumesKnown && st.Resumes != s.resumes
	if resumed {
		s.epoch.Add(1)
	}
	s.resumes, s.resumesKnown = st.Resumes, true
	// A run of Redis failures is this process's alone: the shared state,
	// which cannot hold it, does not end it.
	ownRedisRun := s.cur.Source == SourceRedis && s.n > 0 && st.Run.Code == ""
	if !ownRedisRun {
		if st.Run.Code != s.cur.Code {
			s.endRun()
			s.cur = st.Run
		}
		if s.n = st.N; s.cur.Code != "" && s.n > 0 {
			s.metrics.streak.WithLabelValues(s.component, s.cur.Code).Set(float64(s.n))
		}
	}
	for _, class := range Classes {
		f, shared := st.Halts[class]
		mine, local := s.halts[class]
		switch {
		case shared && !local:
			s.halt(class, f)
		case !shared && local && mine.Source != SourceRedis:
			why := "a success in another process"
			if resumed {
				why = "an operator action"
			}
			s.clear(class, why)
		}
	}
	s.mu.Unlock()
	if resumed && s.onResume != nil {
		s.onResume()
	}
}

// Halted reports whether automatic retries of class are halted.
func (s *Streak) Halted(class string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.halts[class]
	return ok
}

// HaltedBy returns the failure that halted automatic retries of class,
// if they are halted.
func (s *Streak) HaltedBy(class string) (Failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.halts[class]
	return f, ok
}

// AnyHalted reports whether automatic retries of any class are halted.
func (s *Streak) AnyHalted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.halts) > 0
}

// Resume is the operator's action: it ends the run and clears every halt,
// for the whole component when the rule is shared.
func (s *Streak) Resume() {
	s.mu.Lock()
	s.epoch.Add(1)
	s.endRun()
	for class := range s.halts {
		s.clear(class, "an operator action")
	}
	s.mu.Unlock()
	s.share(func(ctx context.Context) (SharedState, error) {
		_, st, err := s.shared.Resume(ctx, "")
		return st, err
	})
}

// Forget drops this process's view of the rule, its run and its halts
// (their series go to 0), and leaves the shared state as it is. A
// component calls it when it stops doing the work the rule watches (a
// dispatcher that no longer leads): what it saw is stale from then on, the
// process that does the work exports the rule, and this one starts again
// from the shared state (the next Refresh reads it at once) and what it
// sees itself.
func (s *Streak) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endRun()
	for class, f := range s.halts {
		delete(s.halts, class)
		s.metrics.halt(s.component, class, -1)
		s.logger.Info("retries no longer halted in this process: it stopped doing the work (another process exports the rule now)",
			zap.String("component", s.component), zap.String("class", class), zap.String("code", f.Code))
	}
	s.tried.Store(0)
}

// Run returns the current code and how many times in a row it came.
func (s *Streak) Run() (code string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.Code, s.n
}

func (s *Streak) endRun() {
	if s.cur.Code != "" {
		s.metrics.streak.DeleteLabelValues(s.component, s.cur.Code)
	}
	s.cur, s.n = Failure{}, 0
}

func (s *Streak) clear(class, why string) {
	f := s.halts[class]
	delete(s.halts, class)
	s.metrics.halt(s.component, class, -1)
	s.logger.Info("automatic retries resumed", zap.String("component", s.component), zap.String("class", class),
		zap.String("code", f.Code), zap.String("cleared_by", why))
}

// HaltBackOff is a backoff.BackOff that waits Probe instead of Inner's next
// interval while Class (the class of the last failure; set it after each
// one) is halted by Streak: halted retries become one probe per Probe.
type HaltBackOff struct {
	Inner  backoff.BackOff
	Streak *Streak
	Probe  time.Duration
	Class  string
}

// NextBackOff implements backoff.BackOff.
func (h *HaltBackOff) NextBackOff() time.Duration {
	d := h.Inner.NextBackOff()
	if h.Class != "" && h.Streak.Halted(h.Class) {
		return h.Probe
	}
	return d
}

// Reset implements backoff.BackOff.
func (h *HaltBackOff) Reset() { h.Inner.Reset() }
