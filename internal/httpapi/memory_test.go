package httpapi_test

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
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
	"github.com/outboxd/outboxd/store"
)

// worstBody is an event of about size bytes whose payload is an array of
// one-digit numbers: the most values, and so the most a tree decoder
// allocates, per byte.
func worstBody(size int64) string { return numbersEvent(size, ",1") }

// numbersEvent is an event of about size bytes whose payload is an array
// of numbers: 0, then each as often as it fits.
func numbersEvent(size int64, each string) string {
	var b strings.Builder
	b.WriteString(`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"v":[0`)
	for int64(b.Len()+len(each)+3+8) <= size { // 8 bytes of room for a longer deviceKey
		b.WriteString(each)
	}
	b.WriteString(`]}}`)
	return b.String()
}

// TestIngestMemoryAllocations: 64 worst-case bodies of MaxBody posted at
// once (the bodies a Server reads at once, --http-max-bodies) raise the
// heap by less than httpapi.IngestMemoryPerBody × MaxBody each, on both
// stores: the figure the deployment manifests' memory limits come from
// (docs/deploy.md). Two worst cases: one-digit integers (the most values
// per byte; on MongoDB their BSON is larger than one ingest transaction
// holds, so they are refused 413 having cost only their counting) and
// short decimals (1.5: the number rules' most work per byte; on MongoDB
// about 4 MB of BSON each, written). Decoding into a tree took about 90 MB
// per body of integers. On MongoDB the store is lungo, which holds what is
// written in this process's heap: the heap that stays after the run (the
// stored events) is not ingest's and is taken off the peak. The test's
// name ends in Allocations so that make test-allocs runs it without -race,
// under which it skips.
func TestIngestMemoryAllocations(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("the race detector's shadow memory is not the program's")
	}
	for _, store := range []string{"SQLite", "MongoDB"} {
		for _, c := range []struct {
			name, each string
			// refused is the status on MongoDB, 0 when the bodies are
			// written.
			refused int
		}{
			{"Integers", ",1", http.StatusRequestEntityTooLarge},
			{"Floats", ",1.5", 0},
		} {
			t.Run(store+"/"+c.name, func(t *testing.T) {
				want := []int{http.StatusCreated, http.StatusOK}
				if store == "MongoDB" && c.refused != 0 {
					want = []int{c.refused}
				}
				bound := int64(httpapi.MaxInFlightBodiesDefault) * httpapi.IngestMemoryPerBody * httpapi.MaxBodyDefault
				grown := ingestHeapGrowth(t, bothStores[store](t), numbersEvent(httpapi.MaxBodyDefault, c.each), want, store == "SQLite", bound)
				t.Logf("%s, %s: heap grew by %d MiB at most for %d bodies of %d KiB (bound %d MiB)",
					store, c.name, grown>>20, httpapi.MaxInFlightBodiesDefault, httpapi.MaxBodyDefault>>10, bound>>20)
				require.Less(t, grown, bound)
			})
		}
	}
}

// ingestHeapGrowth posts MaxInFlightBodiesDefault copies of body at once,
// each on a device of its own,
// to a handler on st, checks that each is answered with one of want, and
// returns by how much the heap grew at its peak over what it held before
// and still holds after (the stored events, on lungo).
func ingestHeapGrowth(t *testing.T, st store.Store, body string, want []int, distinct bool, bound int64) int64 {
	b := setupHandlerOn(t, st, nil)
	heap := func() *runtime.MemStats {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return &ms
	}
	ms := heap()
	base := ms.HeapAlloc
	// As deployed (GOMEMLIMIT, docs/deploy.md): the collector works harder
	// as the process nears the bound, so the peak is what is live rather
	// than what the default pacing leaves uncollected.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(ms.Sys-ms.HeapReleased) + bound))
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
	// Each body its own event (its own device, so its own derived key):
	// each is written, none a duplicate of another.
	replies := b.postConcurrently(t, httpapi.MaxInFlightBodiesDefault, func(i int) string {
		if !distinct {
			return body
		}
		return strings.Replace(body, `"deviceKey":"d"`, fmt.Sprintf(`"deviceKey":"d%02d"`, i), 1)
	})
	close(done)
	<-sampled
	for _, r := range replies {
		require.Contains(t, want, r.status, "%.200s", r.body)
	}
	kept := max(int64(heap().HeapAlloc)-int64(base), 0)
	t.Logf("the heap holds %d MiB more after the run than before", kept>>20)
	return int64(peak.Load()) - int64(base) - kept
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
