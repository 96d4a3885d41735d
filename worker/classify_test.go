package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/256dpi/lungo"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestClassify(t *testing.T) {
	t.Parallel()
	pg := func(code string) error {
		return from(failpolicy.SourcePostgres, fmt.Errorf("error projecting: %w", &pgconn.PgError{Code: code}))
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tt := range []struct {
		name  string
		err   error
		want  class
		code  string
		class string
	}{
		{"Nil", nil, classOK, "", ""},
		{"Injected", fmt.Errorf("x: %w", fault.ErrInjected), classCrash, "", ""},
		{"Canceled", fmt.Errorf("x: %w", context.Canceled), classStopped, "", ""},
		{"DeadlineIsInfra", from(failpolicy.SourceStore, context.DeadlineExceeded), classInfra, "store_unavailable", failpolicy.ClassInfrastructure},
		{"NoGroup", redisErr("NOGROUP No such key 's' or consumer group 'g'"), classNoGroup, "redis_nogroup", failpolicy.ClassInfrastructure},
		{"RedisDown", from(failpolicy.SourceRedis, refused), classInfra, "redis_unavailable", failpolicy.ClassInfrastructure},
		{"RedisEOF", from(failpolicy.SourceRedis, io.EOF), classInfra, "redis_unavailable", failpolicy.ClassInfrastructure},
		{"RedisLoading", from(failpolicy.SourceRedis, redisErr("LOADING Redis is loading the dataset in memory")), classInfra, "redis_unavailable", failpolicy.ClassInfrastructure},
		{"RedisWrongType", from(failpolicy.SourceRedis, redisErr("WRONGTYPE Operation against a key holding the wrong kind of value")), classUnknown, "redis_unknown", failpolicy.ClassUnknown},
		{"BadMessage", fmt.Errorf("%w: no payload", outbox.ErrBadMessage), classRecord, "bad_message", failpolicy.ClassRecord},
		{"Trimmed", fmt.Errorf("%w: 1-0", errTrimmed), classRecord, "trimmed", failpolicy.ClassRecord},
		{"MissingOriginal", fmt.Errorf("%w: e", errMissingOriginal), classRecord, "original_missing", failpolicy.ClassRecord},
		{"InvalidOriginal", fmt.Errorf("%w: e", errInvalidOriginal), classRecord, "invalid_original", failpolicy.ClassRecord},
		{"ProjectorSaysRecord", from(failpolicy.SourcePostgres, fmt.Errorf("%w: no", ErrRecord)), classRecord, "projection_failed", failpolicy.ClassRecord},
		{"StoreUnavailable", from(failpolicy.SourceStore, fmt.Errorf("x: %w: %w", store.ErrUnavailable, lungo.ErrEngineClosed)), classInfra, "store_unavailable", failpolicy.ClassInfrastructure},
		{"StoreUnknown", from(failpolicy.SourceStore, errors.New("no such table")), classUnknown, "store_unknown", failpolicy.ClassUnknown},
		{"PostgresConnect", from(failpolicy.SourcePostgres, &pgconn.ConnectError{Config: &pgconn.Config{}}), classInfra, "postgres_unavailable", failpolicy.ClassInfrastructure},
		{"PostgresConnClosed", from(failpolicy.SourcePostgres, pgconn.ErrConnClosed), classInfra, "postgres_unavailable", failpolicy.ClassInfrastructure},
		{"PostgresReset", from(failpolicy.SourcePostgres, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), classInfra, "postgres_unavailable", failpolicy.ClassInfrastructure},
		{"PostgresConnection", pg("08006"), classInfra, "postgres_08006", failpolicy.ClassInfrastructure},
		{"PostgresAdminShutdown", pg("57P01"), classInfra, "postgres_57P01", failpolicy.ClassInfrastructure},
		{"PostgresCannotConnectNow", pg("57P03"), classInfra, "postgres_57P03", failpolicy.ClassInfrastructure},
		{"PostgresTooManyConnections", pg("53300"), classInfra, "postgres_53300", failpolicy.ClassInfrastructure},
		{"PostgresLockTimeout", pg("55P03"), classInfra, "postgres_55P03", failpolicy.ClassInfrastructure},
		{"PostgresUndefinedTable", pg("42P01"), classInfra, "postgres_42P01", failpolicy.ClassInfrastructure},
		{"PostgresInternal", pg("XX000"), classInfra, "postgres_XX000", failpolicy.ClassInfrastructure},
		{"PreparedStatementGone", pg("26000"), classInfra, "postgres_26000", failpolicy.ClassInfrastructure},
		{"Serialization", pg("40001"), classTxRetry, "postgres_40001", failpolicy.ClassInfrastructure},
		{"Deadlock", pg("40P01"), classTxRetry, "postgres_40P01", failpolicy.ClassInfrastructure},
		{"DataException", pg("22P02"), classRecord, "postgres_22P02", failpolicy.ClassRecord},
		{"NulInJSONB", pg("22P05"), classRecord, "postgres_22P05", failpolicy.ClassRecord},
		{"NotNullViolation", pg("23502"), classRecord, "postgres_23502", failpolicy.ClassRecord},
		{"TriggerRaised", pg("P0001"), classRecord, "postgres_P0001", failpolicy.ClassRecord},
		{"PostgresUnknownCode", pg("HV000"), classUnknown, "postgres_HV000", failpolicy.ClassUnknown},
		{"CircuitOpen", from(failpolicy.SourcePostgres, gobreaker.ErrOpenState), classInfra, failpolicy.CodeBreakerOpen, failpolicy.ClassInfrastructure},
		{"HalfOpenBusy", from(failpolicy.SourceStore, gobreaker.ErrTooManyRequests), classInfra, failpolicy.CodeBreakerOpen, failpolicy.ClassInfrastructure},
		{"ProjectorUnknown", from(failpolicy.SourcePostgres, errors.New("something odd")), classUnknown, "postgres_unknown", failpolicy.ClassUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, classify(tt.err))
			if tt.err == nil || tt.code == "" {
				return
			}
			f := failureOf(tt.err)
			require.Equal(t, tt.code, f.Code)
			require.Equal(t, tt.class, f.Class)
		})
	}
}

func TestRecordBackoff(t *testing.T) {
	t.Parallel()
	p := &processor{shared: &shared{cfg: (&Config{}).withDefaults()}}
	for n, want := range map[int64]float64{1: 1, 2: 2, 3: 4, 4: 8} {
		for range 20 {
			d := p.recordBackoff(n).Seconds()
			require.InDelta(t, want, d, want*0.25+1e-9, "delivery %d", n)
		}
	}
	p.cfg.RecordBackoff = RecordBackoffMax
	require.LessOrEqual(t, p.recordBackoff(10), RecordBackoffMax+RecordBackoffMax/4)
}
