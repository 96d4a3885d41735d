package stream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

func TestPublisher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	day := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	event := func(key string) *outbox.Event {
		return &outbox.Event{ID: outbox.NewEventID(), IdempotencyKey: key, SourceKey: "s", DeviceKey: "d", OccurredAt: day, CreatedAt: day}
	}

	t.Run("PublishesMessagesWithTheirOrigin", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		p := b.c.Publisher(b.keys, nil, nil)
		events := []*outbox.Event{event("a"), event("b")}
		require.NoError(t, p.PublishEvents(ctx, events, outbox.OriginReplay))
		require.NoError(t, p.Publish(ctx, []string{events[0].Message(outbox.OriginOutbox).Encode()}))
		require.NoError(t, p.Publish(ctx, nil), "nothing to publish")
		msgs, err := b.rdb.XRange(ctx, b.keys.Stream(), "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, msgs, 3)
		for i, want := range []struct {
			id     string
			origin outbox.Origin
		}{{events[0].ID, outbox.OriginReplay}, {events[1].ID, outbox.OriginReplay}, {events[0].ID, outbox.OriginOutbox}} {
			require.Len(t, msgs[i].Values, 1, "one field: the payload")
			m, err := stream.Entry{ID: msgs[i].ID, Values: msgs[i].Values}.Message()
			require.NoError(t, err)
			require.Equal(t, want.id, m.EventID)
			require.Equal(t, want.origin, m.Origin)
		}
	})

	t.Run("LengthPolicy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &stream.Config{MaxLen: 10})
		p := b.c.Publisher(b.keys, nil, nil)
		for range 50 {
			require.NoError(t, p.PublishEvents(ctx, []*outbox.Event{event("k"), event("k")}, outbox.OriginOutbox))
		}
		n, err := b.c.Len(ctx, b.keys.Stream())
		require.NoError(t, err)
		require.Less(t, n, int64(100), "trimmed (approximately)")
		require.GreaterOrEqual(t, n, int64(10), "MAXLEN ~ keeps at least MaxLen")

		_, err = stream.NewClient(b.rdb, &stream.Config{MaxLen: -1})
		require.ErrorContains(t, err, "MaxLen")
		_, err = stream.NewClient(nil, nil)
		require.Error(t, err)
	})

	t.Run("FailuresSayWhichMessages", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		require.NoError(t, b.rdb.Set(ctx, b.keys.Stream(), "not a stream", 0).Err())
		err := b.c.Publisher(b.keys, nil, nil).Publish(ctx, []string{"{}", "{}"})
		var pe *stream.PublishError
		require.ErrorAs(t, err, &pe)
		require.Len(t, pe.Errs, 2)
		require.False(t, stream.Added(err, 0))
		require.False(t, stream.Added(err, 1))
		require.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "Unwrap gives the reply: %v", err)
		require.Equal(t, failpolicy.Unknown(failpolicy.SourceRedis), stream.Failure(err))

		require.True(t, stream.Added(nil, 0))
		partial := &stream.PublishError{Errs: []error{nil, errors.New("x")}}
		require.True(t, stream.Added(partial, 0))
		require.False(t, stream.Added(partial, 1))
		require.False(t, stream.Added(errors.New("refused"), 0))
	})

	t.Run("BehindTheBreaker", func(t *testing.T) {
		t.Parallel()
		srv := testkit.NewRedisServer(t)
		c, err := stream.NewClient(srv.Client(), nil)
		require.NoError(t, err)
		state := prometheus.NewGauge(prometheus.GaugeOpts{Name: "state"})
		reg := prometheus.NewRegistry()
		reg.MustRegister(state)
		p := c.Publisher(stream.NewKeys(testkit.Name("s"), ""), &stream.PublisherConfig{
			Breaker: &failpolicy.BreakerConfig{Name: "redis", Failures: 2, Timeout: time.Hour, State: state},
		}, testkit.Logger(t))
		msgs := []string{event("k").Message(outbox.OriginOutbox).Encode()}
		require.NoError(t, p.Publish(ctx, msgs))
		srv.Stop()
		for range 2 {
			err := p.Publish(ctx, msgs)
			require.Error(t, err)
			require.False(t, failpolicy.BreakerOpen(err))
			require.Equal(t, failpolicy.Infrastructure(failpolicy.SourceRedis), stream.Failure(err))
		}
		err = p.Publish(ctx, msgs)
		require.True(t, failpolicy.BreakerOpen(err), "open after 2 failures: %v", err)
		require.False(t, stream.Added(err, 0))
		require.Equal(t, failpolicy.CodeBreakerOpen, stream.Failure(err).Code)
		require.Equal(t, 2.0, testkit.Metric(t, reg, "state"), "open")
	})
}

// TestPublishReachesABlockedReaderWhole: a consumer blocked on the stream
// gets every message of one Publish in one read (the XADDs run in
// MULTI/EXEC), not the first one alone.
func TestPublishReachesABlockedReaderWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testkit.NewRedisServer(t) // of its own: it counts its blocked clients
	c, err := stream.NewClient(srv.Client(), nil)
	require.NoError(t, err)
	keys := stream.NewKeys(testkit.Name("s"), "g")
	g := c.Group(keys, "c")
	_, err = g.Ensure(ctx)
	require.NoError(t, err)
	type read struct {
		entries []stream.Entry
		err     error
	}
	got := make(chan read, 1)
	go func() {
		entries, err := g.Read(ctx, ">", 100, 10*time.Second)
		got <- read{entries, err}
	}()
	require.Eventually(t, func() bool {
		info, err := srv.Client().Info(ctx, "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:1\r\n")
	}, 5*time.Second, 5*time.Millisecond, "the reader blocks")
	msgs := make([]string, 20)
	for i := range msgs {
		msgs[i] = (&outbox.Event{ID: outbox.NewEventID(), IdempotencyKey: fmt.Sprint("k", i), SourceKey: "s", DeviceKey: "d"}).Message(outbox.OriginOutbox).Encode()
	}
	require.NoError(t, c.Publisher(keys, nil, nil).Publish(ctx, msgs))
	r := <-got
	require.NoError(t, r.err)
	require.Len(t, r.entries, len(msgs), "one read gets the whole publish")
}
