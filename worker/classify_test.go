package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/256dpi/lungo"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/outbox"
)

type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestClassify(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("error projecting: %w", &pgconn.PgError{Code: code}) }
	for _, tt := range []struct {
		name string
		err  error
		want class
	}{
		{"Nil", nil, classOK},
		{"Injected", fmt.Errorf("x: %w", fault.ErrInjected), classCrash},
		{"Canceled", fmt.Errorf("x: %w", context.Canceled), classStopped},
		{"DeadlineIsInfra", context.DeadlineExceeded, classInfra},
		{"NoGroup", redisErr("NOGROUP No such key 's' or consumer group 'g'"), classNoGroup},
		{"RedisDown", errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"), classInfra},
		{"BadMessage", fmt.Errorf("%w: no payload", outbox.ErrBadMessage), classRecord},
		{"MissingOriginal", fmt.Errorf("%w: e", errMissingOriginal), classRecord},
		{"InvalidOriginal", fmt.Errorf("%w: e", errInvalidOriginal), classRecord},
		{"ProjectorSaysRecord", fmt.Errorf("%w: no", ErrRecord), classRecord},
		{"MongoClosed", lungo.ErrEngineClosed, classInfra},
		{"PostgresConnection", pg("08006"), classInfra},
		{"PostgresAdminShutdown", pg("57P01"), classInfra},
		{"PostgresCannotConnectNow", pg("57P03"), classInfra},
		{"PostgresTooManyConnections", pg("53300"), classInfra},
		{"PostgresUndefinedTable", pg("42P01"), classInfra},
		{"Serialization", pg("40001"), classTxRetry},
		{"Deadlock", pg("40P01"), classTxRetry},
		{"DataException", pg("22P02"), classRecord},
		{"NotNullViolation", pg("23502"), classRecord},
		{"CircuitOpen", gobreaker.ErrOpenState, classInfra},
		{"Unknown", errors.New("something odd"), classInfra},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, classify(tt.err))
		})
	}
}
