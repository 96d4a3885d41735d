package runner

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestPoisonBatchThroughHTTP: one named client posts a batch of 100 events
// that PostgreSQL refuses with a record error (a trigger on the read
// model raises for their type, SQLSTATE P0001) while two other clients
// keep posting: every other client's event is synced, each poison event
// is dead-lettered once and parked, and after `retries resume --class
// record` more posts are synced and nothing is dead-lettered again. The
// same with --ordered, where the poison events are one device's: only
// that device's entries wait.
func TestPoisonBatchThroughHTTP(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"unordered", "ordered"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			args := []string{"--operator-token", "op-5e1c9a7b3d2f", "--max-deliveries", "2", "--retry-backoff", "10ms",
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
			require.Eventually(t, func() bool {
				return states(good)[outbox.StateSynced] == len(good) && states(poison)[outbox.StateFailed] == len(poison)
			}, 90*time.Second, 100*time.Millisecond, "good %v, poison %v", states(good), states(poison))
			once := func() {
				t.Helper()
				dl := deadLettered()
				require.Len(t, dl, len(poison), "every poison event dead-lettered")
				for _, id := range poison {
					require.Equal(t, 1, dl[id], "dead-lettered once: %s", id)
				}
			}
			once()

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
