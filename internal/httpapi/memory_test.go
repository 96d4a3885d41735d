package httpapi_test

import (
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/raceflag"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// worstBody is an event of about size bytes whose payload is an array of
// one-digit numbers: the most values, and so the most a tree decoder
// allocates, per byte.
func worstBody(size int64) string {
	var b strings.Builder
	b.WriteString(`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"v":[0`)
	for int64(b.Len()) < size-4 {
		b.WriteString(",1")
	}
	b.WriteString(`]}}`)
	return b.String()
}

// TestIngestMemoryBound: 64 worst-case bodies of MaxBody posted at once
// (the bodies a Server reads at once, --http-max-bodies) raise the heap by
// less than httpapi.IngestMemoryPerBody × MaxBody each: the figure the
// deployment manifests' memory limits come from (docs/deploy.md).
// Decoding into a tree took about 90 MB per such body.
func TestIngestMemoryBound(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("the race detector's shadow memory is not the program's")
	}
	b := setupHandler(t, nil)
	body := worstBody(httpapi.MaxBodyDefault)
	const bodies = httpapi.MaxInFlightBodiesDefault
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	replies := b.postConcurrently(t, bodies, func(int) string { return body })
	close(done)
	<-sampled
	for _, r := range replies {
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, r.status, "%s", r.body)
	}
	grown := int64(peak.Load()) - int64(base)
	bound := int64(bodies) * httpapi.IngestMemoryPerBody * httpapi.MaxBodyDefault
	t.Logf("heap grew by %d MiB at most for %d bodies of %d KiB (bound %d MiB)", grown>>20, bodies, httpapi.MaxBodyDefault>>10, bound>>20)
	require.Less(t, grown, bound)
}

// TestEventTooLargeForTheStoreIs413: on MongoDB a valid body of MaxBody
// whose payload becomes a BSON document larger than one ingest transaction
// holds (an array of one-digit numbers grows about eight times) is
// answered 413 naming the field and the bound, alone or as an item of a
// batch, and nothing is written; it was a 500, which clients retry.
func TestEventTooLargeForTheStoreIs413(t *testing.T) {
	t.Parallel()
	b := setupHandlerOn(t, testkit.NewMongo(t, nil), nil)
	bound := strconv.Itoa(outbox.GroupMaxBytesDefault)
	for _, c := range []struct {
		path, body, field string
	}{
		{"/v1/events", worstBody(httpapi.MaxBodyDefault), "payload"},
		{"/v1/events:batch", `{"events":[{"sourceKey":"s","deviceKey":"small","occurredAt":"2026-11-01T10:00:00Z","payload":{"t":1}},` +
			worstBody(httpapi.MaxBodyDefault-256) + `]}`, "events[1].payload"},
	} {
		p := b.do(t, http.MethodPost, c.path, c.body).problem(t, http.StatusRequestEntityTooLarge)
		require.Equal(t, []string{c.field}, fields(p), c.path)
		require.Contains(t, p.Errors[0].Reason, bound, "names the bound")
		require.Contains(t, p.Errors[0].Reason, "--ingest-group-max-bytes")
	}
	b.requireStored(t, 0)
	r := b.do(t, http.MethodPost, "/v1/events", `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"t":1}}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	b.requireStored(t, 1)
}
