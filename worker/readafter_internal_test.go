package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

// TestReadAfterOfABatch: a batch's read-after positions are its messages',
// in stream order, one for the adjacent messages of one commit; messages
// without one add nothing (prepare folds appendReadAfter over the messages
// it decodes: trimmed entries and undecodable ones are dead letters).
func TestReadAfterOfABatch(t *testing.T) {
	t.Parallel()
	fold := func(positions ...string) []string {
		var out []string
		for _, pos := range positions {
			m := outbox.Message{EventID: outbox.NewEventID(), Origin: outbox.OriginOutbox, ReadAfter: pos}
			decoded, err := stream.Entry{ID: "1-0", Values: m.Values()}.Message()
			require.NoError(t, err)
			out = appendReadAfter(out, decoded.ReadAfter)
		}
		return out
	}
	require.Equal(t, []string{"10.1", "10.2", "9.5"}, fold("10.1", "10.1", "", "10.2", "10.2", "9.5"))
	require.Nil(t, fold(""))
}
