package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestPoisonBatchThroughHTTP: one named client posts a batch of 100 events
// that PostgreSQL refuses with a record error (a trigger on the read
// model raises for their type, SQLSTATE P0001) while two other clients
// keep posting, with the reconciler sweeping often: every other client's
// event is synced, the streak of the poison's code halts its retries (the
// status shows it), each poison event is dead-lettered once and parked,
// and after `retries resume --class record` more posts are synced and
// nothing is dead-lettered again. The same with --ordered, where the
// poison events are one device's: only that device's entries wait, and
// another client's event of that device, waiting behind the poison, is
// synced without the reconciler publishing it again.
func TestPoisonBatchThroughHTTP(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"unordered", "ordered"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			// The reconciler's timings compressed: it sweeps every 300ms and
			// takes an unsynced original after 2s, so that it meets the
			// entries the worker holds (a failing record waits 3s before its
			// second delivery; ordered, the poisoned device's later events
			// wait behind it). Two failures in a row halt the code's retries.
			args := []string{"--operator-token", "op-5e1c9a7b3d2f", "--max-deliveries", "2", "--retry-backoff", "3s",
				"--min-age", "2s", "--every", "300ms", "--requeue-after", "1s", "--error-streak-limit", "2",
				"--ingest-client", "poisoner=poison-7a6b5c4d3e2f", "--ingest-client", "acme=acme-1a2b3c4d5e6f", "--ingest-client", "globex=globex-6f5e4d3c2b1a"}
			if mode == "ordered" {
				args = append(args, "--ordered")
			}
			b := startDev(t, "", args...)
			ctx := context.Background()
			_, err := b.pg.Pool.Exec(ctx, `
CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'poison event %', NEW.event_id; END $$;
CREATE TRIGGER refuse_poison BEFORE INSERT ON events FOR EACH ROW WHEN (NEW.type = 'poison') EXECUTE FUNCTION refuse_poison();`)
			require.NoError(t, err)
			st := b.openStore(t)

			event := func(typ, device string, i int) string {
				return fmt.Sprintf(`{"sourceKey":"plant","deviceKey":%q,"type":%q,"occurredAt":"2026-11-01T00:%02d:%02d.%03dZ","payload":{"i":%d}}`,
					device, typ, i/3600%60, i/60%60, i%1000, i)
			}
			postBatch := func(token string, items []string) []string {
				t.Helper()
				var res struct{ Results []outbox.Result }
				code := b.apiCall(t, token, http.MethodPost, "/v1/events:batch", `{"events":[`+strings.Join(items, ",")+`]}`, &res)
				require.Equal(t, http.StatusOK, code)
				ids := make([]string, len(res.Results))
				for i, r := range res.Results {
					ids[i] = r.ID
				}
				return ids
			}
			var poison []string
			var mu sync.Mutex
			var good []string
			clients := []struct{ name, token string }{{"acme", "acme-1a2b3c4d5e6f"}, {"globex", "globex-6f5e4d3c2b1a"}}
			var wg sync.WaitGroup
			for _, c := range clients {
				wg.Go(func() {
					for round := range 10 {
						items := make([]string, 20)
						for i := range items {
							// One device per client shares the poison's partition
							// ordering rules with nobody else's.
							items[i] = event("reading", c.name+"-dev", round*20+i)
						}
						ids := postBatch(c.token, items)
						mu.Lock()
						good = append(good, ids...)
						mu.Unlock()
					}
				})
			}
			items := make([]string, 100)
			for i := range items {
				items[i] = event("poison", "bad-dev", i)
			}
			poison = postBatch("poison-7a6b5c4d3e2f", items)
			wg.Wait()
			// Another client's event on the poisoned device, after the
			// poison: ordered, it waits behind it, and is neither published
			// again nor parked meanwhile.
			innocent := postBatch("acme-1a2b3c4d5e6f", []string{event("reading", "bad-dev", 900)})
			good = append(good, innocent...)

			states := func(ids []string) map[string]int {
				got, err := st.LoadEvents(ctx, ids)
				require.NoError(t, err)
				out := map[string]int{}
				for _, id := range ids {
					if l, ok := got[id]; ok && l.Err == nil {
						out[l.Event.State()]++
					}
				}
				return out
			}
			rdb, _ := testkit.NewRedis(t)
			dlq := stream.NewKeys(b.stream, "").DLQ()
			deadLettered := func() map[string]int {
				entries, err := rdb.XRange(ctx, dlq, "-", "+").Result()
				require.NoError(t, err)
				out := map[string]int{}
				for _, e := range entries {
					out[stream.DeadLetterEventID(stream.Entry{ID: e.ID, Values: e.Values})]++
				}
				return out
			}
			// The streak fired: the status shows the worker's retries of the
			// poison's code halted (a record projected later clears it:
			// ordered, the innocent event behind the poison does).
			var halted atomic.Bool
			sawHalt := func() {
				var s ostatus.Snapshot
				req, _ := http.NewRequest(http.MethodGet, b.base+"/v1/status", nil)
				req.Header.Set("Authorization", "Bearer op-5e1c9a7b3d2f")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				defer res.Body.Close()
				if res.StatusCode == http.StatusOK && json.NewDecoder(res.Body).Decode(&s) == nil &&
					slices.Contains(s.RetriesHalted, ostatus.HaltedRetries{Component: "worker", Class: "record", Code: "postgres_P0001"}) {
					halted.Store(true)
				}
			}
			require.Eventually(t, func() bool {
				if !halted.Load() {
					sawHalt()
				}
				return states(good)[outbox.StateSynced] == len(good) && states(poison)[outbox.StateFailed] == len(poison)
			}, 90*time.Second, 50*time.Millisecond, "good %v, poison %v", states(good), states(poison))
			require.True(t, halted.Load(), "the status showed the poison's code halting the worker's retries of records")
			once := func() {
				t.Helper()
				dl := deadLettered()
				require.Len(t, dl, len(poison), "every poison event dead-lettered")
				for _, id := range poison {
					require.Equal(t, 1, dl[id], "dead-lettered once: %s", id)
				}
			}
			once()
			got, err := st.LoadEvents(ctx, innocent)
			require.NoError(t, err)
			require.Zero(t, got[innocent[0]].Event.RequeueCount, "the innocent event was not published again")

			code, out, errOut := cli("retries", "resume", "--class", "record", "--server", b.base, "--auth-token", "op-5e1c9a7b3d2f")
			require.Equal(t, ExitOK, code, out+errOut)
			more := postBatch("acme-1a2b3c4d5e6f", []string{event("reading", "acme-dev", 500), event("reading", "acme-dev", 501)})
			require.Eventually(t, func() bool { return states(more)[outbox.StateSynced] == len(more) },
				60*time.Second, 100*time.Millisecond, "after the resume: %v", states(more))
			once()
			require.Equal(t, len(poison), states(poison)[outbox.StateFailed], "still parked, none redriven into a halt")
		})
	}
}
