package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/internal/bounds"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/internal/tracing"
)

// Defaults of CommitterConfig.
const (
	// GroupWaitDefault is how long the first request of a group waits for
	// others to join it when no transaction is running (requests queued
	// while one runs go at once when it ends: they have waited for it). It
	// bounds the latency group commit adds to a request. Under load the
	// groups form while the previous transaction runs, so the wait matters
	// little for throughput: measured with 32 writers on SQLite, a 2ms wait
	// gave 7k events/s, 200µs and no wait both 15k/s. On a replica set a
	// majority commit takes several milliseconds, during which the next
	// group gathers.
	GroupWaitDefault = 200 * time.Microsecond
	// GroupMaxDefault is the most events one group holds: four batch
	// requests of the largest size (--max-batch, 500), so that concurrent
	// batches share a transaction. On SQLite a group's commit writes every
	// page it touched once, and the pages of the indexes whose keys the
	// clients choose (their own idempotency keys, the device) are spread
	// over the whole index: with such keys, in a store of 40,000 events a
	// group of 2,000 wrote 0.9 WAL frames per event, one of 500 1.8
	// (docs/benchmarks.md, "Fourth pass"; derived keys begin with the time
	// and cost a few pages per commit).
	GroupMaxDefault = 2000
	// GroupMaxBytesDefault is the most bytes one group holds: a few MiB,
	// well under MongoDB's 16 MiB document and its transaction cache
	// (TransactionTooLargeForCache), and enough for 500 events of 8 KiB.
	GroupMaxBytesDefault = 4 << 20
	// GroupMaxBytesMin and GroupMaxBytesMax bound GroupMaxBytes: it must
	// hold an event with the largest keys and a small payload, and no event
	// beyond MongoDB's 16 MiB document limit may be accepted.
	GroupMaxBytesMin = 4 << 10
	GroupMaxBytesMax = 16 << 20
	// GroupTimeoutDefault bounds the transaction of one group.
	GroupTimeoutDefault = 10 * time.Second
	// GroupWaitMax is the largest GroupWait accepted: a longer wait is
	// latency, not throughput.
	GroupWaitMax = time.Second
)

// GroupWaitOff as CommitterConfig.GroupWait turns group commit off: every
// Write runs its own transaction, as Writer.WriteBatch does.
const GroupWaitOff time.Duration = -1

// ErrCommitterStopped is returned by Committer.Write while the committer is
// not running (before Start, after Stop).
var ErrCommitterStopped = errors.New("the ingest committer is not running")

// CommitterConfig configures a Committer. A nil config means all defaults.
type CommitterConfig struct {
	// GroupWait is the longest the first request of a group waits for
	// others before the group's transaction starts; a group also starts as
	// soon as it holds GroupMax events, and without waiting when its first
	// request was queued while the previous group's transaction ran, or
	// came alone (the last group held one request and the request before
	// it was queued more than GroupWait earlier: a light load).
	// Defaults to GroupWaitDefault (200µs);
	// GroupWaitOff gives every Write its own transaction. At most
	// GroupWaitMax.
	GroupWait time.Duration
	// GroupMax is the most events one group's transaction holds (a single
	// request larger than that still goes, alone). Defaults to
	// GroupMaxDefault (2,000).
	GroupMax int
	// GroupMaxBytes is the most bytes one group's transaction holds, as the
	// store measures its events (Batch.Bytes; MongoDB: BSON). A request
	// larger than that whose events are each within it still goes, alone;
	// an event larger than it is refused before any transaction with a
	// *ValidationError naming its payload (its request writes nothing; the
	// group it would have joined is not failed). Defaults to
	// GroupMaxBytesDefault (4 MiB); between GroupMaxBytesMin and
	// GroupMaxBytesMax.
	GroupMaxBytes int
	// GroupTimeout bounds one group's transaction, its runs after a lost
	// key race included; the group ends earlier at the latest deadline of
	// its requests. Defaults to GroupTimeoutDefault (10 seconds).
	GroupTimeout time.Duration
	// ObserveGroup, when set, is called after each group's transaction
	// with the number of events the group held (a metric: this package
	// imports no metrics code). Defaults to nil.
	ObserveGroup func(events int)
}

func (c *CommitterConfig) withDefaults() CommitterConfig {
	out := CommitterConfig{}
	if c != nil {
		out = *c
	}
	out.GroupWait = cmp.Or(out.GroupWait, GroupWaitDefault)
	out.GroupMax = cmp.Or(out.GroupMax, GroupMaxDefault)
	out.GroupMaxBytes = cmp.Or(out.GroupMaxBytes, GroupMaxBytesDefault)
	out.GroupTimeout = cmp.Or(out.GroupTimeout, GroupTimeoutDefault)
	return out
}

// Validate checks c as NewCommitter takes it: a zero field takes its
// default, any other value must be within its field's bound; each error
// names its field, and they are joined. A nil config is valid.
func (c *CommitterConfig) Validate() error {
	d := c.withDefaults()
	return d.validate()
}

// validate checks a defaulted config; each error names the field.
func (c *CommitterConfig) validate() error {
	var errs []error
	if (c.GroupWait < 0 && c.GroupWait != GroupWaitOff) || c.GroupWait > GroupWaitMax {
		errs = append(errs, bounds.Errorf("GroupWait", c.GroupWait, "must be between 0 and %s, or GroupWaitOff", GroupWaitMax))
	}
	if c.GroupMax < 1 {
		errs = append(errs, bounds.Errorf("GroupMax", c.GroupMax, "must be positive"))
	}
	if c.GroupMaxBytes < GroupMaxBytesMin || c.GroupMaxBytes > GroupMaxBytesMax {
		errs = append(errs, bounds.Errorf("GroupMaxBytes", c.GroupMaxBytes, "must be between %d and %d (MongoDB's 16 MiB document)", GroupMaxBytesMin, GroupMaxBytesMax))
	}
	if c.GroupTimeout < time.Millisecond {
		errs = append(errs, bounds.Errorf("GroupTimeout", c.GroupTimeout, "must be at least 1ms"))
	}
	return errors.Join(errs...)
}

// Committer writes concurrent requests in shared transactions (group
// commit): a request waits at most GroupWait for others, then one store
// transaction writes the whole group, and each request gets its own answer.
// On a MongoDB replica set every transaction ends with a majority commit (a
// round trip to the secondaries and a journal flush); a group pays it once
// for all its requests, so under load the store commits far fewer times
// than requests arrive. On SQLite, whose writes queue for one connection
// anyway, it turns many small transactions into one.
//
// Each request is all or nothing for itself, as Writer.WriteBatch is:
//   - A key already stored, or inserted by an earlier request of the same
//     group, with the same content: Duplicate and that original's id; with
//     other content: a *MismatchError, and nothing of that request is
//     written. The other requests of the group still commit.
//   - A concurrent writer outside the group that stores one of the group's
//     keys first: the group's transaction runs again (as WriteBatch's does)
//     and its request is answered with the winner's original.
//   - A failing transaction fails every request of the group with its
//     error, and nothing of the group is written.
//   - A request whose context ends before its group starts is answered
//     with the context's error and not written. Once its group started, it
//     waits for the outcome (an error answer never hides a committed write):
//     the group runs on a context of its own, bounded by GroupTimeout and
//     the latest deadline of its requests.
//
// One goroutine gathers the groups and runs their transactions, one at a
// time: requests that arrive meanwhile form the next group. Start it before
// the first Write; Stop answers every request still queued (their groups
// run) before it returns.
type Committer struct {
	life startstop.Base

	w    *Writer
	cfg  CommitterConfig
	wake chan struct{} // a request was queued: the loop looks again

	mu          sync.Mutex
	open        bool
	queue       []*request
	queued      int // events in queue
	queuedBytes int // their bytes
	// ended is when the last group's transaction ended: requests queued
	// before it waited for that transaction and wait no longer.
	ended time.Time
	// lastAt is when the last request was queued, and lastGroup how many
	// requests the last group held: a group's first request waits only
	// while others are around (lonely).
	lastAt    time.Time
	lastGroup int
}

// request is one Write waiting for its group.
type request struct {
	member
	events   int
	bytes    int
	at       time.Time    // when it was queued
	lonely   bool         // the first of a group goes without waiting (Committer.lonely)
	deadline time.Time    // its context's deadline, or zero
	ctxErr   func() error // its context's Err
	done     chan struct{}
}

// NewCommitter returns a Committer that writes through w. A nil cfg means
// all defaults.
func NewCommitter(w *Writer, cfg *CommitterConfig) (*Committer, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid committer config: %w", err)
	}
	cm := &Committer{w: w, cfg: c, wake: make(chan struct{}, 1)}
	cm.life.Init(func(context.Context) error {
		cm.mu.Lock()
		cm.open = true
		cm.mu.Unlock()
		return nil
	}, cm.run)
	return cm, nil
}

// Start opens the committer to Write and runs its loop in the background;
// on a running committer it does nothing.
func (c *Committer) Start(ctx context.Context) error { return c.life.Start(ctx) }

// Stop closes the committer to new writes, runs the groups of every
// request still queued and returns once they are answered; when ctx ends
// first, the transactions still running fail, their requests get the
// error, and Stop returns ctx's error. It is idempotent and safe before
// Start.
func (c *Committer) Stop(ctx context.Context) error { return c.life.Stop(ctx) }

// Stopped is closed while the committer is not running.
func (c *Committer) Stopped() <-chan struct{} { return c.life.Stopped() }

// Write stores b (from Writer.Prepare) with the group of requests it joins
// and returns b's results, as Writer.WriteBatch would. It returns
// ErrCommitterStopped while the committer is not running, and a
// *ValidationError, before any transaction, when an event of b is larger
// than GroupMaxBytes.
func (c *Committer) Write(ctx context.Context, b *Batch) ([]Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.refuseOversized(b); err != nil {
		return nil, err
	}
	if c.cfg.GroupWait == GroupWaitOff {
		c.mu.Lock()
		open := c.open
		c.mu.Unlock()
		if !open {
			return nil, ErrCommitterStopped
		}
		return c.w.WriteBatch(ctx, b)
	}
	r := &request{member: member{prep: b.prep, traceParent: tracing.TraceParent(ctx)}, events: b.Len(), at: time.Now(), ctxErr: ctx.Err, done: make(chan struct{})}
	for i := range b.prep {
		r.bytes += b.prep[i].bytes
	}
	r.deadline, _ = ctx.Deadline()
	c.mu.Lock()
	if !c.open {
		c.mu.Unlock()
		return nil, ErrCommitterStopped
	}
	r.lonely = c.lonely(r.at)
	c.lastAt = r.at
	c.queue = append(c.queue, r)
	c.queued += r.events
	c.queuedBytes += r.bytes
	// The loop looks again when a group begins or fills up.
	wake := len(c.queue) == 1 || (c.queued >= c.cfg.GroupMax && c.queued-r.events < c.cfg.GroupMax) ||
		(c.queuedBytes >= c.cfg.GroupMaxBytes && c.queuedBytes-r.bytes < c.cfg.GroupMaxBytes)
	c.mu.Unlock()
	if wake {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if c.withdraw(r) {
			return nil, ctx.Err()
		}
		<-r.done // its group has started: its outcome is the answer
	}
	return r.results, r.err
}

// lonely says whether a request queued at now is alone: the last group held
// one request, and the request before this one was queued longer than
// GroupWait before it. Its group then starts without waiting GroupWait
// for others, as it would most likely wait in vain: under a light load a
// lone request so saves the wait, and the timer and wake-ups the wait costs
// the process (in a Go benchmark several times the committer's other
// costs). A request after a group of several, or right after another, waits
// as before. c.mu is held.
func (c *Committer) lonely(now time.Time) bool {
	return c.lastGroup == 1 && now.Sub(c.lastAt) > c.cfg.GroupWait
}

// withdraw takes r out of the queue and reports whether it was there (its
// group has not started).
func (c *Committer) withdraw(r *request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.queue, r)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	c.queued -= r.events
	c.queuedBytes -= r.bytes
	return true
}

// refuseOversized returns a *ValidationError (TooLarge, matching
// ErrTooLarge) naming the first event of b larger than GroupMaxBytes: it
// fits no group, so it is refused alone, before a transaction could fail
// the group it joins.
func (c *Committer) refuseOversized(b *Batch) error {
	for i := range b.prep {
		if n := b.prep[i].bytes; n > c.cfg.GroupMaxBytes {
			return &ValidationError{TooLarge: true, Fields: []FieldError{{Index: i, Field: "payload",
				Reason: fmt.Sprintf("is too large: the event takes %d bytes in the store, more than the %d one ingest transaction holds (CommitterConfig.GroupMaxBytes, --ingest-group-max-bytes)",
					n, c.cfg.GroupMaxBytes)}}}
		}
	}
	return nil
}

// run gathers groups and writes them until fetchCtx ends, then closes the
// queue and writes what it still holds. workCtx ends when Stop gives up
// waiting: the transactions then fail and their requests get the error.
func (c *Committer) run(fetchCtx, workCtx context.Context) error {
	timer := time.NewTimer(time.Hour) // one timer for every wait
	timer.Stop()
	for {
		group, took, wait := c.next(false)
		if took {
			c.commit(workCtx, group)
			continue
		}
		var expired <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			expired = timer.C
		}
		select {
		case <-c.wake:
		case <-expired:
		case <-fetchCtx.Done():
			c.mu.Lock()
			c.open = false
			c.mu.Unlock()
			for {
				group, took, _ := c.next(true)
				if !took {
					return nil
				}
				c.commit(workCtx, group)
			}
		}
		timer.Stop()
	}
}

// next takes the next group from the queue when it is due (its first
// request has waited GroupWait or was queued while the last group's
// transaction ran, or it holds GroupMax events or GroupMaxBytes) or force
// is set; else it returns how long until it is due (0: the queue is
// empty). A group takes requests in order while both bounds hold (its
// first request always). Requests whose context has ended are answered and
// left out of the group.
func (c *Committer) next(force bool) (group []*request, took bool, wait time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return nil, false, 0
	}
	if !force && !c.queue[0].lonely && c.queued < c.cfg.GroupMax && c.queuedBytes < c.cfg.GroupMaxBytes && !c.queue[0].at.Before(c.ended) {
		if d := time.Until(c.queue[0].at.Add(c.cfg.GroupWait)); d > 0 {
			return nil, false, d
		}
	}
	n, events, bytes := 0, 0, 0
	for n < len(c.queue) && (n == 0 ||
		(events+c.queue[n].events <= c.cfg.GroupMax && bytes+c.queue[n].bytes <= c.cfg.GroupMaxBytes)) {
		events += c.queue[n].events
		bytes += c.queue[n].bytes
		n++
	}
	for _, r := range c.queue[:n] {
		if err := r.ctxErr(); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		group = append(group, r)
	}
	c.queue = slices.Delete(c.queue, 0, n)
	c.queued -= events
	c.queuedBytes -= bytes
	return group, true, 0
}

// commit writes group in one transaction and answers its requests.
func (c *Committer) commit(workCtx context.Context, group []*request) {
	if len(group) == 0 {
		return
	}
	deadline := time.Now().Add(c.cfg.GroupTimeout)
	var latest time.Time
	bounded := true
	members := make([]*member, len(group))
	events := 0
	for i, r := range group {
		members[i] = &r.member
		events += r.events
		if r.deadline.IsZero() {
			bounded = false
		} else if r.deadline.After(latest) {
			latest = r.deadline
		}
	}
	if bounded && latest.Before(deadline) {
		deadline = latest
	}
	ctx, cancel := context.WithDeadline(workCtx, deadline)
	defer cancel()
	ctx, span := c.startGroupSpan(ctx, group, events)
	err := c.w.retryTx(ctx, func(ctx context.Context, tx Tx, redraw bool) error {
		return c.w.writeGroup(ctx, tx, members, redraw)
	})
	tracing.End(span, err)
	if err != nil {
		err = fmt.Errorf("error writing a group of %d requests in one transaction: %w", len(group), err)
	}
	c.mu.Lock()
	c.ended = time.Now()
	c.lastGroup = len(group)
	c.mu.Unlock()
	for _, r := range group {
		if err != nil {
			r.results, r.err = nil, err
		}
		close(r.done)
	}
	if c.cfg.ObserveGroup != nil {
		c.cfg.ObserveGroup(events)
	}
}

// startGroupSpan starts the span of a group's transaction when one of its
// requests is traced: a child of the first traced request's span, linked to
// the others', so that every request's trace reaches the store write it
// shared (the store's own spans nest in it).
func (c *Committer) startGroupSpan(ctx context.Context, group []*request, events int) (context.Context, trace.Span) {
	first := -1
	var links []trace.Link
	for i, r := range group {
		if r.traceParent == "" {
			continue
		}
		if first < 0 {
			first = i
			continue
		}
		links = append(links, tracing.Links(r.traceParent)...)
	}
	if first < 0 {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return tracing.Start(tracing.WithParent(ctx, group[first].traceParent), "outbox.group_commit",
		trace.WithLinks(links...), trace.WithAttributes(
			attribute.Int("outboxd.group.requests", len(group)), attribute.Int("outboxd.group.events", events)))
}
