package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHops: each hop's percentiles come from its own times, and the
// slowest 1% (by ingest → syncedAt) shows which hop the tail spent its time
// in, although another hop has the higher p99 on its own.
func TestHops(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var events []eventTimes
	for i := range 200 {
		// Ingest takes 1 ms, relay 2, sync 5; relay takes 40 ms for events
		// 0, 10 and 20, sync 100 ms for events 7 to 9: both hops have 3
		// events past their p99 rank, but the slowest overall are sync's.
		ingest, relay, sync := 1, 2, 5
		if i%10 == 0 && i < 30 {
			relay = 40
		}
		if i >= 7 && i <= 9 {
			sync = 100
		}
		start := at.Add(ms(i))
		created := start.Add(ms(ingest))
		added := created.Add(ms(relay))
		events = append(events, eventTimes{id: fmt.Sprint(i), start: start, created: created, added: added, synced: added.Add(ms(sync))})
	}
	h := hopsOf(events)
	require.Equal(t, 200, h.Events)
	require.Equal(t, HopMs{P50: 1, P95: 1, P99: 1}, h.Ingest)
	require.Equal(t, HopMs{P50: 2, P95: 2, P99: 40}, h.Relay)
	require.Equal(t, HopMs{P50: 5, P95: 5, P99: 100}, h.Sync)
	require.Equal(t, 2, h.Slowest.Events, "1% of 200")
	require.InDelta(t, 1, h.Slowest.IngestMs, 1e-9)
	require.InDelta(t, 2, h.Slowest.RelayMs, 1e-9)
	require.InDelta(t, 100, h.Slowest.SyncMs, 1e-9)
	require.Contains(t, h.String(), "sync (→ syncedAt) 5.0 / 5.0 / 100.0")
	require.Nil(t, hopsOf(nil))

	added := map[string]time.Time{"1": at}
	kept := withAdded([]eventTimes{{id: "1"}, {id: "2"}}, added)
	require.Equal(t, []eventTimes{{id: "1", added: at}}, kept, "an event whose entry was trimmed is left out")
}
