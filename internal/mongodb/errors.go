package mongodb

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/x/mongo/driver/topology"
)

// codeChangeStreamHistoryLost is the server's ChangeStreamHistoryLost code.
const codeChangeStreamHistoryLost = 286

// IsDuplicateKey reports a unique-index violation on either engine.
func IsDuplicateKey(err error) bool {
	return err != nil && (mongo.IsDuplicateKeyError(err) || lungo.IsUniquenessError(err))
}

// IsHistoryLost reports that a change stream's resume point is no longer in
// the oplog: code 286 on a replica set, lungo.ErrLostOplogPosition on an open
// embedded stream, and the embedded engine's plain "unable to resume change
// stream" when Watch is given a token that left its oplog.
func IsHistoryLost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, lungo.ErrLostOplogPosition) {
		return true
	}
	var se mongo.ServerError
	if errors.As(err, &se) && (se.HasErrorCode(codeChangeStreamHistoryLost) || se.HasErrorLabel("NonResumableChangeStreamError")) {
		return true
	}
	return strings.Contains(err.Error(), "unable to resume change stream")
}

// IsUnavailable reports that MongoDB could not be reached (network, server
// selection, a closed embedded engine), as opposed to an error about the
// request itself.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, lungo.ErrEngineClosed) || errors.Is(err, mongo.ErrClientDisconnected) || mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var sse topology.ServerSelectionError
	return errors.As(err, &sse)
}
