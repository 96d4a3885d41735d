package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
)

// t0 is when every test's fake clock starts.
var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// Short thresholds keep the arithmetic readable; the clock is fake anyway.
const (
	minAge       = 5 * time.Minute
	requeueAfter = 30 * time.Minute
)

type testBundle struct {
	st     store.Store
	rdb    redis.UniversalClient
	stream string
	clock  *clock.Fake
	faults *fault.Set
	writer *outbox.Writer
	reg    *prometheus.Registry
	seq    int
	keys   []string // idempotency keys written, for the checker
}

// setup gives a test its own store, a unique stream on the test Redis and
// a fake clock at t0.
func setup(t *testing.T) *testBundle {
	t.Helper()
	st := testkit.NewStore(t)
	rdb, prefix := testkit.NewRedis(t)
	clk := clock.NewFake(t0)
	name := prefix + ":" + outbox.StreamDefault
	return &testBundle{
		st: st, rdb: rdb, stream: name, clock: clk, faults: &fault.Set{},
		writer: outbox.NewWriter(st, &outbox.WriterConfig{Now: clk.Now, Stream: name}),
		reg:    prometheus.NewRegistry(),
	}
}

// config returns the bundle's reconciler configuration.
func (b *testBundle) config() *reconciler.Config {
	cfg := &reconciler.Config{
		Stream: b.stream, MinAge: minAge, RequeueAfter: requeueAfter,
		Now: b.clock.Now, Registerer: b.reg,
	}
	reconciler.SetFaults(cfg, b.faults)
	return cfg
}

func (b *testBundle) reconciler(t *testing.T, cfg *reconciler.Config) *reconciler.Reconciler {
	t.Helper()
	if cfg == nil {
		cfg = b.config()
	}
	r, err := reconciler.New(b.st, b.rdb, cfg, testkit.Logger(t))
	require.NoError(t, err)
	return r
}

// write stores one original stamped createdAt at the clock's time and
// returns its id.
func (b *testBundle) write(t *testing.T) string {
	t.Helper()
	b.seq++
	res, err := b.writer.Write(context.Background(), []outbox.Input{{
		SourceKey: "src", DeviceKey: fmt.Sprintf("d%04d", b.seq), OccurredAt: "2026-11-01T10:00:00Z",
	}})
	require.NoError(t, err)
	b.keys = append(b.keys, res[0].IdempotencyKey)
	return res[0].ID
}

// writeAged stores n originals, one a second apart, then moves the clock
// past MinAge.
func (b *testBundle) writeAged(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.write(t)
		b.clock.Advance(time.Second)
	}
	b.clock.Advance(minAge)
	return ids
}

// claimAt claims id as a reconciler run at at would (lastRequeuedAt = at,
// requeueCount + 1), whatever claimed it before.
func (b *testBundle) claimAt(t *testing.T, id string, at time.Time) {
	t.Helper()
	c, err := b.st.Claim(context.Background(), []string{id}, at, at)
	require.NoError(t, err)
	require.Len(t, c.Events, 1, "claimed")
}

func (b *testBundle) park(t *testing.T, id, category string) {
	t.Helper()
	ok, err := b.st.Park(context.Background(), id, outbox.SyncFailure{Category: category, Code: "c", At: t0, Deliveries: 3})
	require.NoError(t, err)
	require.True(t, ok)
}

func (b *testBundle) markSynced(t *testing.T, id string, at time.Time) {
	t.Helper()
	n, err := b.st.MarkSynced(context.Background(), []string{id}, at)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

func (b *testBundle) event(t *testing.T, id string) *outbox.Event {
	t.Helper()
	return testkit.Event(t, b.st, id)
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

// metric returns the value of the reconciler series name whose labels
// include labels (pairs), or 0 when there is none.
func (b *testBundle) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testkit.Metric(t, b.reg, name, labels...)
}

// histogram returns the sample count and sum of the histogram name.
func (b *testBundle) histogram(t *testing.T, name string) (uint64, float64) {
	t.Helper()
	return histogram(t, b.reg, name)
}

// histogram returns the sample count and sum of the histogram name of g.
func histogram(t *testing.T, g prometheus.Gatherer, name string) (uint64, float64) {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return 0, 0
}
