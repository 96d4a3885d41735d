package mongostore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"

	"github.com/outboxd/outboxd/store"
)

// loadEventsFinds runs LoadEvents of ids on ctx against a fresh fake
// replica set (or mongos) and returns the finds it sent, and what it read.
func loadEventsFinds(ctx context.Context, t *testing.T, mongos bool, ids []string) ([]fakeCommand, map[string]store.Loaded) {
	t.Helper()
	fs := newFakeServer(t, mongos)
	s := openFake(t, fs, Options{})
	fs.reset()
	got, err := s.LoadEvents(ctx, ids)
	require.NoError(t, err)
	return fs.commands("find"), got
}

// afterClusterTime returns the readConcern of a command: its level and its
// afterClusterTime (zero when it has none).
func afterClusterTime(t testing.TB, c fakeCommand) (string, primitive.Timestamp) {
	t.Helper()
	level, _ := c.lookup("readConcern", "level").StringValueOK()
	v := c.lookup("readConcern", "afterClusterTime")
	if v.Type == 0 {
		return level, primitive.Timestamp{}
	}
	ts, i, ok := v.TimestampOK()
	require.True(t, ok, "afterClusterTime is a timestamp: %s", c.Doc)
	return level, primitive.Timestamp{T: ts, I: i}
}

// TestLoadEventsReadsAfterTheClusterTime: through the driver, the finds of
// LoadEvents carry readConcern {level: majority, afterClusterTime} with the
// latest cluster time ctx carries (store.WithReadAfter, as the worker
// passes its messages' ReadAfter), on a replica set and through mongos
// (the read by keys and the read again by _id both); without a position,
// or with positions that are not the store's, they carry none. A server
// that refuses the time (InvalidOptions: its clock is behind it) is read
// again without it.
func TestLoadEventsReadsAfterTheClusterTime(t *testing.T) {
	t.Parallel()
	commit := primitive.Timestamp{T: uint32(time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC).Unix()), I: 7}
	earlier := primitive.Timestamp{T: commit.T - 1, I: 40}
	sameSecond := primitive.Timestamp{T: commit.T, I: 3}
	first := primitive.NewObjectID()
	ids := []string{first.Hex(), primitive.NewObjectID().Hex()}
	finds := func(t *testing.T, mongos bool, ctx context.Context) []fakeCommand {
		cmds, _ := loadEventsFinds(ctx, t, mongos, ids)
		return cmds
	}
	positions := []string{ClusterTimePosition(earlier), ClusterTimePosition(commit), "", ClusterTimePosition(sameSecond)}
	t.Run("ReplicaSet", func(t *testing.T) {
		t.Parallel()
		cmds := finds(t, false, store.WithReadAfter(context.Background(), positions...))
		require.Len(t, cmds, 1)
		level, at := afterClusterTime(t, cmds[0])
		require.Equal(t, "majority", level, "%s", cmds[0].Doc)
		require.Equal(t, commit, at, "the latest of the batch's commits: %s", cmds[0].Doc)
	})
	t.Run("MongosWithKeys", func(t *testing.T) {
		t.Parallel()
		ctx := store.WithEventKeys(store.WithReadAfter(context.Background(), positions...), map[string]string{ids[0]: "k0", ids[1]: "k1"})
		cmds := finds(t, true, ctx)
		require.Len(t, cmds, 2, "by the keys, then the missing by _id")
		for _, c := range cmds {
			level, at := afterClusterTime(t, c)
			require.Equal(t, "majority", level, "%s", c.Doc)
			require.Equal(t, commit, at, "%s", c.Doc)
		}
	})
	t.Run("WithoutPosition", func(t *testing.T) {
		t.Parallel()
		cmds := finds(t, false, context.Background())
		require.Len(t, cmds, 1)
		level, at := afterClusterTime(t, cmds[0])
		require.Equal(t, "majority", level)
		require.True(t, at.IsZero(), "no afterClusterTime: %s", cmds[0].Doc)
	})
	t.Run("NotTheStoresPositions", func(t *testing.T) {
		t.Parallel()
		cmds := finds(t, false, store.WithReadAfter(context.Background(), "", "42", "x.1", "0.5", "1.-1", "4294967296.1"))
		require.Len(t, cmds, 1)
		_, at := afterClusterTime(t, cmds[0])
		require.True(t, at.IsZero(), "no afterClusterTime: %s", cmds[0].Doc)
	})
	t.Run("RefusedTimeIsReadWithout", func(t *testing.T) {
		t.Parallel()
		fs := newFakeServer(t, false)
		s := openFake(t, fs, Options{})
		doc := bson.D{{Key: "_id", Value: first}, {Key: "idempotencyKey", Value: "k0"}, {Key: "sourceKey", Value: "s"},
			{Key: "deviceKey", Value: "d"}, {Key: "occurredAt", Value: time.Now()}, {Key: "createdAt", Value: time.Now()}, {Key: "payload", Value: bson.D{}}}
		found := fs.findOneIn(EventsCollection, doc)
		fs.handle("find", func(c fakeCommand) bson.D {
			if _, at := afterClusterTime(t, c); !at.IsZero() {
				return commandError(codeInvalidOptions, "InvalidOptions")
			}
			return found(c)
		})
		fs.reset()
		got, err := s.LoadEvents(store.WithReadAfter(context.Background(), ClusterTimePosition(commit)), ids[:1])
		require.NoError(t, err)
		require.Contains(t, got, ids[0])
		cmds := fs.commands("find")
		require.Len(t, cmds, 2)
		_, first := afterClusterTime(t, cmds[0])
		_, again := afterClusterTime(t, cmds[1])
		require.Equal(t, commit, first)
		require.True(t, again.IsZero(), "read again without the time: %s", cmds[1].Doc)
	})
}

// TestClusterTimePosition: a position reads back as the cluster time it
// was written from, and only the store's own form does.
func TestClusterTimePosition(t *testing.T) {
	t.Parallel()
	for _, ts := range []primitive.Timestamp{{T: 1, I: 0}, {T: 1796534400, I: 12}, {T: 1<<32 - 1, I: 1<<32 - 1}} {
		got, ok := parseClusterTime(ClusterTimePosition(ts))
		require.True(t, ok, "%v", ts)
		require.Equal(t, ts, got)
	}
	require.Equal(t, "1796534400.12", ClusterTimePosition(primitive.Timestamp{T: 1796534400, I: 12}))
	require.Empty(t, ClusterTimePosition(primitive.Timestamp{}))
	for _, s := range []string{"", "1", "1.", ".1", "0.1", "+1.1", "1.+1", "1.1.1", "a.b", "4294967296.0", "1.4294967296", " 1.1"} {
		_, ok := parseClusterTime(s)
		require.False(t, ok, "%q", s)
	}
	latest, ok := latestClusterTime([]string{"5.9", "x", "6.1", "6.0"})
	require.True(t, ok)
	require.Equal(t, primitive.Timestamp{T: 6, I: 1}, latest)
	_, ok = latestClusterTime([]string{"", "x"})
	require.False(t, ok)
}

// TestFeedEntriesCarryTheClusterTime: through the driver, an entry the
// change stream delivers carries its change event's clusterTime as its
// ReadAfter (ClusterTimePosition), for the message the dispatcher relays.
func TestFeedEntriesCarryTheClusterTime(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{})
	commit := primitive.Timestamp{T: uint32(time.Now().Unix()), I: 3}
	entry := bson.D{{Key: "_id", Value: primitive.NewObjectID()}, {Key: "eventId", Value: primitive.NewObjectID()},
		{Key: "stream", Value: "stream"}, {Key: "message", Value: "{}"}, {Key: "createdAt", Value: time.Now()}, {Key: "dispatchedAt", Value: nil}}
	event := bson.D{{Key: "_id", Value: bson.D{{Key: "_data", Value: "8200000002"}}}, {Key: "operationType", Value: "insert"},
		{Key: "clusterTime", Value: commit}, {Key: "fullDocument", Value: entry}}
	fs.handle("aggregate", func(c fakeCommand) bson.D {
		if _, ok := c.lookup("pipeline", "0", "$changeStream").DocumentOK(); !ok {
			return fs.byDefault(c)
		}
		reply := changeStreamReply("outboxd."+OutboxCollection, "firstBatch")
		cursor := reply[0].Value.(bson.D)
		cursor[2].Value = bson.A{event}
		return reply
	})
	f, err := s.OpenFeed(context.Background(), "stream", nil, store.FeedOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer f.Close(context.Background())
	got, err := f.Next(context.Background(), 10, time.Second)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, entry[0].Value.(primitive.ObjectID).Hex(), got[0].ID)
	require.Equal(t, ClusterTimePosition(commit), got[0].ReadAfter)
}

// readPreferenceOf returns a command's $readPreference (nil: none, which
// is the primary).
func readPreferenceOf(c fakeCommand) bson.Raw {
	d, ok := c.lookup("$readPreference").DocumentOK()
	if !ok {
		return nil
	}
	return d
}

// TestCountsReadFromASecondary: through the driver, every command of
// Counts (the estimated count, the counts, the oldest pending original's
// find) carries $readPreference {mode: secondaryPreferred,
// maxStalenessSeconds: 90} on a replica set and through mongos, so the
// scrapes stay off the primary; a caller that asks for current figures
// (store.WithCurrentCounts) and every other read go to the primary (no
// $readPreference); Options.CountsMaxStaleness sets the bound, negative
// keeps the counts on the primary, and below the server's 90 s is
// refused.
func TestCountsReadFromASecondary(t *testing.T) {
	t.Parallel()
	counts := func(t *testing.T, fs *fakeServer, s *Store, ctx context.Context) []fakeCommand {
		fs.reset()
		_, err := s.Counts(ctx)
		require.NoError(t, err)
		cmds := fs.commands()
		names := map[string]bool{}
		for _, c := range cmds {
			names[c.Name] = true
		}
		require.Equal(t, map[string]bool{"count": true, "aggregate": true, "find": true}, names, "the commands of Counts")
		return cmds
	}
	for _, mongos := range []bool{false, true} {
		name := "ReplicaSet"
		if mongos {
			name = "Mongos"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fs := newFakeServer(t, mongos)
			s := openFake(t, fs, Options{CountsTTL: -1})
			for _, c := range counts(t, fs, s, context.Background()) {
				rp := readPreferenceOf(c)
				require.NotNil(t, rp, "%s: %s", c.Name, c.Doc)
				mode, _ := rp.Lookup("mode").StringValueOK()
				require.Equal(t, "secondaryPreferred", mode, "%s", c.Doc)
				staleness, _ := rp.Lookup("maxStalenessSeconds").AsInt64OK()
				require.Equal(t, int64(90), staleness, "%s", c.Doc)
			}
			for _, c := range counts(t, fs, s, store.WithCurrentCounts(context.Background())) {
				require.Nil(t, readPreferenceOf(c), "current figures: the primary: %s", c.Doc)
			}
			fs.reset()
			_, err := s.LoadEvents(context.Background(), []string{primitive.NewObjectID().Hex()})
			require.NoError(t, err)
			for _, c := range fs.commands() {
				require.Nil(t, readPreferenceOf(c), "other reads: the primary: %s", c.Doc)
			}
		})
	}
	t.Run("Configured", func(t *testing.T) {
		t.Parallel()
		fs := newFakeServer(t, false)
		s := openFake(t, fs, Options{CountsTTL: -1, CountsMaxStaleness: 5 * time.Minute})
		for _, c := range counts(t, fs, s, context.Background()) {
			staleness, _ := readPreferenceOf(c).Lookup("maxStalenessSeconds").AsInt64OK()
			require.Equal(t, int64(300), staleness, "%s", c.Doc)
		}
	})
	t.Run("OnThePrimary", func(t *testing.T) {
		t.Parallel()
		fs := newFakeServer(t, false)
		s := openFake(t, fs, Options{CountsTTL: -1, CountsMaxStaleness: -1})
		for _, c := range counts(t, fs, s, context.Background()) {
			require.Nil(t, readPreferenceOf(c), "%s", c.Doc)
		}
	})
	t.Run("BelowTheServersLeast", func(t *testing.T) {
		t.Parallel()
		o := Options{CountsMaxStaleness: 30 * time.Second}
		require.ErrorContains(t, o.Validate(), "CountsMaxStaleness")
	})
}

// TestCurrentCountsSkipTheCache: a caller that asks for current figures
// reads them again within CountsTTL.
func TestCurrentCountsSkipTheCache(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, false)
	s := openFake(t, fs, Options{CountsTTL: time.Hour})
	ctx := context.Background()
	_, err := s.Counts(ctx)
	require.NoError(t, err)
	fs.reset()
	_, err = s.Counts(ctx)
	require.NoError(t, err)
	require.Empty(t, fs.commands(), "served from the cache")
	_, err = s.Counts(store.WithCurrentCounts(ctx))
	require.NoError(t, err)
	require.NotEmpty(t, fs.commands("count"), "read again")
}
