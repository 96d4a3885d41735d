package stream_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/stream"
)

type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestFailure(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tt := range []struct {
		name string
		err  error
		want failpolicy.Failure
	}{
		{"Refused", refused, failpolicy.Infrastructure(failpolicy.SourceRedis)},
		{"EOF", io.EOF, failpolicy.Infrastructure(failpolicy.SourceRedis)},
		{"Timeout", fmt.Errorf("x: %w", context.DeadlineExceeded), failpolicy.Infrastructure(failpolicy.SourceRedis)},
		{"Loading", redisErr("LOADING Redis is loading"), failpolicy.Infrastructure(failpolicy.SourceRedis)},
		{"ReadOnly", redisErr("READONLY You can't write against a read only replica."), failpolicy.Infrastructure(failpolicy.SourceRedis)},
		{"BusyScript", redisErr("BUSY Redis is busy running a script"), failpolicy.Infrastructure(failpolicy.SourceRedis)},
		{"WrongType", redisErr("WRONGTYPE Operation against a key"), failpolicy.Unknown(failpolicy.SourceRedis)},
		{"Breaker", gobreaker.ErrOpenState,
			failpolicy.Failure{Code: failpolicy.CodeBreakerOpen, Class: failpolicy.ClassInfrastructure, Source: failpolicy.SourceRedis}},
		{"PublishError", &stream.PublishError{Errs: []error{nil, refused}}, failpolicy.Infrastructure(failpolicy.SourceRedis)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, stream.Failure(tt.err))
		})
	}
	require.True(t, stream.IsNoGroup(fmt.Errorf("x: %w", redisErr("NOGROUP No such key 's' or consumer group 'g'"))))
	require.False(t, stream.IsNoGroup(redisErr("BUSYGROUP Consumer Group name already exists")))
}
