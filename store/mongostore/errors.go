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
	// classOther: an error about the request itself (or unknown).
	classOther errClass = iota
	// classUnavailable: MongoDB cannot serve now (network, server
	// selection, an election, a shutdown, a write concern not satisfied in
	// time); retrying later helps. Ingest answers 503 + Retry-After.
	classUnavailable
	// classPositionLost: a change stream's resume point is gone for good.
	classPositionLost
	// classDuplicateKey: a unique index refused the write.
	classDuplicateKey
)

// Server error codes (src/mongo/base/error_codes.yml).
const (
	codeHostUnreachable                 = 6
	codeHostNotFound                    = 7
	codeExceededTimeLimit               = 50
	codeWriteConcernFailed              = 64
	codeNetworkTimeout                  = 89
	codeShutdownInProgress              = 91
	codePrimarySteppedDown              = 189
	codeInvalidResumeToken              = 260
	codeExceededTimeLimit262            = 262
	codeChangeStreamFatalError          = 280
	codeChangeStreamHistoryLost         = 286
	codeSocketException                 = 9001
	codeNotWritablePrimary              = 10107
	codeInterruptedAtShutdown           = 11600
	codeInterruptedDueToReplStateChange = 11602
	codeNotPrimaryNoSecondaryOk         = 13435
	codeNotPrimaryOrSecondary           = 13436
	codeResumeTokenNotFound             = 40585
)

// unavailableCodes are the server codes of an election, a step-down, a
// shutdown or a network fault: the driver's retryable-error list
// (retryable-writes spec) plus MaxTimeMSExpired and WriteConcernFailed
// (wtimeout: a majority did not acknowledge in time).
var unavailableCodes = []int32{
	codeHostUnreachable, codeHostNotFound, codeExceededTimeLimit, codeWriteConcernFailed, codeNetworkTimeout,
	codeShutdownInProgress, codePrimarySteppedDown, codeExceededTimeLimit262, codeSocketException,
	codeNotWritablePrimary, codeInterruptedAtShutdown, codeInterruptedDueToReplStateChange,
	codeNotPrimaryNoSecondaryOk, codeNotPrimaryOrSecondary,
}

// positionLostCodes are the only codes that mean a resume point is gone:
// ChangeStreamHistoryLost (286), ChangeStreamFatalError (280),
// InvalidResumeToken (260) and 40585 (resume token not found). A
// ResumableChangeStreamError or an election is not a lost position.
var positionLostCodes = []int32{codeChangeStreamHistoryLost, codeChangeStreamFatalError, codeInvalidResumeToken, codeResumeTokenNotFound}

// unavailableLabels mark errors that a retry on another (or the same)
// primary can fix.
var unavailableLabels = []string{"RetryableWriteError", "ResumableChangeStreamError", "TransientTransactionError", "NetworkError"}

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
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, c := range positionLostCodes {
			if se.HasErrorCode(int(c)) {
				return classPositionLost
			}
		}
		for _, c := range unavailableCodes {
			if se.HasErrorCode(int(c)) {
				return classUnavailable
			}
		}
		if slices.ContainsFunc(unavailableLabels, se.HasErrorLabel) {
			return classUnavailable
		}
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

// wrap translates err at the port's boundary: "error doing what: err", with
// store.ErrUnavailable, store.ErrPositionLost or outbox-level sentinels
// added where the class says so. A nil err stays nil.
func wrap(err error, what string, args ...any) error {
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf(what, args...)
	switch classify(err) {
	case classUnavailable:
		return fmt.Errorf("error %s: %w: %w", msg, store.ErrUnavailable, err)
	case classPositionLost:
		return fmt.Errorf("error %s: %w: %w", msg, store.ErrPositionLost, err)
	}
	return fmt.Errorf("error %s: %w", msg, err)
}
