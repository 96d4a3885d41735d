package dispatcher_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"

	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/mongostore"
)

// writerProcess stands for one ingest process on MongoDB: its entries'
// ObjectIDs carry its process bytes (the driver draws five random bytes per
// process) and its own counter.
type writerProcess struct {
	process [5]byte
	counter uint32
}

// nextID returns the writer's next ObjectID made in the second sec.
func (w *writerProcess) nextID(sec uint32) primitive.ObjectID {
	var id primitive.ObjectID
	binary.BigEndian.PutUint32(id[0:4], sec)
	copy(id[4:9], w.process[:])
	w.counter++
	id[9], id[10], id[11] = byte(w.counter>>16), byte(w.counter>>8), byte(w.counter)
	return id
}

// TestOrderKeptAcrossRestartsWithTwoWriters: two ingest processes commit a
// device's entries alternately within one second, so their ObjectID order
// (all of the process with the lower random bytes first) is not their
// commit order; the dispatcher is stopped while they write and restarted.
// Each device's entries reach the stream in commit order, which --ordered
// workers project in: the resumed change stream relays them, not a
// catch-up in _id order (which relayed every second entry first).
func TestOrderKeptAcrossRestartsWithTwoWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &setupOpts{kind: kindMongo})
	outboxColl := mongoseam.Database(b.mongo).Collection(mongostore.OutboxCollection)
	writers := []*writerProcess{{process: [5]byte{0xff, 0xff, 0xff, 0xff, 0xff}}, {process: [5]byte{}}}
	place := map[string]string{} // event id -> device/index, in commit order per device
	var written []string

	d := b.start(b.config())
	warm := b.write(1, 1)
	b.waitRelayed(warm, 10*time.Second)
	require.Eventually(t, func() bool { return b.state().Position != nil }, 10*time.Second, 10*time.Millisecond,
		"the dispatcher checkpoints a resume token")

	for round := range 3 {
		require.NoError(t, d.Stop(ctx))
		sec := uint32(time.Now().Unix())
		for i := range 6 {
			for _, device := range []string{"d1", "d2"} {
				w := writers[i%2] // the two processes take turns on each device
				eventID := primitive.NewObjectID()
				now := time.Now().UTC()
				msg := outbox.Message{EventID: eventID.Hex(), IdempotencyKey: eventID.Hex(), SourceKey: b.source,
					DeviceKey: device, OccurredAt: now, CreatedAt: now, Origin: outbox.OriginOutbox}
				// One insert, one commit: commit order is this loop's order.
				_, err := outboxColl.InsertOne(ctx, bson.D{{Key: "_id", Value: w.nextID(sec)}, {Key: "eventId", Value: eventID},
					{Key: "stream", Value: b.stream}, {Key: "message", Value: msg.Encode()}, {Key: "createdAt", Value: now},
					{Key: "dispatchedAt", Value: nil}})
				require.NoError(t, err)
				place[eventID.Hex()] = fmt.Sprintf("%s/%02d/%02d", device, round, i)
				written = append(written, eventID.Hex())
			}
		}
		cfg := b.config()
		cfg.Owner = testkit.Name(fmt.Sprintf("owner-%d", round))
		d = b.start(cfg)
		b.waitRelayed(written, 10*time.Second)
	}

	last := map[string]string{}
	for _, id := range unique(b.streamIDs()) {
		p, ok := place[id]
		if !ok {
			continue // the warm-up
		}
		device := p[:2]
		require.Greater(t, p, last[device], "device %s: %s relayed after %s", device, p, last[device])
		last[device] = p
	}
	require.Equal(t, map[string]string{"d1": "d1/02/05", "d2": "d2/02/05"}, last)
}
