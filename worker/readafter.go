package worker

import "github.com/outboxd/outboxd/internal/stream"

// readAfter returns the read-after positions the messages of a batch carry
// (outbox.Message.ReadAfter: the commits of their outbox entries, as the
// dispatcher's feed saw them), for the batch's read of its originals
// (store.WithReadAfter): the store reads at or after the latest. The
// messages of one commit are next to each other in the stream and carry
// the same position: it is passed once for them.
// A message without one (a catch-up, the reconciler, a replay, an older
// dispatcher, SQLite) adds nothing; one that does not decode is the
// batch's dead letter already.
func readAfter(msgs []stream.Entry) []string {
	var out []string
	for _, m := range msgs {
		if m.Values == nil {
			continue
		}
		msg, err := m.Message()
		if err != nil || msg.ReadAfter == "" || (len(out) > 0 && out[len(out)-1] == msg.ReadAfter) {
			continue
		}
		out = append(out, msg.ReadAfter)
	}
	return out
}
