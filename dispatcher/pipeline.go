package dispatcher

// The relay pipeline: a batch is read while the one before it is added to
// the stream, and written to the store (merged with the batches added
// meanwhile) while the next ones are added.

import (
	"context"
	"sync"
	"time"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// marks is the store half of the relay pipeline: the store writes of the
// relayed batches (MarkRelayed: dispatchedAt and the checkpoint) run on a
// goroutine of their own while the relay reads and adds the next batches to
// the stream, so that a batch costs the longer of the two halves rather
// than their sum, and the XADD of the next batch never waits for the store.
//
// The batches handed over while a write runs are merged into the next
// write (their ids, the last batch's position), and while less than a
// batch waits, a write starts at most every MarkInterval: a feed that
// delivers a few entries at a time (single events) costs the store one
// write per MarkInterval, not one per batch. A merged write holds at most
// maxMerged ids; a hand-over beyond it waits for the write in flight.
// Merging and the cadence change only when an entry is marked, never what
// is in the stream: a crash before the write relays those entries again
// (duplicates, which the workers absorb), as a crash between a batch's
// XADD and its write always did.
//
// At most one write is in flight and the writes keep the order of the
// batches, so the checkpoint never moves backwards, and a batch is handed
// over only after its XADD went through, so nothing is marked or
// checkpointed past an entry that is not in the stream. A failed write
// stops the pipeline: the next hand-over or wait returns its error, and the
// batches handed over after it stay unmarked (relayed again later:
// duplicates, never loss).
//
// A leader uses one marks for its whole leadership (the relay loop alone
// hands over and waits) and waits for it before anything that must see
// every mark done: an idle checkpoint, a scan of the undispatched entries
// (catch-up, sweep), and its end; wait writes what is queued at once.
type marks struct {
	// write stores one merged write: the ids of its batches, the position
	// of the last one that has one (nil: keep the saved position), how many
	// batches it holds, on the context of the first.
	write     func(ctx context.Context, ids []string, pos store.Position, batches int) error
	interval  time.Duration // the least time between the starts of two writes of less than full ids
	full      int           // queued ids that start a write without waiting for interval
	maxMerged int           // the most ids one write holds

	mu      sync.Mutex
	changed *sync.Cond // running, queued or err changed
	running bool       // the write goroutine runs
	queued  *markWrite // handed over, not written yet
	flush   bool       // a wait: write what is queued now
	kick    chan struct{}
	last    time.Time // when the last write started
	err     error     // the failed write's error, for the next hand-over or wait
}

// markWrite is one store write of marks: merged batches.
type markWrite struct {
	ctx     context.Context
	ids     []string
	pos     store.Position
	batches int
	done    []func(error) // each batch's, called with the write's outcome
}

// newMarks returns the marks of one leadership; write is called for each
// merged write, one at a time.
func newMarks(write func(ctx context.Context, ids []string, pos store.Position, batches int) error, interval time.Duration, full int) *marks {
	m := &marks{write: write, interval: interval, full: full, maxMerged: max(2*full, BatchSizeDefault), kick: make(chan struct{}, 1)}
	m.changed = sync.NewCond(&m.mu)
	return m
}

// start hands over a relayed batch: its ids and the position after it
// (nil: keep the saved position); done is called with the outcome of the
// write that holds it. It waits only while maxMerged ids are queued
// already. When an earlier write failed, it returns that error, calls done
// with it, and the batch is never written.
func (m *marks) start(ctx context.Context, ids []string, pos store.Position, done func(error)) error {
	m.mu.Lock()
	for m.err == nil && m.queued != nil && len(m.queued.ids)+len(ids) > m.maxMerged {
		m.changed.Wait()
	}
	if err := m.err; err != nil {
		m.err = nil
		m.mu.Unlock()
		done(err)
		return err
	}
	q := m.queued
	if q == nil {
		q = &markWrite{ctx: ctx}
		m.queued = q
	}
	q.ids = append(q.ids, ids...)
	if pos != nil {
		q.pos = pos
	}
	q.batches++
	q.done = append(q.done, done)
	due := len(q.ids) >= m.full
	if !m.running {
		m.running = true
		go m.run()
	}
	m.mu.Unlock()
	if due {
		m.poke()
	}
	return nil
}

// poke wakes the write goroutine if it waits for the cadence.
func (m *marks) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// run writes the queued batches, one merged write at a time, until none is
// queued or a write fails.
func (m *marks) run() {
	m.mu.Lock()
	for {
		q := m.queued
		if q == nil {
			m.running = false
			m.changed.Broadcast()
			m.mu.Unlock()
			return
		}
		if wait := time.Until(m.last.Add(m.interval)); wait > 0 && !m.flush && len(q.ids) < m.full {
			m.mu.Unlock()
			timer := time.NewTimer(wait)
			select {
			case <-m.kick:
			case <-timer.C:
			}
			timer.Stop()
			m.mu.Lock()
			continue
		}
		m.queued = nil
		m.last = time.Now()
		m.changed.Broadcast() // room for hand-overs
		m.mu.Unlock()
		err := m.write(q.ctx, q.ids, q.pos, q.batches)
		for _, done := range q.done {
			done(err)
		}
		m.mu.Lock()
		if err != nil {
			m.err = err
			if q := m.queued; q != nil { // never written
				m.queued = nil
				for _, done := range q.done {
					done(err)
				}
			}
		}
	}
}

// wait writes what is queued at once, waits until every write ended and
// returns the error of a failed one.
func (m *marks) wait() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flush = true
	m.poke()
	for m.running {
		m.changed.Wait()
	}
	m.flush = false
	err := m.err
	m.err = nil
	return err
}

// waitInto waits for the writes and, when *err is nil, sets it to a failed
// write's error: for a deferred call at the end of a relay loop.
func (m *marks) waitInto(err *error) {
	if werr := m.wait(); *err == nil {
		*err = werr
	}
}

// batchRead is a batch read from the feed or the outbox: its entries, the
// feed's position right after them (nil for a page of the outbox), or the
// read's error.
type batchRead struct {
	entries []outbox.Entry
	pos     store.Position
	err     error
}

// batchReading is a read running in the background (readAhead), the read
// half of the relay pipeline: the next batch is read while this one is
// added to the stream. Like marks it belongs to one relay loop.
type batchReading struct {
	cancel context.CancelFunc
	done   chan batchRead
}

// readAhead runs read in the background on a context of ctx's.
func readAhead(ctx context.Context, read func(context.Context) batchRead) *batchReading {
	ctx, cancel := context.WithCancel(ctx)
	r := &batchReading{cancel: cancel, done: make(chan batchRead, 1)}
	go func() { r.done <- read(ctx) }()
	return r
}

// take waits for the read and returns what it read.
func (r *batchReading) take() batchRead {
	got := <-r.done
	r.cancel()
	return got
}

// abandon cancels the read, if any (r may be nil), and waits for it to
// end, so that nothing reads the feed or the outbox after the loop.
func (r *batchReading) abandon() {
	if r != nil {
		r.cancel()
		<-r.done
	}
}
