package worker

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/pgerr"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

// class is what the worker does about an error.
type class int

const (
	classOK class = iota
	// classInfra: not the record's fault (a store unreachable, restarting,
	// timing out, a circuit open): do not acknowledge, back off, retry;
	// never charge a record, never dead-letter.
	classInfra
	// classTxRetry: serialization failure or deadlock; run the transaction
	// again.
	classTxRetry
	// classRecord: the record fails by itself: dead-letter it, at once
	// (an unreadable entry, a structurally invalid original) or once its
	// delivery budget is spent (a projection error, a missing original).
	classRecord
	// classUnknown: an error no rule recognises. In the projection it is
	// charged to the records like classRecord (bounded by MaxDeliveries);
	// anywhere else it is retried like classInfra. Both count for the
	// streak rule, which halts it after StreakLimit in a row and raises
	// the alarm.
	classUnknown
	// classNoGroup: the consumer group is gone (Redis restarted empty);
	// recreate it and retry.
	classNoGroup
	// classCrash: an injected fault; stop at once as if crashed.
	classCrash
	// classStopped: the worker was asked to stop.
	classStopped
)

// Record failures found before any projection.
var (
	// errMissingOriginal reports a stream entry whose original is not in
	// the store (yet: a lagging secondary, a commit not visible yet).
	errMissingOriginal = errors.New("original not found")
	// errInvalidOriginal reports an original that cannot be projected as
	// stored.
	errInvalidOriginal = errors.New("original is structurally invalid")
	// errTrimmed reports a pending entry whose data the stream no longer
	// holds (trimmed or deleted).
	errTrimmed = errors.New("stream entry trimmed: its data is gone")
)

// sourceError says which dependency an error came from.
type sourceError struct {
	source string
	err    error
}

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// from marks err as coming from source (failpolicy.SourceRedis, …); nil
// stays nil.
func from(source string, err error) error {
	if err == nil {
		return nil
	}
	var se *sourceError
	if errors.As(err, &se) {
		return err
	}
	return &sourceError{source: source, err: err}
}

func sourceOf(err error) string {
	var se *sourceError
	if errors.As(err, &se) {
		return se.source
	}
	return ""
}

// classify is the one place that decides between retrying, charging a
// record, dead-lettering and stopping.
func classify(err error) class {
	if err == nil {
		return classOK
	}
	switch {
	case errors.Is(err, fault.ErrInjected):
		return classCrash
	case errors.Is(err, context.Canceled):
		return classStopped
	case stream.IsNoGroup(err):
		return classNoGroup
	case errors.Is(err, ErrRecord), errors.Is(err, outbox.ErrBadMessage), errors.Is(err, errTrimmed),
		errors.Is(err, errMissingOriginal), errors.Is(err, errInvalidOriginal):
		return classRecord
	}
	if code := pgerr.Code(err); code != "" {
		return pgClass(code)
	}
	if failpolicy.Unavailable(err) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || isConnectError(err) {
		return classInfra
	}
	if sourceOf(err) == failpolicy.SourceRedis {
		return classOfFailure(stream.Failure(err))
	}
	return classUnknown
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

func classOfFailure(f failpolicy.Failure) class {
	if f.Class == failpolicy.ClassInfrastructure {
		return classInfra
	}
	return classUnknown
}

// pgClass maps a PostgreSQL SQLSTATE to what the worker does.
func pgClass(code string) class {
	switch {
	case code == "40001" || code == "40P01":
		return classTxRetry
	// Data exceptions, integrity violations, WITH CHECK OPTION, triggered
	// data change violations, PL/pgSQL raising (a trigger refusing the
	// row): the row itself.
	case hasAnyPrefix(code, "22", "23", "44", "27", "P0"):
		return classRecord
	// Connection (08), resources (53), operator intervention and shutdown
	// (57), system (58), object in use and lock timeouts (55), a schema
	// missing or changed (42, 3D, 3F: a deploy fault, pause rather than
	// park everything), transaction state (25, 40), authorization (28),
	// unsupported features (0A), a prepared statement gone (26: the
	// connection was reset under the worker, DEALLOCATE or DISCARD ALL by a
	// pooler or a hook), internal errors (XX).
	case hasAnyPrefix(code, "08", "53", "57", "58", "55", "42", "3D", "3F", "25", "40", "28", "0A", "26", "XX"):
		return classInfra
	}
	return classUnknown
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// failureOf names err for the failure policy: the code (in the DLQ entry's
// reason, syncFailure.code and the metrics), the class and the source.
func failureOf(err error) failpolicy.Failure {
	source := sourceOf(err)
	record := func(code string) failpolicy.Failure {
		return failpolicy.Failure{Code: code, Class: failpolicy.ClassRecord, Source: source}
	}
	switch {
	case errors.Is(err, errTrimmed):
		return record("trimmed")
	case errors.Is(err, outbox.ErrBadMessage):
		return record("bad_message")
	case errors.Is(err, errMissingOriginal):
		return record("original_missing")
	case errors.Is(err, errInvalidOriginal):
		return record("invalid_original")
	case failpolicy.BreakerOpen(err):
		return failpolicy.Failure{Code: failpolicy.CodeBreakerOpen, Class: failpolicy.ClassInfrastructure, Source: source}
	case stream.IsNoGroup(err):
		return failpolicy.Failure{Code: "redis_nogroup", Class: failpolicy.ClassInfrastructure, Source: failpolicy.SourceRedis}
	case stream.IsOOM(err):
		return failpolicy.Full() // Redis full: hold, never halting
	}
	if code := pgerr.Code(err); code != "" {
		f := failpolicy.Failure{Code: "postgres_" + code, Class: failpolicy.ClassUnknown, Source: failpolicy.SourcePostgres}
		switch pgClass(code) {
		case classRecord:
			f.Class = failpolicy.ClassRecord
		case classInfra, classTxRetry:
			f.Class = failpolicy.ClassInfrastructure
		}
		return f
	}
	if errors.Is(err, ErrRecord) {
		return record("projection_failed")
	}
	if source == "" {
		source = "worker"
	}
	switch classify(err) {
	case classInfra, classTxRetry:
		return failpolicy.Infrastructure(source)
	case classRecord:
		return record("projection_failed")
	}
	return failpolicy.Unknown(source)
}

// PostgreSQL's timeouts, as outboxd_worker_pg_timeouts_total names them.
const (
	timeoutLock      = "lock"
	timeoutStatement = "statement"
)

// timeoutOf names the PostgreSQL timeout that ended err: timeoutLock
// (lock_timeout: 55P03) or timeoutStatement (statement_timeout: 57014
// while ctx is live, since a cancelled context ends a query with 57014
// too), or "".
func timeoutOf(ctx context.Context, err error) string {
	switch code := pgerr.Code(err); {
	case code == "55P03":
		return timeoutLock
	case code == "57014" && ctx.Err() == nil:
		return timeoutStatement
	}
	return ""
}

// reason names a dead-letter cause in the DLQ entry and in syncFailure.code.
func reason(err error) string { return failureOf(err).Code }
