package mongostore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/x/mongo/driver/topology"

	"github.com/outboxd/outboxd/store"
)

// errClass is what an error of MongoDB means to the components.
type errClass int

const (
	// classOther: an error about the request itself (or unknown): running
	// it again fails the same way.
	classOther errClass = iota
	// classUnavailable: MongoDB cannot serve now (network, server
	// selection, an election, a shutdown, a time limit, a write concern not
	// satisfied in time, an overloaded server); retrying later helps.
	// Ingest answers 503 + Retry-After.
	classUnavailable
	// classPositionLost: a change stream's resume point is gone for good.
	classPositionLost
	// classDuplicateKey: a unique index refused the write.
	classDuplicateKey
)

// Server error codes outboxd names (src/mongo/base/error_codes.yml).
const (
	codeMaxTimeMSExpired            = 50
	codeWriteConcernTimeout         = 64 // WriteConcernFailed before 8.0
	codeWriteConflict               = 112
	codeNamespaceNotFound           = 26
	codeInvalidOptions              = 72
	codeTransactionTooLargeForCache = 388
)

// codeClasses classify the server's error codes by the categories of the
// server's error_codes.yml, so a code the server files under a category
// outboxd retries is retried however it arrives. Request errors win over
// error labels: running the same transaction again cannot make it smaller.
var codeClasses = map[int32]errClass{
	// NetworkError (and RetriableError).
	6:    classUnavailable, // HostUnreachable
	7:    classUnavailable, // HostNotFound
	89:   classUnavailable, // NetworkTimeout
	9001: classUnavailable, // SocketException
	// NotPrimaryError: an election, a step-down.
	189:   classUnavailable, // PrimarySteppedDown
	10107: classUnavailable, // NotWritablePrimary
	11602: classUnavailable, // InterruptedDueToReplStateChange
	13435: classUnavailable, // NotPrimaryNoSecondaryOk
	13436: classUnavailable, // NotPrimaryOrSecondary
	// ShutdownError.
	91:    classUnavailable, // ShutdownInProgress
	11600: classUnavailable, // InterruptedAtShutdown
	// ExceededTimeLimitError: the operation ran out of its time limit
	// (maxTimeMS, which outboxd derives from the caller's deadline; a
	// router's time limit on a shard) while the server was too slow.
	codeMaxTimeMSExpired: classUnavailable, // MaxTimeMSExpired
	202:                  classUnavailable, // NetworkInterfaceExceededTimeLimit (mongos)
	262:                  classUnavailable, // ExceededTimeLimit
	290:                  classUnavailable, // TransactionExceededLifetimeLimitSeconds
	// WriteConcernError, the timeout only (the other write-concern errors
	// are configuration errors): a majority did not acknowledge in time.
	codeWriteConcernTimeout: classUnavailable,
	// RetriableError without another category.
	134: classUnavailable, // ReadConcernMajorityNotAvailableYet
	402: classUnavailable, // ResourceExhausted
	// No category: a router that finds no primary for the read preference.
	133: classUnavailable, // FailedToSatisfyReadPreference
	// SystemOverloadedError (8.0 and later).
	433: classUnavailable, // AdmissionQueueOverflow
	449: classUnavailable, // RateLimitExceeded
	462: classUnavailable, // IngressRequestRateLimitExceeded

	// NonResumableChangeStreamError and the other codes of a resume point
	// that is gone: the same token never works again.
	280:   classPositionLost, // ChangeStreamFatalError
	286:   classPositionLost, // ChangeStreamHistoryLost
	260:   classPositionLost, // InvalidResumeToken
	136:   classPositionLost, // CappedPositionLost (the oplog moved past the cursor)
	40585: classPositionLost, // resume token not found (before 4.2)

	// Request errors: the same request fails the same way again.
	codeTransactionTooLargeForCache: classOther, // TransactionTooLargeForCache
	257:                             classOther, // TransactionTooLarge
	10334:                           classOther, // BSONObjectTooLarge
	2:                               classOther, // BadValue
	79:                              classOther, // UnknownReplWriteConcern
	100:                             classOther, // UnsatisfiableWriteConcern
}

// refusedTokenCodes are the server's answers to a resume token it cannot
// parse (a corrupt token, one of a newer version after a downgrade): the
// same token never works again, so a feed resumed from it has lost its
// position (the catch-up from the outbox relays what it missed). FailedToParse
// is no lost position elsewhere, so only the feed reads these (wrapFeed).
var refusedTokenCodes = []int32{9, 40649, 50795, 50796, 50854}

// wrapFeed is wrap for the errors of a change stream resumed from a token:
// a token the server refuses is a lost position.
func wrapFeed(err error, what string, args ...any) error {
	if err != nil && slices.ContainsFunc(serverCodes(err), func(c int32) bool { return slices.Contains(refusedTokenCodes, c) }) {
		return &Error{Op: fmt.Sprintf(what, args...), Kind: store.ErrPositionLost, Err: err}
	}
	return wrap(err, what, args...)
}

// unavailableLabels mark errors that a retry on another (or the same)
// primary can fix.
var unavailableLabels = []string{"RetryableWriteError", "ResumableChangeStreamError", labelTransient, "NetworkError"}

// The driver's transaction labels.
const (
	labelTransient     = "TransientTransactionError"
	labelUnknownCommit = "UnknownTransactionCommitResult"
)

// serverCodes returns the codes an error of the server carries (a command
// error's, or a write exception's write errors and write concern error).
func serverCodes(err error) []int32 {
	var codes []int32
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		codes = append(codes, ce.Code)
	}
	var we mongo.WriteException
	if errors.As(err, &we) {
		if we.WriteConcernError != nil {
			codes = append(codes, int32(we.WriteConcernError.Code))
		}
		for _, e := range we.WriteErrors {
			codes = append(codes, int32(e.Code))
		}
	}
	var be mongo.BulkWriteException
	if errors.As(err, &be) {
		if be.WriteConcernError != nil {
			codes = append(codes, int32(be.WriteConcernError.Code))
		}
		for _, e := range be.WriteErrors {
			codes = append(codes, int32(e.Code))
		}
	}
	return codes
}

// hasLabel reports whether err, or an error it wraps on any branch, carries
// the driver's error label.
func hasLabel(err error, label string) bool {
	if err == nil {
		return false
	}
	// The walk is the point: errors.As would stop at the first labeled error.
	if le, ok := err.(mongo.LabeledError); ok && le.HasErrorLabel(label) { //nolint:errorlint // see above
		return true
	}
	switch u := err.(type) { //nolint:errorlint // see above
	case interface{ Unwrap() error }:
		return hasLabel(u.Unwrap(), label)
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(u.Unwrap(), func(e error) bool { return hasLabel(e, label) })
	}
	return false
}

// classify is the one place that reads MongoDB errors, of the driver and
// of lungo.
func classify(err error) errClass {
	if err == nil {
		return classOther
	}
	if errors.Is(err, lungo.ErrLostOplogPosition) || strings.Contains(err.Error(), "unable to resume change stream") {
		return classPositionLost
	}
	if mongo.IsDuplicateKeyError(err) || lungo.IsUniquenessError(err) {
		return classDuplicateKey
	}
	codes := serverCodes(err)
	// A lost position, then a request error, decide before anything else.
	for _, want := range []errClass{classPositionLost, classOther} {
		if slices.ContainsFunc(codes, func(c int32) bool { k, ok := codeClasses[c]; return ok && k == want }) {
			return want
		}
	}
	if slices.ContainsFunc(codes, func(c int32) bool { return codeClasses[c] == classUnavailable }) {
		return classUnavailable
	}
	if slices.ContainsFunc(unavailableLabels, func(l string) bool { return hasLabel(err, l) }) {
		return classUnavailable
	}
	if errors.Is(err, lungo.ErrEngineClosed) || errors.Is(err, mongo.ErrClientDisconnected) ||
		mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return classUnavailable
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return classUnavailable
	}
	var sse topology.ServerSelectionError
	if errors.As(err, &sse) {
		return classUnavailable
	}
	return classOther
}

// retryable reports whether a transaction that failed with err may run
// again: the driver labelled it transient (a write conflict, an election,
// a network error before the commit) and it is no request error.
func retryable(err error) bool {
	return hasLabel(err, labelTransient) && classify(err) != classOther && classify(err) != classPositionLost
}

// Error is an error of the store: what it was doing, the port's sentinel
// its class adds (store.ErrUnavailable, store.ErrPositionLost,
// outbox.ErrDuplicateKey, or none) and the cause. It unwraps to the cause
// alone, on one chain, so the driver finds the cause's error labels
// (WithTransaction follows Unwrap() error only: an error joining two with
// "%w: %w" hides them); errors.Is matches the sentinel too.
type Error struct {
	// Op says what the store was doing ("inserting 3 originals").
	Op string
	// Kind is the port's sentinel, or nil.
	Kind error
	// Err is the cause.
	Err error
}

func (e *Error) Error() string {
	if e.Kind != nil {
		return fmt.Sprintf("error %s: %v: %v", e.Op, e.Kind, e.Err)
	}
	return fmt.Sprintf("error %s: %v", e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel.
func (e *Error) Is(target error) bool { return e.Kind != nil && target == e.Kind }

// wrap translates err at the port's boundary: "error doing what: err", with
// store.ErrUnavailable or store.ErrPositionLost matched where the class
// says so. A nil err stays nil.
func wrap(err error, what string, args ...any) error {
	if err == nil {
		return nil
	}
	var kind error
	switch classify(err) {
	case classUnavailable:
		kind = store.ErrUnavailable
	case classPositionLost:
		kind = store.ErrPositionLost
	}
	return &Error{Op: fmt.Sprintf(what, args...), Kind: kind, Err: err}
}
