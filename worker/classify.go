package worker

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// class is what the worker does about an error.
type class int

const (
	classOK class = iota
	// classInfra: not the record's fault (a store unreachable, restarting,
	// timing out, or an unknown error): do not acknowledge, back off, retry;
	// never dead-letter.
	classInfra
	// classTxRetry: serialization failure or deadlock; run the transaction
	// again.
	classTxRetry
	// classRecord: the record can never succeed; dead-letter it (at once,
	// or after MaxDeliveries for projection errors).
	classRecord
	// classNoGroup: the consumer group is gone (Redis restarted empty);
	// recreate it and retry.
	classNoGroup
	// classCrash: an injected fault; stop at once as if crashed.
	classCrash
	// classStopped: the worker was asked to stop.
	classStopped
)

// errMissingOriginal reports a stream entry whose original is not in the store.
var errMissingOriginal = errors.New("original not found")

// errInvalidOriginal reports an original that cannot be projected as stored.
var errInvalidOriginal = errors.New("original is structurally invalid")

// classify is the one place that decides between retrying, dead-lettering
// and stopping. Unknown errors count as infrastructure failures: pausing is
// safer than parking a record that was never at fault.
func classify(err error) class {
	if err == nil {
		return classOK
	}
	switch {
	case errors.Is(err, fault.ErrInjected):
		return classCrash
	case errors.Is(err, context.Canceled):
		return classStopped
	case redis.HasErrorPrefix(err, "NOGROUP"):
		return classNoGroup
	case errors.Is(err, ErrRecord), errors.Is(err, outbox.ErrBadMessage),
		errors.Is(err, errMissingOriginal), errors.Is(err, errInvalidOriginal):
		return classRecord
	case store.IsUnavailable(err), pgconn.Timeout(err):
		return classInfra
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == "40001" || code == "40P01":
			return classTxRetry
		case strings.HasPrefix(code, "22"), strings.HasPrefix(code, "23"):
			// Data exceptions and integrity violations: the row itself.
			return classRecord
		default:
			// 08 connection, 57P0x shutdown, 53 resources, 55P03 lock
			// timeout, 42 schema (a deploy fault: pause, do not park).
			return classInfra
		}
	}
	return classInfra
}

// reason names a dead-letter cause in the DLQ entry and in syncFailure.code.
func reason(err error) string {
	switch {
	case errors.Is(err, outbox.ErrBadMessage):
		return "bad_message"
	case errors.Is(err, errMissingOriginal):
		return "original_missing"
	case errors.Is(err, errInvalidOriginal):
		return "invalid_original"
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return "postgres_" + pgErr.Code
	}
	return "projection_failed"
}
