package mongostore

import (
	"context"
	"slices"
	"time"

	"github.com/256dpi/lungo"
	"github.com/cenkalti/backoff/v4"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.mongodb.org/mongo-driver/mongo/readconcern"
	"go.mongodb.org/mongo-driver/mongo/readpref"
	"go.mongodb.org/mongo-driver/mongo/writeconcern"

	"github.com/outboxd/outboxd/internal/clock"
)

// Transaction pacing.
const (
	// txPauseFirst and txPauseLongest bound the jittered pause before a
	// transaction runs again after a transient error, or before its commit
	// is sent again after an unknown result.
	txPauseFirst   = 5 * time.Millisecond
	txPauseLongest = 200 * time.Millisecond
	// endTimeout bounds the abort of a failed transaction that is left for
	// the background because its caller is out of time.
	endTimeout = 5 * time.Second
)

// runTx runs fn in one transaction and commits it, all within ctx's
// deadline (Options.OpTimeout when ctx has none), the commit included. It
// is the driver's WithTransaction with a deadline and the loop bounded by
// it (v1.17's runs on for 120 s and commits without the caller's
// deadline):
//   - an error of fn or of the commit that carries TransientTransactionError
//     (a write conflict, an election, a network error before the commit)
//     runs the whole transaction again, in a new session, after a short
//     jittered pause, until ctx ends; request errors (see codeClasses) are
//     never run again;
//   - a commit whose result is unknown (UnknownTransactionCommitResult: a
//     write concern timeout, a network error) is sent again, until ctx
//     ends; then the caller gets an unavailable error and does not know
//     whether the transaction committed (ingest answers 503, and the
//     client's retry with the same idempotency key finds the original if it
//     did).
//
// fn's own errors come back as they are (when not run again); the
// transaction's errors are wrapped. A failed transaction is aborted: at
// once while ctx has time left, else in the background (bounded by
// endTimeout), so a caller at its deadline is answered then.
func (s *Store) runTx(ctx context.Context, what string, fn func(sc lungo.ISessionContext) error) error {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(txPauseFirst), backoff.WithMaxInterval(txPauseLongest),
		backoff.WithMaxElapsedTime(0))
	for {
		fromFn, err := s.txAttempt(ctx, bo, fn)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil && retryable(err) {
			if clock.Sleep(ctx, bo.NextBackOff()) == nil {
				continue
			}
		}
		if fromFn {
			return err
		}
		return wrap(err, "%s in a MongoDB transaction", what)
	}
}

// txAttempt runs one transaction; fromFn tells that err is fn's.
func (s *Store) txAttempt(ctx context.Context, bo backoff.BackOff, fn func(sc lungo.ISessionContext) error) (fromFn bool, err error) {
	sess, err := s.client.StartSession()
	if err != nil {
		return false, err
	}
	committed := false
	defer func() {
		if !committed {
			s.discard(ctx, sess)
		}
	}()
	if err := sess.StartTransaction(txOptions(ctx)); err != nil {
		return false, err
	}
	if err := lungo.WithSession(ctx, sess, fn); err != nil {
		s.lungoCommand("abortTransaction") // by discard
		return true, err
	}
	for {
		s.lungoCommand("commitTransaction")
		err := sess.CommitTransaction(ctx)
		if err == nil {
			committed = true
			sess.EndSession(ctx)
			return false, nil
		}
		// MaxTimeMSExpired: the server spent the time the deadline left.
		if ctx.Err() != nil || !hasLabel(err, labelUnknownCommit) || hasCode(err, codeMaxTimeMSExpired) {
			return false, err
		}
		if clock.Sleep(ctx, bo.NextBackOff()) != nil {
			return false, err
		}
	}
}

// txOptions bound a transaction's commit on the server (maxTimeMS of
// commitTransaction) by the time ctx has left.
func txOptions(ctx context.Context) *options.TransactionOptions {
	// The store's concerns whatever the client's defaults (NewFromClient).
	o := options.Transaction().SetWriteConcern(writeconcern.Majority()).SetReadConcern(readconcern.Majority()).
		SetReadPreference(readpref.Primary())
	if deadline, ok := ctx.Deadline(); ok {
		if left := time.Until(deadline).Round(time.Millisecond); left > 0 {
			o.SetMaxCommitTime(&left)
		}
	}
	return o
}

// discard ends sess, which aborts its transaction if it still runs: at
// once, bounded by ctx, while ctx has time left; else in the background,
// bounded by endTimeout (Close waits for it).
func (s *Store) discard(ctx context.Context, sess lungo.ISession) {
	if ctx.Err() == nil {
		sess.EndSession(ctx)
		return
	}
	s.background.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
		defer cancel()
		sess.EndSession(ctx)
	})
}

// hasCode reports whether err carries the server's error code.
func hasCode(err error, code int32) bool { return slices.Contains(serverCodes(err), code) }
