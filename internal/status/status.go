package status

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// StatusReadTimeout is the default Status.ReadTimeout.
const StatusReadTimeout = 2 * time.Second

// Status reads the state of one pipeline from the stores: the figures of
// GET /v1/status and of the gauges on /metrics.
type Status struct {
	Store store.Store
	// Redis may be nil (the stream and DLQ parts are then left out).
	Redis  *stream.Client
	Stream string
	Group  string
	// DispatcherLease and ReconcilerLease name the leases whose state the
	// status shows (dispatcher.LeaseName, reconciler.LeaseName); "" leaves
	// that part out.
	DispatcherLease, ReconcilerLease string
	// RoutedStreams are the streams that events of routed types go to
	// (--route), besides Stream: the snapshot shows the lag of each of
	// their consumer groups (Snapshot.RoutedStreams). Each has as many
	// partitions as Stream. Defaults to none.
	RoutedStreams []string
	// PartitionLeases name the dispatcher leases of the partitions of a
	// partitioned stream, in partition order (dispatcher.PartitionLeaseName
	// of each); the status then shows dispatcher.partitions in place of
	// DispatcherLease's state. nil for one partition.
	PartitionLeases []string
	// LastSweep returns the report of the last sweep of a reconciler that
	// runs in this process (nil: none ran here). Defaults to none.
	LastSweep func() *reconciler.Report
	// Audit reads the last recorded run of the read model's audit (nil
	// when none ran; operator.LastAudit). Defaults to none: the part is
	// left out.
	Audit func(ctx context.Context) (*operator.AuditReport, error)
	// Unchecked says why the read model cannot be checked (its projector
	// does not tell which originals it holds): the snapshot's readModel
	// says so, and there is no audit. Defaults to "": it can.
	Unchecked string
	// Pauses reads the stages an operator paused (operator.Pauses).
	// Defaults to none: the part is left out.
	Pauses func(ctx context.Context) (*operator.PausesResult, error)
	// Gatherer is this process's metrics registry: the breaker states and
	// the halted retries are read from it (a part whose metric is absent is
	// left out). Defaults to none.
	Gatherer prometheus.Gatherer
	// Now tells the time for ages. Defaults to time.Now.
	Now func() time.Time
	// ReadTimeout bounds the read of each part (the store's counts, the
	// leases, the stream and DLQ figures): a part not read by then is
	// reported unavailable, even when its client does not heed the
	// deadline. Defaults to StatusReadTimeout (2 seconds).
	ReadTimeout time.Duration

	// replayRate measures the replay lane's rate between readings.
	replayRate rateMeter
}

// Snapshot is the JSON of GET /v1/status. A part that could not be read
// within Status.ReadTimeout is null and named in Unavailable: a figure that
// could not be read is never shown as zero.
type Snapshot struct {
	Store  string       `json:"store"`
	Events *EventCounts `json:"events"`
	// OldestPendingAgeSeconds is the age of the oldest original that is
	// neither synced nor failed (the "oldest unsynced age"); 0 when none.
	OldestPendingAgeSeconds *float64      `json:"oldestPendingAgeSeconds"`
	Outbox                  *OutboxCounts `json:"outbox"`
	Stream                  *StreamCounts `json:"stream,omitempty"`
	// RoutedStreams are the consumer groups of each stream that events
	// of routed types go to (--route), by stream (one per partition),
	// read with Redis's memory (absent when it could not be read).
	RoutedStreams []RoutedStreamCounts `json:"routedStreams,omitempty"`
	// Replay is the replay lane: the operator's replays, read by the
	// workers only when the stream has nothing for them.
	Replay *ReplayCounts `json:"replay,omitempty"`
	DLQ    *DLQCounts    `json:"dlq,omitempty"`
	// Redis is Redis's memory and policy (absent when it could not be
	// read, or this role has no Redis).
	Redis *RedisCounts `json:"redis,omitempty"`
	// Backpressure is "redis full" while this process's dispatcher holds
	// the relay because Redis is full (dispatcher.BackpressureMetric;
	// absent when it does not, or none runs here).
	Backpressure string `json:"backpressure,omitempty"`
	// Stalled lists why the pipeline cannot make progress now (Redis
	// full, a breaker open, retries halted, the relay holding); `outboxd
	// status` exits 1 while it is not empty.
	Stalled []string `json:"stalled,omitempty"`
	// Dispatcher is the state of the dispatcher's lease (absent when it
	// never existed: no dispatcher ever ran on this store and stream).
	Dispatcher *DispatcherState `json:"dispatcher,omitempty"`
	// Reconciler is the state of the periodic reconciler's lease and its
	// last recorded sweep (absent when none ever ran).
	Reconciler *ReconcilerState `json:"reconciler,omitempty"`
	// Breakers are the circuit breakers of this process (absent when it
	// runs none, or they are not known).
	Breakers []Breaker `json:"breakers,omitempty"`
	// RetriesHalted lists the failure classes whose automatic retries are
	// halted (the same error code 50 times in a row): the halts of the
	// group's workers and of the stream's dispatchers, kept in Redis, and
	// those of this process's components.
	RetriesHalted []HaltedRetries `json:"retriesHalted,omitempty"`
	// Paused lists the stages an operator paused (outboxd pause): paused,
	// not stalled (absent when none is).
	Paused []store.PauseState `json:"paused,omitempty"`
	// Audit is the last run of the read model's audit, by any process
	// (absent when none ran, or this role has no PostgreSQL): what it
	// compared, the drift it found by kind, a few of the findings and the
	// commands that repair them.
	Audit *operator.AuditReport `json:"audit,omitempty"`
	// ReadModel is set when the read model cannot be checked: verify, the
	// audit and repair do not run on it, and Unchecked says why.
	ReadModel *ReadModelState `json:"readModel,omitempty"`
	// Unavailable names the parts that could not be read: "events",
	// "outbox", "stream", "replay", "dlq", "redis", "dispatcher",
	// "reconciler", "audit", "paused".
	Unavailable []string `json:"unavailable,omitempty"`
	// ReadAt is when the store's figures were read (they may come from a
	// short cache, see the store); absent when they could not be read.
	ReadAt time.Time `json:"readAt,omitzero"`
}

// EventCounts counts originals by state.
type EventCounts struct {
	Total   int64 `json:"total"`
	Synced  int64 `json:"synced"`
	Pending int64 `json:"pending"`
	Failed  int64 `json:"failed"`
	// FailedByCategory splits Failed by syncFailure category.
	FailedByCategory map[string]int64 `json:"failedByCategory"`
	// Estimated is true when Total (and so Synced) is an estimate.
	Estimated bool `json:"estimated"`
}

// OutboxCounts counts outbox entries.
type OutboxCounts struct {
	Undispatched int64 `json:"undispatched"`
}

// StreamCounts describes the stream and its consumer group.
type StreamCounts struct {
	Name   string `json:"name"`
	Length int64  `json:"length"`
	// Pending counts entries delivered to the group and not acknowledged
	// (the Redis pending entries list).
	Pending int64 `json:"pending"`
	// Groups are every consumer group of the stream, outboxd's and any
	// other (XINFO GROUPS): the trim keeps what the slowest still needs.
	Groups []GroupCounts `json:"groups,omitempty"`
}

// RoutedStreamCounts is where the consumer groups of a routed stream (of
// one of its partitions) stand.
type RoutedStreamCounts struct {
	Name   string        `json:"name"`
	Groups []GroupCounts `json:"groups,omitempty"`
}

// GroupCounts is where one consumer group of the stream stands.
type GroupCounts struct {
	Name string `json:"name"`
	// Pending counts its entries delivered and not acknowledged; Lag
	// those it has not read yet (absent when Redis cannot tell);
	// EntriesRead those it has read since it was created.
	Pending     int64  `json:"pending"`
	Lag         *int64 `json:"lag,omitempty"`
	EntriesRead int64  `json:"entriesRead"`
}

// RedisCounts is Redis's memory (INFO memory) and what it means for the
// pipeline.
type RedisCounts struct {
	UsedMemoryBytes int64 `json:"usedMemoryBytes"`
	// MaxMemoryBytes is maxmemory (0: no limit).
	MaxMemoryBytes  int64  `json:"maxMemoryBytes"`
	MaxMemoryPolicy string `json:"maxMemoryPolicy"`
	// EvictionMisconfigured is set when the policy lets Redis evict keys
	// (anything but noeviction): outboxd's stream, group or dead letters
	// could vanish (docs/operations.md, "Redis memory").
	EvictionMisconfigured bool `json:"evictionMisconfigured,omitempty"`
	// Full is set while used memory is at or above maxmemory: Redis
	// refuses writes.
	Full bool `json:"full,omitempty"`
}

// ReplayCounts describes the replay lane and the group's progress on it.
type ReplayCounts struct {
	Name   string `json:"name"`
	Length int64  `json:"length"`
	// Pending counts its entries delivered to the group and not
	// acknowledged; Lag those the group has not read yet (absent when
	// Redis cannot tell).
	Pending int64  `json:"pending"`
	Lag     *int64 `json:"lag,omitempty"`
	// Read counts the entries the group has read from the lane since it
	// was created; RatePerSecond is how many it read per second over the
	// last few seconds this status was read (absent at the first read).
	Read          int64    `json:"read"`
	RatePerSecond *float64 `json:"ratePerSecond,omitempty"`
}

// DLQCounts describes the dead-letter stream.
type DLQCounts struct {
	Name   string `json:"name"`
	Length int64  `json:"length"`
	// OldestAgeSeconds is the age of the oldest dead letter (absent when
	// the stream is empty).
	OldestAgeSeconds *float64 `json:"oldestAgeSeconds,omitempty"`
}

// DispatcherState is the dispatcher's lease as the store keeps it.
type DispatcherState struct {
	// Leader is the lease's owner; LeaderAlive is false once the lease
	// expired (no dispatcher relays: a standby should take over within the
	// lease TTL).
	Leader         string    `json:"leader"`
	LeaderAlive    bool      `json:"leaderAlive"`
	Term           int64     `json:"term"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt"`
	// CheckpointAt is the time of the last checkpoint (a leader writes one
	// after every relayed batch and while idle); absent when never.
	CheckpointAt         *time.Time `json:"checkpointAt,omitempty"`
	CheckpointAgeSeconds *float64   `json:"checkpointAgeSeconds,omitempty"`
	// Partitions are the leases of a partitioned stream's partitions, one
	// per partition in order (absent for one partition); Leader, Term and
	// the checkpoint above are then empty, and LeaderAlive says whether
	// every partition has a live leader.
	Partitions []PartitionState `json:"partitions,omitempty"`
}

// PartitionState is the dispatcher lease of one partition: which
// dispatcher relays it, with which fencing term, and how old its
// checkpoint is. Leader is "" while no dispatcher ever took it.
type PartitionState struct {
	Partition            int      `json:"partition"`
	Leader               string   `json:"leader"`
	LeaderAlive          bool     `json:"leaderAlive"`
	Term                 int64    `json:"term"`
	CheckpointAgeSeconds *float64 `json:"checkpointAgeSeconds,omitempty"`
}

// ReconcilerState is the periodic reconciler's lease and last sweep.
type ReconcilerState struct {
	Leader         string    `json:"leader"`
	LeaderAlive    bool      `json:"leaderAlive"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt"`
	// LastSweepAt is when the last recorded sweep ended, by any process.
	LastSweepAt         *time.Time `json:"lastSweepAt,omitempty"`
	LastSweepAgeSeconds *float64   `json:"lastSweepAgeSeconds,omitempty"`
	// LastReport is the last sweep of a reconciler of this process.
	LastReport *reconciler.Report `json:"lastReport,omitempty"`
}

// Breaker is the state of one circuit breaker: "closed", "half-open" or
// "open".
type Breaker struct {
	Component string `json:"component"`
	Name      string `json:"name"`
	State     string `json:"state"`
}

// HaltedRetries is a failure class whose automatic retries a component
// stopped, and the code that stopped them (when known).
type HaltedRetries struct {
	Component string `json:"component"`
	Class     string `json:"class"`
	Code      string `json:"code,omitempty"`
}

// Snapshot reads the current state: the store and Redis in parallel, each
// read bounded by ReadTimeout (so that it answers within ReadTimeout however
// stalled a store is), then this process's breakers.
func (s *Status) Snapshot(ctx context.Context) *Snapshot {
	snap := s.counts(ctx, true)
	s.addProcess(snap)
	snap.Stalled = stalled(snap)
	return snap
}

// JSON returns the snapshot GET /v1/status serves (httpapi.Config.Status).
func (s *Status) JSON(ctx context.Context) any { return s.Snapshot(ctx) }

// stalled lists why the pipeline cannot make progress now, from what the
// snapshot shows.
func stalled(snap *Snapshot) []string {
	var why []string
	if r := snap.Redis; r != nil && r.Full {
		why = append(why, "redis refuses writes (used_memory at maxmemory)")
	}
	if snap.Backpressure != "" {
		why = append(why, "the relay holds: "+snap.Backpressure)
	}
	for _, b := range snap.Breakers {
		if b.State == "open" {
			why = append(why, fmt.Sprintf("breaker %s/%s open", b.Component, b.Name))
		}
	}
	for _, h := range snap.RetriesHalted {
		why = append(why, fmt.Sprintf("retries halted: %s/%s", h.Component, h.Class))
	}
	return why
}

func (s *Status) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// leaseParts are the lease parts of a snapshot.
type leaseParts struct {
	dispatcher *DispatcherState
	reconciler *ReconcilerState
	failed     []string
}

// counts reads the figures of the stores (and, with leases, the leases and
// the last audit run), each part within ReadTimeout.
func (s *Status) counts(ctx context.Context, leases bool) *Snapshot {
	now := s.now
	timeout := cmp.Or(s.ReadTimeout, StatusReadTimeout)
	withAudit := leases && s.Audit != nil // the snapshot's, not the collector's
	withRedis := leases && s.Redis != nil // the same
	withPauses := leases && s.Pauses != nil
	leases = leases && (s.DispatcherLease != "" || s.ReconcilerLease != "")
	var (
		wg        sync.WaitGroup
		counts    store.Counts
		countsErr error
		parts     streamParts
		ls        leaseParts
		lsErr     error
		audit     *operator.AuditReport
		auditErr  error
		rparts    redisParts
		rpartsErr error
		pauses    *operator.PausesResult
		pausesErr error
	)
	if withPauses {
		wg.Go(func() { pauses, pausesErr = clock.Within(ctx, timeout, s.Pauses) })
	}
	wg.Go(func() { counts, countsErr = clock.Within(ctx, timeout, s.Store.Counts) })
	if s.Redis != nil {
		wg.Go(func() {
			parts, _ = clock.Within(ctx, timeout, func(ctx context.Context) (streamParts, error) { return s.streamCounts(ctx, now()), nil })
		})
		if withRedis {
			wg.Go(func() { rparts, rpartsErr = clock.Within(ctx, timeout, s.redisCounts) })
		}
	}
	if leases {
		wg.Go(func() {
			ls, lsErr = clock.Within(ctx, timeout, func(ctx context.Context) (leaseParts, error) { return s.leases(ctx, now()), nil })
		})
	}
	if withAudit {
		wg.Go(func() { audit, auditErr = clock.Within(ctx, timeout, s.Audit) })
	}
	wg.Wait()

	snap := &Snapshot{Store: s.Store.Kind(), Audit: audit}
	if s.Unchecked != "" {
		snap.ReadModel = &ReadModelState{Checkable: false, Unchecked: s.Unchecked}
	}
	if auditErr != nil {
		snap.Unavailable = append(snap.Unavailable, "audit")
	}
	switch {
	case pausesErr != nil:
		snap.Unavailable = append(snap.Unavailable, "paused")
	case pauses != nil && len(pauses.Paused) > 0:
		snap.Paused = pauses.Paused
	}
	if countsErr != nil {
		snap.Unavailable = append(snap.Unavailable, "events", "outbox")
	} else {
		c := counts
		snap.ReadAt = c.ReadAt.UTC()
		snap.Events = &EventCounts{Total: c.Total, Synced: c.Synced, Pending: c.Pending, Failed: c.Failed,
			FailedByCategory: c.FailedByCategory, Estimated: c.Estimated}
		if snap.Events.FailedByCategory == nil {
			snap.Events.FailedByCategory = map[string]int64{}
		}
		age := 0.0
		if c.OldestPending != nil {
			age = max(0, now().Sub(*c.OldestPending).Seconds())
		}
		snap.OldestPendingAgeSeconds = &age
		snap.Outbox = &OutboxCounts{Undispatched: c.Undispatched}
	}
	if s.Redis != nil {
		snap.Stream, snap.Replay, snap.DLQ, snap.RetriesHalted = parts.stream, parts.replay, parts.dlq, parts.halts
		if withRedis {
			snap.Redis = rparts.redis
			if rpartsErr != nil {
				snap.Unavailable = append(snap.Unavailable, "redis")
			}
			if snap.Stream != nil {
				snap.Stream.Groups = rparts.groups
			}
			if rpartsErr == nil {
				snap.RoutedStreams = rparts.routed
			}
		}
		if parts.stream == nil {
			snap.Unavailable = append(snap.Unavailable, "stream")
		}
		if parts.replay == nil {
			snap.Unavailable = append(snap.Unavailable, "replay")
		}
		if parts.dlq == nil {
			snap.Unavailable = append(snap.Unavailable, "dlq")
		}
	}
	if leases {
		if lsErr != nil {
			for name, part := range map[string]string{s.DispatcherLease: "dispatcher", s.ReconcilerLease: "reconciler"} {
				if name != "" {
					ls.failed = append(ls.failed, part)
				}
			}
		}
		snap.Dispatcher, snap.Reconciler = ls.dispatcher, ls.reconciler
		snap.Unavailable = append(snap.Unavailable, ls.failed...)
	}
	if s.LastSweep != nil {
		if rep := s.LastSweep(); rep != nil {
			if snap.Reconciler == nil {
				snap.Reconciler = &ReconcilerState{}
			}
			snap.Reconciler.LastReport = rep
		}
	}
	slices.Sort(snap.Unavailable)
	snap.Unavailable = slices.Compact(snap.Unavailable)
	return snap
}

// leases reads the dispatcher's and the reconciler's lease; the names of
// the parts that could not be read are returned.
func (s *Status) leases(ctx context.Context, now time.Time) leaseParts {
	var failed []string
	read := func(name, part string) *store.LeaseState {
		if name == "" {
			return nil
		}
		st, err := s.Store.ReadLease(ctx, name)
		if err != nil {
			failed = append(failed, part)
		}
		return st
	}
	var d *DispatcherState
	var r *ReconcilerState
	alive := func(st *store.LeaseState) bool { return st.Owner != "" && st.Expires.After(now) }
	if st := read(s.DispatcherLease, "dispatcher"); st != nil && len(s.PartitionLeases) == 0 {
		d = &DispatcherState{Leader: st.Owner, LeaderAlive: alive(st), Term: st.Term, LeaseExpiresAt: st.Expires.UTC(),
			CheckpointAt: utc(st.CheckpointAt), CheckpointAgeSeconds: ageOf(st.CheckpointAt, now)}
	}
	if len(s.PartitionLeases) > 0 {
		d = &DispatcherState{LeaderAlive: true, Partitions: make([]PartitionState, len(s.PartitionLeases))}
		for p, name := range s.PartitionLeases {
			ps := PartitionState{Partition: p}
			if st := read(name, "dispatcher"); st != nil {
				ps.Leader, ps.LeaderAlive, ps.Term, ps.CheckpointAgeSeconds = st.Owner, alive(st), st.Term, ageOf(st.CheckpointAt, now)
			}
			d.LeaderAlive = d.LeaderAlive && ps.LeaderAlive
			d.Partitions[p] = ps
		}
	}
	if st := read(s.ReconcilerLease, "reconciler"); st != nil {
		r = &ReconcilerState{Leader: st.Owner, LeaderAlive: alive(st), LeaseExpiresAt: st.Expires.UTC()}
	}
	if s.ReconcilerLease != "" {
		// The end of the last sweep is a mark of its own: a reconciler
		// without the lease records it too.
		switch at, err := store.LastMark(ctx, s.Store, store.SweepMarkName(s.Stream), s.ReconcilerLease); {
		case err != nil:
			failed = append(failed, "reconciler")
		case at != nil:
			r = cmp.Or(r, &ReconcilerState{})
			r.LastSweepAt, r.LastSweepAgeSeconds = utc(at), ageOf(at, now)
		}
	}
	return leaseParts{dispatcher: d, reconciler: r, failed: failed}
}

// utc returns t in UTC; nil stays nil.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// ageOf returns the seconds from t to now (at least 0), nil for nil.
func ageOf(t *time.Time, now time.Time) *float64 {
	if t == nil {
		return nil
	}
	age := max(0, now.Sub(*t).Seconds())
	return &age
}

// Breaker states, the values of the breaker-state gauges.
var breakerStates = map[float64]string{0: "closed", 1: "half-open", 2: "open"}

// addProcess adds what this process's metrics tell: the breaker states and
// the halted retries of its stream. A metric that is absent leaves its
// part out.
func (s *Status) addProcess(snap *Snapshot) {
	if s.Gatherer == nil {
		return
	}
	families, err := s.Gatherer.Gather()
	if err != nil && len(families) == 0 {
		return
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stream"] != s.Stream || m.GetGauge() == nil {
				continue
			}
			v := m.GetGauge().GetValue()
			switch f.GetName() {
			case worker.BreakerStateMetric:
				snap.Breakers = append(snap.Breakers, Breaker{Component: "worker", Name: labels["breaker"], State: breakerState(v)})
			case dispatcher.BreakerStateMetric:
				snap.Breakers = append(snap.Breakers, Breaker{Component: "dispatcher", Name: cmp.Or(labels["breaker"], "redis"), State: breakerState(v)})
			case dispatcher.BackpressureMetric:
				if v == 1 {
					snap.Backpressure = "redis full"
				}
			case failpolicy.RetriesHaltedMetric:
				halted := func(h HaltedRetries) bool { return h.Component == labels["component"] && h.Class == labels["class"] }
				if v == 1 && !slices.ContainsFunc(snap.RetriesHalted, halted) {
					snap.RetriesHalted = append(snap.RetriesHalted, HaltedRetries{Component: labels["component"], Class: labels["class"]})
				}
			}
		}
	}
}

func breakerState(v float64) string {
	if st, ok := breakerStates[v]; ok {
		return st
	}
	return "unknown"
}

// streamParts are the Redis parts of a snapshot; a part that failed is nil.
type streamParts struct {
	stream *StreamCounts
	replay *ReplayCounts
	dlq    *DLQCounts
	halts  []HaltedRetries
}

// redisParts are Redis's memory and the stream's consumer groups, read
// apart from streamParts (so that they cannot delay those).
type redisParts struct {
	redis  *RedisCounts
	groups []GroupCounts
	routed []RoutedStreamCounts
}

// redisCounts reads Redis's memory and policy and every consumer group of
// the stream; an error when either cannot be read.
func (s *Status) redisCounts(ctx context.Context) (redisParts, error) {
	keys := stream.NewKeys(s.Stream, s.Group)
	m, err := s.Redis.Memory(ctx)
	if err != nil {
		return redisParts{}, err
	}
	lags, err := s.Redis.Lags(ctx, keys)
	if err != nil {
		return redisParts{}, err
	}
	rp := redisParts{redis: &RedisCounts{UsedMemoryBytes: m.Used, MaxMemoryBytes: m.Max, MaxMemoryPolicy: m.Policy,
		EvictionMisconfigured: m.Evicts(), Full: m.Full()}}
	rp.groups = liveGroups(lags, keys)
	for _, name := range s.RoutedStreams {
		for _, k := range stream.NewKeys(name, s.Group).Split(len(s.PartitionLeases)).AllPartitions() {
			lags, err := s.Redis.Lags(ctx, k)
			if err != nil {
				return redisParts{}, err
			}
			rp.routed = append(rp.routed, RoutedStreamCounts{Name: k.Stream(), Groups: liveGroups(lags, k)})
		}
	}
	return rp, nil
}

// liveGroups returns the groups of lags on the stream of keys (not its
// replay lane).
func liveGroups(lags []stream.GroupLag, keys stream.Keys) []GroupCounts {
	var out []GroupCounts
	for _, l := range lags {
		if l.Key == keys.Stream() {
			out = append(out, GroupCounts{Name: l.Group, Pending: l.Pending, Lag: l.Lag, EntriesRead: l.Read})
		}
	}
	return out
}

// streamCounts reads the stream's length and pending count, the replay
// lane's figures, the halted retries and the DLQ's length and oldest
// entry in one round trip; a part that failed is nil.
func (s *Status) streamCounts(ctx context.Context, now time.Time) streamParts {
	keys := stream.NewKeys(s.Stream, s.Group).Split(len(s.PartitionLeases))
	f := s.Redis.AllFigures(ctx, keys)
	names := func(one string) string {
		if n := keys.Partitions(); n > 1 { // the figures are the sum of every partition's
			return fmt.Sprintf("%s (%d partitions)", one, n)
		}
		return one
	}
	var parts streamParts
	if f.StreamErr == nil {
		parts.stream = &StreamCounts{Name: names(keys.Stream()), Length: f.Length, Pending: f.Pending}
	}
	if r := f.Replay; r.Err == nil {
		parts.replay = &ReplayCounts{Name: names(keys.Replay()), Length: r.Length, Pending: r.Pending, Lag: r.Lag, Read: r.Read,
			RatePerSecond: s.replayRate.observe(now, r.Read)}
	}
	if f.DLQErr == nil {
		parts.dlq = &DLQCounts{Name: names(keys.DLQ()), Length: f.DLQLength, OldestAgeSeconds: ageOf(f.DLQOldest, now)}
	}
	for _, h := range f.Halts {
		parts.halts = append(parts.halts, HaltedRetries{Component: h.Component, Class: h.Class, Code: h.Code})
	}
	return parts
}

// replayRateEvery is the shortest interval the lane's rate is measured
// over.
const replayRateEvery = 5 * time.Second

// rateMeter turns readings of a counter into a rate: each reading gets the
// rate between the last two readings at least replayRateEvery apart.
type rateMeter struct {
	mu   sync.Mutex
	base struct {
		at time.Time
		n  int64
	}
	last *float64
}

// observe records the reading n at now and returns the rate (nil until
// two readings far enough apart).
func (m *rateMeter) observe(now time.Time, n int64) *float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch dt := now.Sub(m.base.at); {
	case m.base.at.IsZero() || n < m.base.n:
		m.base.at, m.base.n, m.last = now, n, nil
	case dt >= replayRateEvery:
		r := rate(n-m.base.n, dt.Seconds())
		m.base.at, m.base.n, m.last = now, n, &r
	}
	return m.last
}

// ReadModelState is whether the read model can be checked (the
// snapshot's readModel).
type ReadModelState struct {
	Checkable bool   `json:"checkable"`
	Unchecked string `json:"unchecked,omitempty"`
}
