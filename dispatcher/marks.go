package dispatcher

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
