package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/outbox"
)

// TestAdminReplayEntityRanges: POST /v1/admin/replay takes entityRanges,
// ranges of one source's devices (both bounds included, byte order): the
// dry run counts the originals of the devices inside, and the replay
// publishes exactly those into the lane, on both stores. A range without
// a source, with an empty bound or with from after to is a 422 naming
// entityRanges, a range that is not an object a 400, and neither
// publishes anything.
func TestAdminReplayEntityRanges(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupAdmin(t, open(t))
			inside := map[string]bool{}
			for _, device := range []string{"d0", "d1", "d10", "d2", "d3", "D1"} {
				for _, ev := range b.write(t, device, hours(2)...) {
					// "d10" sorts between "d1" and "d2"; "D1" before them all.
					inside[ev.ID] = device == "d1" || device == "d10" || device == "d2"
				}
			}
			published := func() []string {
				var ids []string
				for _, m := range b.laneSince(t, "0-0") {
					ids = append(ids, m.EventID)
				}
				return ids
			}
			window := httpapi.ReplayRequest{From: day0.Format(time.RFC3339), To: day0.Add(24 * time.Hour).Format(time.RFC3339)}

			for _, bad := range []struct {
				name, ranges string
				status       int
			}{
				{"NoSource", `[{"from":"d1","to":"d2"}]`, http.StatusUnprocessableEntity},
				{"EmptyFrom", `[{"sourceKey":"src","from":"","to":"d2"}]`, http.StatusUnprocessableEntity},
				{"EmptyTo", `[{"sourceKey":"src","from":"d1"}]`, http.StatusUnprocessableEntity},
				{"FromAfterTo", `[{"sourceKey":"src","from":"d2","to":"d1"}]`, http.StatusUnprocessableEntity},
				{"AfterAGoodOne", `[{"sourceKey":"src","from":"d1","to":"d2"},{"sourceKey":"src","from":"d2","to":"d1"}]`, http.StatusUnprocessableEntity},
				{"AString", `["src/d1..d2"]`, http.StatusBadRequest},
			} {
				for _, dry := range []bool{true, false} {
					body := map[string]any{"from": window.From, "to": window.To, "dryRun": dry, "entityRanges": json.RawMessage(bad.ranges)}
					code, raw := b.call(t, http.MethodPost, "/v1/admin/replay", body, nil)
					require.Equal(t, bad.status, code, "%s: %s", bad.name, raw)
					if bad.status == http.StatusUnprocessableEntity {
						var p httpapi.Problem
						require.NoError(t, json.Unmarshal(raw, &p))
						require.Equal(t, []string{"entityRanges"}, fields(p), bad.name)
					}
				}
			}
			require.Empty(t, published(), "a refused replay publishes nothing")

			req := window
			req.EntityRanges = []operator.EntityRange{{SourceKey: "src", From: "d1", To: "d2"}}
			req.DryRun = true
			var res operator.ReplayResult
			code, raw := b.call(t, http.MethodPost, "/v1/admin/replay", req, &res)
			require.Equal(t, http.StatusOK, code, string(raw))
			require.EqualValues(t, 6, *res.Count, "three devices of two originals each")
			require.Empty(t, published(), "a dry run publishes nothing")

			req.DryRun, req.Limit = false, 4
			for chunks := 0; ; chunks++ {
				require.Less(t, chunks, 10, "the replay never ended")
				code, raw = b.call(t, http.MethodPost, "/v1/admin/replay", req, &res)
				require.Equal(t, http.StatusOK, code, string(raw))
				if res.Done {
					break
				}
				req.After, req.Started = res.Next, res.Started.Format(time.RFC3339Nano)
			}
			var want []string
			for id, in := range inside {
				if in {
					want = append(want, id)
				}
			}
			require.ElementsMatch(t, want, published())
		})
	}
}

// laneSince returns the messages of the replay lane after id, decoded.
func (b *adminBundle) laneSince(t *testing.T, id string) []outbox.Message {
	t.Helper()
	msgs, err := b.rdb.XRange(context.Background(), b.keys().Replay(), "("+id, "+").Result()
	require.NoError(t, err)
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		out[i], err = outbox.DecodeMessage(m.Values)
		require.NoError(t, err)
	}
	return out
}

// hours returns n times an hour apart from day0.
func hours(n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = day0.Add(time.Duration(i) * time.Hour)
	}
	return out
}
