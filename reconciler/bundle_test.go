package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
)

// t0 is when every test's fake clock starts.
var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// Short thresholds keep the arithmetic readable; the clock is fake anyway.
const (
	minAge       = 5 * time.Minute
	requeueAfter = 30 * time.Minute
)

type testBundle struct {
	mongo  *testkit.Mongo
	rdb    redis.UniversalClient
	stream string
	clock  *clock.Fake
	faults *fault.Set
	writer *outbox.Writer
	reg    *prometheus.Registry
	seq    int
}

// setup gives a test its own MongoDB database, a unique stream on the test
// Redis and a fake clock at t0.
func setup(t *testing.T) *testBundle {
	t.Helper()
	m := testkit.NewMongo(t, nil)
	rdb, prefix := testkit.NewRedis(t)
	clk := clock.NewFake(t0)
	stream := prefix + ":" + outbox.StreamDefault
	return &testBundle{
		mongo: m, rdb: rdb, stream: stream, clock: clk, faults: &fault.Set{},
		writer: outbox.NewWriter(m.DB, &outbox.WriterConfig{Clock: clk, Stream: stream}),
		reg:    prometheus.NewRegistry(),
	}
}

// config returns the bundle's reconciler configuration.
func (b *testBundle) config() *reconciler.Config {
	return &reconciler.Config{
		Stream: b.stream, MinAge: minAge, RequeueAfter: requeueAfter,
		Clock: b.clock, Faults: b.faults, Registerer: b.reg,
	}
}

func (b *testBundle) reconciler(t *testing.T, cfg *reconciler.Config) *reconciler.Reconciler {
	t.Helper()
	if cfg == nil {
		cfg = b.config()
	}
	r, err := reconciler.New(b.mongo.DB, b.rdb, cfg, testkit.Logger(t))
	require.NoError(t, err)
	return r
}

// write stores one original stamped createdAt at the clock's time and
// returns its id.
func (b *testBundle) write(t *testing.T) primitive.ObjectID {
	t.Helper()
	b.seq++
	res, err := b.writer.Write(context.Background(), []outbox.Input{{
		SourceKey: "src", DeviceKey: fmt.Sprintf("d%04d", b.seq), OccurredAt: "2026-11-01T10:00:00Z",
	}})
	require.NoError(t, err)
	id, err := primitive.ObjectIDFromHex(res[0].ID)
	require.NoError(t, err)
	return id
}

// writeAged stores n originals, one a second apart, then moves the clock
// past MinAge.
func (b *testBundle) writeAged(t *testing.T, n int) []primitive.ObjectID {
	t.Helper()
	ids := make([]primitive.ObjectID, n)
	for i := range ids {
		ids[i] = b.write(t)
		b.clock.Advance(time.Second)
	}
	b.clock.Advance(minAge)
	return ids
}

func (b *testBundle) update(t *testing.T, id primitive.ObjectID, update bson.D) {
	t.Helper()
	res, err := b.mongo.DB.Collection(outbox.EventsCollection).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: id}}, update)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.MatchedCount)
}

func (b *testBundle) event(t *testing.T, id primitive.ObjectID) *outbox.Event {
	t.Helper()
	ev, err := outbox.FindEvent(context.Background(), b.mongo.DB, id.Hex())
	require.NoError(t, err)
	return ev
}

// published returns the event ids in the stream, in stream order, checking
// that every entry is a well-formed reconciler message.
func (b *testBundle) published(t *testing.T) []string {
	t.Helper()
	return streamIDs(t, b.rdb, b.stream)
}

func streamIDs(t *testing.T, rdb redis.UniversalClient, stream string) []string {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	require.NoError(t, err)
	ids := make([]string, len(entries))
	for i, e := range entries {
		msg, err := outbox.DecodeMessage(e.Values)
		require.NoError(t, err)
		require.Equal(t, outbox.OriginReconciler, msg.Origin)
		ids[i] = msg.EventID
	}
	return ids
}

func hexes(ids []primitive.ObjectID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.Hex()
	}
	return out
}

// metric returns the value of the reconciler series name whose labels
// include labels (pairs), or 0 when there is none.
func (b *testBundle) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := b.reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
