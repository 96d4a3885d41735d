package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestReplayEntityRangeFlag: `replay --entity-range SOURCE/FROM..TO`
// replays the originals of the source's devices between the bounds (both
// included, byte order) and nothing else, its dry run counts them, and a
// range without a source, with an empty bound or with FROM after TO is a
// usage error (exit 2, naming the flag) that sends no request.
func TestReplayEntityRangeFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		// No instance listens there: a refusal comes before any request.
		server := "http://" + freeAddr(t)
		window := []string{"--from", "2026-01-01T00:00:00Z", "--to", "2027-01-01T00:00:00Z", "--server", server}
		for _, tc := range []struct{ name, value, says string }{
			{"NoSource", "dev-1..dev-6", "--entity-range needs the source: SOURCE/FROM..TO"},
			{"EmptySource", "/dev-1..dev-6", "--entity-range needs the source"},
			{"EmptyFrom", "src-0/..dev-6", "--entity-range needs both bounds"},
			{"EmptyTo", "src-0/dev-1..", "--entity-range needs both bounds"},
			{"FromAfterTo", "src-0/dev-6..dev-1", `--entity-range has FROM "dev-6" after TO "dev-1"`},
			{"NoDots", "src-0/dev-1", `with ".." once`},
			{"OneBadOfTwo", "src-0/dev-1..dev-6,src-1/b..a", `FROM "b" after TO "a"`},
		} {
			for _, dry := range []bool{false, true} {
				args := append([]string{"replay", "--entity-range", tc.value}, window...)
				if dry {
					args = append(args, "--dry-run")
				}
				code, out, errOut := cli(args...)
				require.Equal(t, ExitUsage, code, "%s: %s%s", tc.name, out, errOut)
				require.Contains(t, errOut, tc.says, tc.name)
				require.NotContains(t, errOut, "connection refused", "%s: no request is sent", tc.name)
			}
		}
		code, _, errOut := cli(append([]string{"replay", "--entity-range", "src-0/dev-1..dev-6", "--source", "src-0"}, window...)...)
		require.Equal(t, ExitUsage, code, errOut)
		require.Contains(t, errOut, "--entity-range cannot be combined with --source")

		// A resume token belongs to its ranges: the cursor names an entity
		// by its place among them.
		fs, o := newFlagSet(mustRole(t, "replay"))
		args := []string{"--entity-range", "src-0/dev-1..dev-6", "--from", "2026-01-01T00:00:00Z", "--to", "2027-01-01T00:00:00Z"}
		require.NoError(t, config.Parse(fs, args, func(string) (string, bool) { return "", false }))
		token := resumeToken{Command: "replay", Args: o.summary(), Fingerprint: o.fingerprint(), After: "1~", Totals: json.RawMessage(`{}`)}.encode()
		require.Contains(t, o.summary(), "--entity-range src-0/dev-1..dev-6")
		code, _, errOut = cli(append([]string{"replay", "--entity-range", "src-0/dev-1..dev-7", "--resume", token}, window...)...)
		require.Equal(t, ExitUsage, code, errOut)
		require.Contains(t, errOut, "continues another command (`outboxd replay --from 2026-01-01T00:00:00Z --to 2027-01-01T00:00:00Z --entity-range src-0/dev-1..dev-6`)")
	})

	t.Run("ReplaysTheRange", func(t *testing.T) {
		t.Parallel()
		b := startDev(t, "", "--min-age", "1h")
		// event(i): source src-(i%3), device dev-(i%17). src-0 holds
		// dev-0, dev-3, dev-6, dev-9, dev-12 and dev-15; in byte order
		// dev-1..dev-6 holds dev-12, dev-15, dev-3 and dev-6.
		var want []string
		for i := range 17 {
			key := fmt.Sprintf("r%d", i)
			code, body := b.post(t, "/v1/events", key, event(i))
			require.Equal(t, http.StatusCreated, code, string(body))
			if i%3 == 0 && strings.Contains(" 3 6 12 15 ", fmt.Sprintf(" %d ", i)) {
				want = append(want, key)
			}
		}
		require.Eventually(t, func() bool {
			s, err := b.status()
			return err == nil && s.Events != nil && s.Events.Synced == 17
		}, 30*time.Second, 20*time.Millisecond)
		rdb, _ := testkit.NewRedis(t)
		lane := stream.NewKeys(b.stream, "").Replay()
		keys := func() []string {
			msgs, err := rdb.XRange(ctx, lane, "-", "+").Result()
			require.NoError(t, err)
			var out []string
			for _, m := range msgs {
				msg, err := outbox.DecodeMessage(m.Values)
				require.NoError(t, err)
				out = append(out, msg.IdempotencyKey)
			}
			return out
		}
		args := []string{"replay", "--entity-range", "src-0/dev-1..dev-6", "--from", "2026-01-01T00:00:00Z", "--to", "2027-01-01T00:00:00Z",
			"--chunk", "1", "--json", "--server", b.base}
		code, out, errOut := cli(append(args, "--dry-run")...)
		require.Equal(t, ExitOK, code, errOut)
		var dry map[string]any
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &dry), out)
		require.EqualValues(t, len(want), dry["count"], "the dry run counts the range")
		require.Empty(t, keys(), "a dry run publishes nothing")

		code, out, errOut = cli(args...)
		require.Equal(t, ExitOK, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var total map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &total))
		require.Equal(t, "total", total["kind"])
		require.EqualValues(t, len(want), total["published"])
		require.EqualValues(t, len(want), total["count"])
		require.ElementsMatch(t, want, keys(), "exactly the range's originals")
	})
}
