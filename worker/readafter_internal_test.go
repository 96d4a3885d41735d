package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

// TestReadAfterOfABatch: a batch's read-after positions are its messages',
// in stream order, one for the adjacent messages of one commit; messages
// without one, trimmed entries and undecodable ones add nothing.
func TestReadAfterOfABatch(t *testing.T) {
	t.Parallel()
	msg := func(readAfter string) stream.Entry {
		m := outbox.Message{EventID: outbox.NewEventID(), Origin: outbox.OriginOutbox, ReadAfter: readAfter}
		return stream.Entry{ID: "1-0", Values: m.Values()}
	}
	msgs := []stream.Entry{
		msg("10.1"), msg("10.1"), msg(""), {ID: "2-0"}, {ID: "3-0", Values: map[string]any{outbox.PayloadField: "{"}},
		msg("10.2"), msg("10.2"), msg("9.5"),
	}
	require.Equal(t, []string{"10.1", "10.2", "9.5"}, readAfter(msgs))
	require.Nil(t, readAfter([]stream.Entry{msg("")}))
}
