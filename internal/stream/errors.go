package stream

import (
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/failpolicy"
)

// Failure classifies an error of a Redis command for the failure policy:
// an outage (the network, a closed client, an exhausted pool, a server
// loading, read-only, without its master, out of clients, busy, a cluster
// down, a refusing circuit) or an unknown reply (WRONGTYPE, a syntax error,
// …), or a hold: Redis over its maxmemory refusing writes (IsOOM,
// failpolicy.Full: infrastructure, never counted by the streak rule). It
// is the one place that reads go-redis's errors for the policy.
func Failure(err error) failpolicy.Failure {
	switch {
	case IsOOM(err):
		return failpolicy.Full()
	case failpolicy.BreakerOpen(err):
		return failpolicy.Failure{Code: failpolicy.CodeBreakerOpen, Class: failpolicy.ClassInfrastructure, Source: failpolicy.SourceRedis}
	case failpolicy.Unavailable(err), errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted), redis.IsLoadingError(err), redis.IsReadOnlyError(err),
		redis.IsMasterDownError(err), redis.IsMaxClientsError(err), redis.IsTryAgainError(err),
		redis.IsClusterDownError(err), redis.HasErrorPrefix(err, "BUSY"):
		return failpolicy.Infrastructure(failpolicy.SourceRedis)
	}
	return failpolicy.Unknown(failpolicy.SourceRedis)
}

// IsNoGroup reports a NOGROUP reply: the consumer group, or its stream, is
// gone (Redis restarted empty, or the keys were evicted).
func IsNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// isNoKey reports the reply to XINFO of a key that does not exist.
// (go-redis strips the "ERR " of the reply before the prefix test.)
func isNoKey(err error) bool { return redis.HasErrorPrefix(err, "no such key") }
