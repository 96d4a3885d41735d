package dispatcher

// The relay pipeline: a batch is read while the one before it is added to
// the stream, and written to the store while the next is added.

import (
	"context"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// marks is the store half of the relay pipeline: a batch's store write
// (MarkRelayed: dispatchedAt and the checkpoint) runs in the background
// while the next batch is read and added to the stream, so that a batch
// costs the longer of the two halves rather than their sum.
//
// At most one write is in flight, and the next one starts only after it
// ended: the writes keep the order of the batches, so the checkpoint never
// moves backwards, and a batch is handed over only after its XADD went
// through, so nothing is marked or checkpointed past an entry that is not
// in the stream. A failed write stops the pipeline: the next hand-over or
// wait returns its error, and the batches added to the stream after it
// stay unmarked (relayed again later: duplicates, never loss).
//
// A leader uses one marks for its whole leadership (it is not for
// concurrent use: the relay loop alone calls it) and waits for it before
// anything that must see every mark done: an idle checkpoint, a scan of
// the undispatched entries (catch-up, sweep), and its end.
type marks struct {
	// pending receives the result of the write in flight; nil when none.
	pending chan error
}

// wait waits for the write in flight, if any, and returns its error.
func (m *marks) wait() error {
	if m.pending == nil {
		return nil
	}
	err := <-m.pending
	m.pending = nil
	return err
}

// start waits for the write in flight, then starts write in the
// background, unless the one in flight failed: then it returns that error
// and write never runs.
func (m *marks) start(write func() error) error {
	if err := m.wait(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- write() }()
	m.pending = done
	return nil
}

// waitInto waits for the write in flight and, when *err is nil, sets it
// to the write's error: for a deferred call at the end of a relay loop.
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
