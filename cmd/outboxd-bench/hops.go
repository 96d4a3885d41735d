package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

// Hops splits the latency stage's ingest → syncedAt into the three hops
// of the pipeline, each event's times read back from where they are kept:
// ingest (the request's start → the original's createdAt, set by the group
// commit), relay (createdAt → the time Redis added the event's entry to the
// stream, the milliseconds of its id) and sync (that → syncedAt, set by the
// worker after its PostgreSQL transaction committed). createdAt, the entry
// id and syncedAt have millisecond resolution. Slowest is each hop's mean
// over the slowest 1% of the events (by ingest → syncedAt): the share of
// each hop in the tail, which the hops' own p99s do not tell (they come
// from different events).
type Hops struct {
	Events  int   `json:"events"`
	Ingest  HopMs `json:"ingest"`
	Relay   HopMs `json:"relay"`
	Sync    HopMs `json:"sync"`
	Slowest struct {
		Events   int     `json:"events"`
		IngestMs float64 `json:"ingestMs"`
		RelayMs  float64 `json:"relayMs"`
		SyncMs   float64 `json:"syncMs"`
	} `json:"slowest"`
}

// HopMs is one hop's percentiles.
type HopMs struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// String renders h on two lines.
func (h *Hops) String() string {
	hop := func(s HopMs) string { return fmt.Sprintf("%.1f / %.1f / %.1f", s.P50, s.P95, s.P99) }
	return fmt.Sprintf("hops of %d events, p50 / p95 / p99 ms: ingest (request → createdAt) %s, relay (→ XADD) %s, sync (→ syncedAt) %s\n"+
		"  the slowest %d (1%%): ingest %.1f + relay %.1f + sync %.1f ms on average",
		h.Events, hop(h.Ingest), hop(h.Relay), hop(h.Sync), h.Slowest.Events, h.Slowest.IngestMs, h.Slowest.RelayMs, h.Slowest.SyncMs)
}

// eventTimes are one event's times along the pipeline.
type eventTimes struct {
	id                            string
	start, created, added, synced time.Time
}

// The hops of an event, and their sum (ingest → syncedAt).
func (e eventTimes) ingest() time.Duration { return e.created.Sub(e.start) }
func (e eventTimes) relay() time.Duration  { return e.added.Sub(e.created) }
func (e eventTimes) sync() time.Duration   { return e.synced.Sub(e.added) }
func (e eventTimes) total() time.Duration  { return e.synced.Sub(e.start) }

// hopsOf computes Hops from the events' times; nil when there are none.
func hopsOf(events []eventTimes) *Hops {
	if len(events) == 0 {
		return nil
	}
	h := &Hops{Events: len(events)}
	hop := func(of func(eventTimes) time.Duration) HopMs {
		d := make([]time.Duration, len(events))
		for i, e := range events {
			d[i] = of(e)
		}
		s := summarize(d)
		return HopMs{P50: s.p50, P95: s.p95, P99: s.p99}
	}
	h.Ingest, h.Relay, h.Sync = hop(eventTimes.ingest), hop(eventTimes.relay), hop(eventTimes.sync)
	slowest := slices.Clone(events)
	slices.SortStableFunc(slowest, func(a, b eventTimes) int { return cmp.Compare(b.total(), a.total()) })
	n := max(1, len(slowest)/100)
	h.Slowest.Events = n
	for _, e := range slowest[:n] {
		h.Slowest.IngestMs += msOf(e.ingest()) / float64(n)
		h.Slowest.RelayMs += msOf(e.relay()) / float64(n)
		h.Slowest.SyncMs += msOf(e.sync()) / float64(n)
	}
	return h
}

// withAdded returns the events of ts whose entry added has, with that
// time.
func withAdded(ts []eventTimes, added map[string]time.Time) []eventTimes {
	out := make([]eventTimes, 0, len(ts))
	for _, t := range ts {
		if at, ok := added[t.id]; ok {
			t.added = at
			out = append(out, t)
		}
	}
	return out
}

// addedTimes reads, from the stream key, the time Redis added each event's
// first entry (the milliseconds of the entry id), in chunks. Entries
// already trimmed are missing from the map.
func addedTimes(ctx context.Context, rdb redis.UniversalClient, key string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	const chunk = 5000
	start := "-"
	for {
		msgs, err := rdb.XRangeN(ctx, key, start, "+", chunk).Result()
		if err != nil {
			return nil, fmt.Errorf("error reading stream %s: %w", key, err)
		}
		for _, m := range msgs {
			msg, err := outbox.DecodeMessage(m.Values)
			if err != nil {
				continue
			}
			at, ok := stream.IDTime(m.ID)
			if !ok {
				return nil, fmt.Errorf("error reading stream %s: entry id %q", key, m.ID)
			}
			if _, seen := out[msg.EventID]; !seen {
				out[msg.EventID] = at
			}
		}
		if len(msgs) < chunk {
			return out, nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}
