package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/pgerr"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// deadLetter is an entry to move to the dead-letter stream.
type deadLetter struct {
	msg        stream.Entry
	eventID    string
	err        error
	category   string
	deliveries int64
}

// outcome is what a handled batch leaves to do once it is acknowledged:
// the entries to hold for a later delivery, and what to count.
type outcome struct {
	hold     []heldEntry
	charged  int                  // held entries charged a failure
	failures []failpolicy.Failure // one per failing event, for the streak rule
	dead     []deadLetter
	synced   int // entries acknowledged as synced
}

// batch is a read batch decoded, with its originals loaded: the part of a
// batch's work that writes nothing, so that it can be done for the next
// batch while the current one is written (see readAhead).
type batch struct {
	// dead are the entries that cannot be decoded.
	dead []deadLetter
	// entries are the decoded entries by event id, ids those event ids in
	// order, origins the origin of each event's first entry.
	entries map[string][]stream.Entry
	ids     []string
	origins map[string]outbox.Origin
	// groups are the events' message groups (messageGroup), by event id.
	groups map[string]string
	// originals are the loaded originals by id; invalid those that cannot
	// become a read-model row.
	originals map[string]*outbox.Event
	invalid   map[string]error
	// traceParents are the trace contexts the events' first entries carry
	// (outbox.Message.TraceParent), by event id; spans are the events'
	// projection spans (nil: none traced, or tracing off).
	traceParents map[string]string
	spans        *tracing.Items
}

// processor is the front of a batch's work: it decodes the entries and
// loads their originals (prepare), projects them in one PostgreSQL
// transaction (project) and judges the failing records (judge), leaving
// the batch's tail to the tail writer (handle). The reader calls it from
// the run goroutine, and prepare also from a read-ahead's.
type processor struct {
	*shared
	st   store.Store
	rc   *stream.Client
	pool *pgxpool.Pool
	// pgBreaker is PostgreSQL's circuit breaker (projectTx).
	pgBreaker *gobreaker.CircuitBreaker[struct{}]
	// beginSQL begins a projection transaction with its timeouts; begin
	// are its statements one by one (beginStatements).
	beginSQL string
	begin    []string
	// pipelines: the pool's connections cache prepared statements (pgx's
	// default_query_exec_mode cache_statement, the default, or
	// cache_describe), so a PipelinedProjector's transactions go in one
	// round trip (projectPipelined). In the other modes, chosen for a
	// connection pooler, they go as a pgx.Tx.
	pipelines bool
	// size is the batch size, which tuneBatch tunes (Config.AutoBatch).
	size *sizing
}

// newProcessor returns the processor of the worker sh is shared by,
// projecting into pool through pgBreaker.
func newProcessor(sh *shared, st store.Store, rc *stream.Client, pool *pgxpool.Pool, pgBreaker *gobreaker.CircuitBreaker[struct{}], size *sizing) *processor {
	return &processor{
		shared: sh, st: st, rc: rc, pool: pool, pgBreaker: pgBreaker, size: size,
		beginSQL: beginSQL(sh.cfg.LockTimeout, sh.cfg.StatementTimeout), begin: beginStatements(sh.cfg.LockTimeout, sh.cfg.StatementTimeout),
		pipelines: slices.Contains([]pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe},
			pool.Config().ConnConfig.DefaultQueryExecMode),
	}
}

// prepare decodes msgs and reads their originals with one store read.
func (p *processor) prepare(ctx context.Context, msgs []stream.Entry) (*batch, error) {
	b := &batch{entries: map[string][]stream.Entry{}, origins: map[string]outbox.Origin{}, groups: map[string]string{}}
	keys := map[string]string{} // the messages' idempotency keys, a hint for the store's read
	var after []string          // the messages' read-after positions
	for _, m := range msgs {
		if m.Values == nil { // trimmed or deleted while pending
			b.dead = append(b.dead, deadLetter{msg: m, err: fmt.Errorf("%w: entry %s", errTrimmed, m.ID), category: outbox.CategoryInfrastructure})
			continue
		}
		msg, err := m.Message()
		if err != nil {
			b.dead = append(b.dead, deadLetter{msg: m, err: err, category: outbox.CategoryNonRetryable})
			continue
		}
		if _, ok := b.origins[msg.EventID]; !ok {
			b.origins[msg.EventID] = msg.Origin
			keys[msg.EventID] = msg.IdempotencyKey
			b.groups[msg.EventID] = messageGroup(msg.SourceKey, msg.DeviceKey)
			b.traceParent(msg)
		}
		b.entries[msg.EventID] = append(b.entries[msg.EventID], m)
		after = appendReadAfter(after, msg.ReadAfter)
	}
	b.ids = slices.Sorted(maps.Keys(b.entries))
	if p.cfg.Ordered {
		// Stream order: each event where its first entry is.
		b.ids = b.ids[:0]
		for _, m := range msgs {
			if msg, err := m.Message(); m.Values != nil && err == nil && !slices.Contains(b.ids, msg.EventID) {
				b.ids = append(b.ids, msg.EventID)
			}
		}
	}
	b.spans = p.startProjectSpans(ctx, b, len(msgs))
	var err error
	b.originals, b.invalid, err = p.load(store.WithReadAfter(store.WithEventKeys(b.spans.Context(ctx), keys), after...), b.ids)
	if err != nil {
		b.spans.End(err)
		return nil, err
	}
	b.linkIngest()
	return b, nil
}

// handle runs the front of one batch: decode, one read of the originals,
// one PostgreSQL transaction, the failing records judged (held for another
// delivery, or dead-lettered once their budget is spent). It returns the
// batch's tail (writeTail): one write of syncedAt, then one MULTI/EXEC with
// the dead letters, the XACK and the budget updates. Any error leaves the
// whole batch unacknowledged and charges nothing; running it again
// converges to the same state. g is the consumer the entries were read by
// (of the stream or its replay lane). pre is the batch already prepared by
// a read-ahead, or nil; a retry prepares the batch again. heldFirst is,
// Ordered, the first entry the reader holds of each message group
// (reader.heldFirst): the group's newer entries wait behind it.
func (p *processor) handle(ctx context.Context, g *stream.Group, msgs []stream.Entry, pre *batch, heldFirst map[string]heldEntry) (_ *tail, err error) {
	b := pre
	if b == nil {
		var err error
		if b, err = p.prepare(ctx, msgs); err != nil {
			return nil, err
		}
	}
	ctx = b.spans.Context(ctx)
	defer func() {
		if err != nil {
			b.spans.End(err)
		}
	}()
	p.metrics.batchSize.Observe(float64(len(msgs)))
	dead := slices.Clone(b.dead)
	entries, ids, origins, originals, invalid := b.entries, b.ids, b.origins, b.originals, b.invalid
	var events []*outbox.Event
	var parked []deadLetter // originals that get syncFailure
	failures := map[string]error{}
	// Ordered: the events of a message group that failed in this batch, or
	// that has an older entry held, wait behind it; other groups go on.
	var deferred []string
	failing := map[string]bool{}
	behind := func(id string) bool {
		if !p.cfg.Ordered {
			return false
		}
		first, held := heldFirst[b.groups[id]]
		return failing[b.groups[id]] || held && stream.CompareIDs(first.msg.ID, entries[id][0].ID) < 0
	}
	for _, id := range ids {
		switch {
		case behind(id) && invalid[id] == nil:
			deferred = append(deferred, id)
		case invalid[id] != nil:
			for i, m := range entries[id] {
				dl := deadLetter{msg: m, eventID: id, err: invalid[id], category: outbox.CategoryNonRetryable}
				dead = append(dead, dl)
				if i == 0 {
					parked = append(parked, dl)
				}
			}
		case originals[id] == nil:
			// A secondary behind, or a commit not visible yet: worth a few
			// more deliveries before it is dead-lettered.
			failures[id] = fmt.Errorf("%w: event %s", errMissingOriginal, id)
			failing[b.groups[id]] = true
		default:
			events = append(events, originals[id])
		}
	}

	failed, waiting, err := p.project(ctx, events)
	if err != nil {
		return nil, err
	}
	maps.Copy(failures, failed)
	deferred = append(deferred, waiting...)
	events = slices.DeleteFunc(events, func(ev *outbox.Event) bool { return slices.Contains(waiting, ev.ID) })
	if err := p.cfg.faults.Check(faultAfterCommit); err != nil {
		return nil, err
	}

	var j judgement
	if len(failures) > 0 {
		if j, err = p.judge(ctx, g, failures, entries, originals); err != nil {
			return nil, err
		}
		dead = append(dead, j.dead...)
		parked = append(parked, j.parked...)
	}
	// Deferred entries wait behind the failing one of their group, charged
	// nothing (takeDue delivers a group's held entries in id order), and
	// are marked held as long as it is: a copy the reconciler published
	// meanwhile would wait behind it too, and each wait would count as a
	// requeue until the event is parked requeue_exhausted.
	now := time.Now()
	held := p.deferredUntil(now, deferred, b.groups, j.until, heldFirst)
	for _, id := range deferred {
		for _, m := range entries[id] {
			j.hold = append(j.hold, heldEntry{g: g, msg: m, due: now})
		}
	}
	p.markHeld(ctx, g, held)
	b.failSpans(failures, invalid)
	t := &tail{g: g, spans: b.spans, origins: origins, parked: parked, charge: j.charge}
	// Only originals not synced yet are written: a replay of synced ones
	// (most of a replayed window) costs the store no write transaction,
	// which on SQLite would queue behind ingest's, and ingest behind it.
	for _, ev := range events {
		if failures[ev.ID] == nil && ev.SyncedAt == nil {
			t.firstSync = append(t.firstSync, ev)
		}
	}
	keep := map[string]bool{}
	for _, h := range j.hold {
		keep[h.msg.ID] = true
	}
	t.ack = make([]string, 0, len(msgs))
	for _, m := range msgs {
		if !keep[m.ID] {
			t.ack = append(t.ack, m.ID)
		}
	}
	t.out = outcome{hold: j.hold, charged: len(j.charge), failures: j.failures, dead: dead, synced: len(t.ack) - len(dead) - j.copies}
	return t, nil
}

// load reads the originals of ids with one store read. An original that
// does not decode, or lacks what the read model needs, is returned in
// invalid.
func (p *processor) load(ctx context.Context, ids []string) (map[string]*outbox.Event, map[string]error, error) {
	originals := make(map[string]*outbox.Event, len(ids))
	invalid := map[string]error{}
	if len(ids) == 0 {
		return originals, invalid, nil
	}
	var loaded map[string]store.Loaded
	err := p.storeCall(func() error {
		l, err := p.st.LoadEvents(ctx, ids)
		loaded = l
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("error reading originals: %w", err)
	}
	for id, l := range loaded {
		if l.Err != nil {
			invalid[id] = fmt.Errorf("%w: %w", errInvalidOriginal, l.Err)
			continue
		}
		if err := checkOriginal(l.Event); err != nil {
			invalid[id] = err
			continue
		}
		originals[id] = l.Event
	}
	return originals, invalid, nil
}

// checkOriginal reports an original that cannot become a read-model row.
func checkOriginal(ev *outbox.Event) error {
	var missing string
	switch {
	case ev.IdempotencyKey == "":
		missing = "idempotencyKey"
	case ev.SourceKey == "":
		missing = "sourceKey"
	case ev.DeviceKey == "":
		missing = "deviceKey"
	case ev.Type == "":
		missing = "type"
	case ev.OccurredAt.IsZero():
		missing = "occurredAt"
	case ev.CreatedAt.IsZero():
		missing = "createdAt"
	}
	if missing != "" {
		return fmt.Errorf("%w: event %s has no %s", errInvalidOriginal, ev.ID, missing)
	}
	return nil
}

// project writes events in one transaction. When that fails because of a
// record (or with an error nobody recognises), it projects each event alone
// to find the failing ones, so that one bad record does not hold back the
// others; those are returned in failed. Any other error is returned as is.
// The time of the batch's transaction tunes the batch size (AutoBatch).
// Ordered, the events of a message group after its first failing one are
// not projected: they are returned in waiting, to wait behind it, and the
// other groups' events go on.
func (p *processor) project(ctx context.Context, events []*outbox.Event) (failed map[string]error, waiting []string, err error) {
	if len(events) == 0 {
		return nil, nil, nil
	}
	started := time.Now()
	err = p.projectTx(ctx, events)
	p.tuneBatch(ctx, len(events), time.Since(started), err)
	if c := classify(err); c != classRecord && c != classUnknown {
		return nil, nil, err
	}
	failed = map[string]error{}
	if len(events) == 1 {
		failed[events[0].ID] = err
		return failed, nil, nil
	}
	failing := map[string]bool{} // Ordered: the groups with a failing event
	for _, ev := range events {
		group := messageGroup(ev.SourceKey, ev.DeviceKey)
		if p.cfg.Ordered && failing[group] {
			waiting = append(waiting, ev.ID)
			continue
		}
		err := p.projectTx(ctx, []*outbox.Event{ev})
		switch classify(err) {
		case classOK:
		case classRecord, classUnknown:
			failed[ev.ID] = err
			failing[group] = true
		default:
			return nil, nil, err
		}
	}
	return failed, waiting, nil
}

// projectTx runs the projector in one transaction through the PostgreSQL
// circuit breaker, again after a serialization failure or deadlock. The
// transaction begins with its lock and statement timeouts
// (beginStatements); one that ends on either is counted.
func (p *processor) projectTx(ctx context.Context, events []*outbox.Event) error {
	started := time.Now()
	defer func() { p.metrics.projection.Observe(time.Since(started).Seconds()) }()
	_, err := p.pgBreaker.Execute(func() (struct{}, error) {
		var err error
		for attempt := 1; attempt <= p.cfg.TxAttempts; attempt++ {
			err = p.projectOnce(ctx, events)
			if kind := timeoutOf(ctx, err); kind != "" {
				p.metrics.pgTimeouts.WithLabelValues(kind).Inc()
				if kind == timeoutLock {
					p.metrics.lockWait.Add(p.cfg.LockTimeout.Seconds())
				}
				p.logger.Warn("projection transaction timed out; retrying", zap.String("timeout", kind),
					zap.Int("events", len(events)), zap.Error(err))
			}
			if classify(err) != classTxRetry {
				break
			}
			p.metrics.retries.WithLabelValues("transaction").Inc()
			p.logger.Debug("transaction retried", zap.String("code", reason(err)), zap.Int("attempt", attempt))
		}
		return struct{}{}, err
	})
	if c := classify(err); c == classOK || c == classRecord {
		p.streak.Succeed(failpolicy.SourcePostgres) // PostgreSQL answered
	}
	return from(failpolicy.SourcePostgres, err)
}

// projectOnce runs one projection transaction on a connection of the
// pool: in one round trip when the projector is a PipelinedProjector and
// the connections cache statements (projectPipelined), else as a pgx.Tx
// that Project writes through. A connection that lost its prepared
// statements (26000: DEALLOCATE or DISCARD ALL behind the worker's back, by
// a pooler or a hook) is closed, so that the retry (an infrastructure
// failure) prepares them on another.
func (p *processor) projectOnce(ctx context.Context, events []*outbox.Event) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if pp, ok := p.cfg.Projector.(PipelinedProjector); ok && p.pipelines {
		err = p.projectPipelined(ctx, conn.Conn(), pp, events)
	} else {
		err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{BeginQuery: p.beginSQL}, func(tx pgx.Tx) error {
			return p.cfg.Projector.Project(ctx, tx, events)
		})
	}
	if pgerr.Code(err) == "26000" {
		_ = conn.Conn().Close(ctx)
	}
	return err
}

// projectPipelined sends the whole transaction (BEGIN and its timeouts,
// pp's statements, COMMIT) on conn as one pipeline, so it costs one round
// trip where a pgx.Tx costs three: on a busy machine every round trip
// waits for PostgreSQL and then the worker to be scheduled again. The
// pipeline ends with one Sync: when a statement fails, PostgreSQL skips the
// rest of it, COMMIT included, and leaves the transaction aborted; it is
// then rolled back here, so that the connection goes back to the pool idle
// (a connection left in a transaction would be closed by the pool).
func (p *processor) projectPipelined(ctx context.Context, conn *pgx.Conn, pp PipelinedProjector, events []*outbox.Event) error {
	b := &pgx.Batch{}
	for _, q := range p.begin {
		b.Queue(q)
	}
	if err := pp.QueueProject(b, events); err != nil {
		return err
	}
	b.Queue("COMMIT")
	if err := p.prepareStatements(ctx, conn, b); err != nil {
		return err
	}
	err := conn.SendBatch(ctx, b).Close()
	if err != nil && !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
		_, _ = conn.Exec(ctx, "ROLLBACK")
	}
	return err
}

// preparedKey is the key, in a connection's CustomData, of the statements
// prepareStatements prepared on it (a map[string]bool of their SQL).
const preparedKey = "outboxd.worker.prepared"

// prepareStatements prepares on conn the statements of b it has not
// prepared there yet, inside a transaction that begins with the
// projection's timeouts. pgx would otherwise prepare a statement new to the
// connection in a round trip of its own before the pipeline, outside the
// transaction and its lock_timeout: preparing an INSERT takes a lock on its
// table, and a lock another transaction holds would hold the worker with no
// timeout. A pipeline uses the statements prepared with their SQL as name.
func (p *processor) prepareStatements(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) error {
	done, _ := conn.PgConn().CustomData()[preparedKey].(map[string]bool)
	var missing []string
	for _, q := range b.QueuedQueries {
		if !done[q.SQL] && !slices.Contains(missing, q.SQL) {
			missing = append(missing, q.SQL)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{BeginQuery: p.beginSQL}, func(tx pgx.Tx) error {
		for _, q := range missing {
			if _, err := tx.Conn().Prepare(ctx, q, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if done == nil {
		done = map[string]bool{}
		conn.PgConn().CustomData()[preparedKey] = done
	}
	for _, q := range missing {
		done[q] = true
	}
	return nil
}

// judgement is what becomes of the entries of failing events.
type judgement struct {
	dead, parked []deadLetter
	hold         []heldEntry
	charge       map[string]int64 // entry id -> failed deliveries, this one included
	// until is, per event held, until when it may stay pending before
	// another worker claims it (its due time and ClaimIdle).
	until map[string]time.Time
	// copies counts the entries acknowledged as copies of an event
	// dead-lettered already.
	copies   int
	failures []failpolicy.Failure
}

// judge decides, for each entry of a failing event (read by g), between
// another delivery later (held, one failure charged to its budget, due
// after RecordBackoff doubled per failure) and the dead-letter stream (its
// MaxDeliveries-th failure: poison, or non_retryable for a missing
// original). While a streak of record failures of the same code stands
// (the streak rule halted the record class), it dead-letters the entries
// at once; while the unknown class is halted, it only holds the entries,
// charging nothing, for one BreakerTimeout.
func (p *processor) judge(ctx context.Context, g *stream.Group, failures map[string]error, entries map[string][]stream.Entry, originals map[string]*outbox.Event) (judgement, error) {
	j := judgement{charge: map[string]int64{}, until: map[string]time.Time{}}
	ids := slices.Sorted(maps.Keys(failures))
	var entryIDs []string
	for _, id := range ids {
		for _, m := range entries[id] {
			entryIDs = append(entryIDs, m.ID)
		}
	}
	counts, err := g.Budgets(ctx, entryIDs)
	if err := p.redisDone(err); err != nil {
		return j, fmt.Errorf("error reading delivery budgets: %w", err)
	}
	now := time.Now()
	k := 0
	for _, id := range ids {
		ferr := failures[id]
		f := failureOf(ferr)
		j.failures = append(j.failures, f)
		// A record's own error never holds the others: while a streak of
		// record errors stands, records failing with its code are not tried
		// again but dead-lettered now, and the worker goes on.
		halted, atOnce := p.streak.Halted(f.Class), false
		if f.Class == failpolicy.ClassRecord {
			hf, ok := p.streak.HaltedBy(failpolicy.ClassRecord)
			halted, atOnce = false, ok && hf.Code == f.Code
		}
		parked, dlqd := false, false
		for _, m := range entries[id] {
			before := counts[k]
			k++
			if halted {
				j.hold = append(j.hold, heldEntry{g: g, msg: m, due: now.Add(p.cfg.BreakerTimeout)})
				j.until[id] = now.Add(p.cfg.BreakerTimeout + p.cfg.ClaimIdle)
				continue
			}
			n := before + 1
			if n < int64(p.cfg.MaxDeliveries) && !atOnce {
				j.charge[m.ID] = n
				wait := p.recordBackoff(n)
				j.hold = append(j.hold, heldEntry{g: g, msg: m, due: now.Add(wait)})
				j.until[id] = now.Add(wait + p.cfg.ClaimIdle)
				p.logger.Warn("record failed; kept pending for another delivery", zap.String("entry_id", m.ID),
					zap.String("event_id", id), zap.String("code", f.Code), zap.Int64("deliveries", n),
					zap.Duration("next_in", wait), zap.Error(ferr), traceID(m))
				continue
			}
			if dlqd || (originals[id] != nil && originals[id].SyncFailure != nil) {
				// A copy of an event already dead-lettered (another entry of
				// this batch, or one before that parked its original): the
				// dead-letter stream holds an event once; this copy is
				// acknowledged.
				p.logger.Info("copy of a dead-lettered event acknowledged", zap.String("entry_id", m.ID), zap.String("event_id", id), traceID(m))
				j.copies++
				continue
			}
			dlqd = true
			dl := deadLetter{msg: m, eventID: id, err: ferr, category: outbox.CategoryPoison, deliveries: n}
			if errors.Is(ferr, errMissingOriginal) {
				dl.category = outbox.CategoryInfrastructure
			}
			j.dead = append(j.dead, dl)
			if dl.category == outbox.CategoryPoison && originals[id] != nil && !parked {
				j.parked = append(j.parked, dl)
				parked = true
			}
		}
	}
	return j, nil
}

// deferredUntil returns the held marks of a batch: until, the failing
// events' (judgement.until), with each deferred event marked until the
// latest mark of its message group's failing events of the batch (groups)
// or the due time of the entry the reader holds first of its group
// (heldFirst) and ClaimIdle, and at least ClaimIdle past now.
func (p *processor) deferredUntil(now time.Time, deferred []string, groups map[string]string, until map[string]time.Time, heldFirst map[string]heldEntry) map[string]time.Time {
	if len(deferred) == 0 {
		return until
	}
	later := func(a, b time.Time) time.Time {
		if b.After(a) {
			return b
		}
		return a
	}
	latest := map[string]time.Time{} // per message group
	for id, t := range until {
		latest[groups[id]] = later(latest[groups[id]], t)
	}
	marks := maps.Clone(until)
	if marks == nil {
		marks = map[string]time.Time{}
	}
	for _, id := range deferred {
		t := later(latest[groups[id]], now.Add(p.cfg.ClaimIdle))
		if first, ok := heldFirst[groups[id]]; ok {
			t = later(t, first.due.Add(p.cfg.ClaimIdle))
		}
		marks[id] = later(marks[id], t)
	}
	return marks
}

// markHeld tells the reconciler which events g's entries of are held for a
// later delivery, so that it publishes no copy of them (stream.Keys.Held).
// It is advice: when Redis does not take it, the worker goes on, and the
// worst is a copy the worker acknowledges as a duplicate or dead-letters.
func (p *processor) markHeld(ctx context.Context, g *stream.Group, until map[string]time.Time) {
	if err := p.rc.MarkHeld(ctx, g.Keys(), until); err != nil && ctx.Err() == nil {
		p.logger.Debug("error marking held events for the reconciler", zap.Int("events", len(until)), zap.Error(err))
	}
}

// tuneBatch shows the time of a batch's projection of n events that
// ended with err to the tuning loop (Config.AutoBatch): a success or a
// lock or statement timeout; other failures say nothing about the size.
func (p *processor) tuneBatch(ctx context.Context, n int, d time.Duration, err error) {
	tune := p.size.tune
	if tune == nil {
		return
	}
	timedOut := timeoutOf(ctx, err) != ""
	if err != nil && !timedOut {
		return
	}
	before := tune.size
	if size := tune.observe(n, d, timedOut); size != before {
		p.size.n.Store(int64(size))
		p.metrics.batchSizeNow.WithLabelValues(p.cfg.Consumer).Set(float64(size))
		p.logger.Info("batch size tuned", zap.Int("from", before), zap.Int("to", size),
			zap.Duration("target", p.cfg.ProjectionTarget), zap.Bool("timed_out", timedOut))
	}
}

// beginStatements are the statements that begin a projection transaction
// with PostgreSQL's lock_timeout and statement_timeout for the transaction
// (SET LOCAL; TimeoutOff leaves one out). beginSQL joins them into the one
// simple query a pgx.Tx begins with; the pipelined transaction queues them
// one by one (the extended protocol takes one statement per query).
func beginStatements(lock, statement time.Duration) []string {
	q := []string{"BEGIN"}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"lock_timeout", lock}, {"statement_timeout", statement}} {
		if t.d != TimeoutOff {
			q = append(q, fmt.Sprintf("SET LOCAL %s = %d", t.name, max(t.d.Milliseconds(), 1)))
		}
	}
	return q
}

// beginSQL is beginStatements as one query, in one round trip.
func beginSQL(lock, statement time.Duration) string {
	return strings.Join(beginStatements(lock, statement), "; ")
}

// recordBackoff is the pause after a record's n-th failed delivery:
// RecordBackoff doubled n-1 times, ±25% jitter, at most RecordBackoffMax.
func (p *processor) recordBackoff(n int64) time.Duration {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(p.cfg.RecordBackoff), backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.25), backoff.WithMaxInterval(RecordBackoffMax), backoff.WithMaxElapsedTime(0))
	d := b.NextBackOff()
	for i := int64(1); i < n; i++ {
		d = b.NextBackOff()
	}
	return d
}
