package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestReplayAndVerifyConfirmProgressResume drives replay and verify over a
// window of 7 originals in chunks of 2 against outboxd dev: --rebuild and
// --repair print what they would change and exit 2 without --yes, having
// changed nothing; --json prints a JSON line per chunk with its progress
// and a resume token; a run interrupted after its second chunk prints the
// command that continues it, and --resume finishes the window without
// running a finished chunk again; a token is refused for another command;
// on a terminal a progress line shows the count, the total, the rate and
// the time left.
func TestReplayAndVerifyConfirmProgressResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startDev(t, "", "--min-age", "1h")
	for i := range 7 {
		code, body := b.post(t, "/v1/events", fmt.Sprintf("c%d", i), event(i))
		require.Equal(t, http.StatusCreated, code, string(body))
	}
	require.Eventually(t, func() bool {
		s, err := b.status()
		return err == nil && s.Events != nil && s.Events.Synced == 7
	}, 30*time.Second, 20*time.Millisecond)
	window := []string{"--from", "2026-01-01T00:00:00Z", "--to", "2027-01-01T00:00:00Z", "--chunk", "2"}
	op := func(args ...string) (int, string, string) { return cli(append(args, "--server", b.base)...) }
	rows := func() int64 {
		var n int64
		require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
		return n
	}
	// streamLen is the length of the replay lane, where replays go.
	streamLen := func() int64 {
		rdb, _ := testkit.NewRedis(t)
		return rdb.XLen(ctx, stream.NewKeys(b.stream, "").Replay()).Val()
	}

	t.Run("RebuildNeedsYes", func(t *testing.T) {
		before := streamLen()
		code, out, errOut := op(append([]string{"replay", "--rebuild"}, window...)...)
		require.Equal(t, ExitUsage, code, errOut)
		require.Contains(t, out, "replay --rebuild: 7 originals in the window; their rows and counts would be removed")
		require.Contains(t, errOut, "--yes is required with --rebuild")
		require.Equal(t, int64(7), rows(), "nothing removed")
		require.Equal(t, before, streamLen(), "nothing published")
	})

	t.Run("RepairNeedsYes", func(t *testing.T) {
		_, err := b.pg.Pool.Exec(ctx, `DELETE FROM events WHERE idempotency_key = 'c3'`)
		require.NoError(t, err)
		code, out, errOut := op("verify", "--repair", "--chunk", "2")
		require.Equal(t, ExitUsage, code, errOut)
		require.Contains(t, out, "missing_row")
		require.Contains(t, out, "--repair would re-publish 1 and recompute 1 statistics rows: nothing changed without --yes")
		require.Contains(t, errOut, "--yes is required with --repair")
		require.Equal(t, int64(6), rows(), "nothing repaired")
		code, _, errOut = op("verify", "--repair", "--yes", "--chunk", "2")
		require.Equal(t, ExitFailure, code, "drift found (and repaired): %s", errOut)
		require.Eventually(t, func() bool { return rows() == 7 }, 30*time.Second, 20*time.Millisecond)
		code, _, errOut = op("verify")
		require.Equal(t, ExitOK, code, errOut)
	})

	var lines []map[string]any
	t.Run("JSONLinePerChunk", func(t *testing.T) {
		code, out, errOut := op(append([]string{"replay", "--json"}, window...)...)
		require.Equal(t, ExitOK, code, errOut)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &v), l)
			lines = append(lines, v)
		}
		require.Len(t, lines, 5, "4 chunks of at most 2, then the totals")
		for i, l := range lines[:4] {
			require.Equal(t, "chunk", l["kind"])
			require.EqualValues(t, i+1, l["chunk"])
			p := l["progress"].(map[string]any)
			require.EqualValues(t, min(7, 2*(i+1)), p["done"])
			require.EqualValues(t, 7, p["total"])
			require.Contains(t, p, "ratePerSecond")
			if i < 3 {
				require.NotEmpty(t, l["resume"], "chunk %d resumes", i+1)
			} else {
				require.NotContains(t, l, "resume", "nothing to resume after the last")
			}
		}
		require.Equal(t, "total", lines[4]["kind"])
		require.EqualValues(t, 7, lines[4]["published"])
		require.EqualValues(t, 4, lines[4]["chunks"])

		vcode, vout, verrOut := op("verify", "--json", "--chunk", "3")
		require.Equal(t, ExitOK, vcode, verrOut)
		vlines := strings.Split(strings.TrimSpace(vout), "\n")
		var first map[string]any
		require.NoError(t, json.Unmarshal([]byte(vlines[0]), &first))
		require.Equal(t, "originals", first["phase"])
		require.EqualValues(t, 7, first["total"], "the phase's total comes with its first chunk")
		require.EqualValues(t, 7, first["progress"].(map[string]any)["total"])
	})

	t.Run("InterruptedThenResumed", func(t *testing.T) {
		// A proxy that fails the third replay request: the dry run and
		// two chunks pass.
		target, err := url.Parse(b.base)
		require.NoError(t, err)
		proxy := httputil.NewSingleHostReverseProxy(target)
		var replays atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/admin/replay" && replays.Add(1) == 4 {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"status":503,"title":"Backend unavailable"}`)
				return
			}
			proxy.ServeHTTP(w, r)
		}))
		defer srv.Close()
		before := streamLen()
		code, _, errOut := cli(append([]string{"replay", "--server", srv.URL}, window...)...)
		require.Equal(t, ExitFailure, code, errOut)
		require.Contains(t, errOut, "replay stopped after 4 of the window's 7 re-published")
		m := regexp.MustCompile(`outboxd (replay [^\n]*) --resume (\S+)`).FindStringSubmatch(errOut)
		require.NotNil(t, m, errOut)
		require.Equal(t, "replay --from 2026-01-01T00:00:00Z --to 2027-01-01T00:00:00Z --chunk 2", m[1])
		token := m[2]
		require.Equal(t, before+4, streamLen())

		// Another command refuses the token.
		for _, args := range [][]string{
			{"replay", "--from", "2026-02-01T00:00:00Z", "--to", "2027-01-01T00:00:00Z"},
			{"replay", "--from", "2026-01-01T00:00:00Z", "--to", "2027-01-01T00:00:00Z", "--state", "failed"},
			{"verify"},
		} {
			code, _, errOut := op(append(args, "--resume", token)...)
			require.Equal(t, ExitUsage, code, "%v: %s", args, errOut)
			require.Contains(t, errOut, "--resume continues another command (`outboxd replay --from 2026-01-01T00:00:00Z")
		}
		code, _, errOut = op(append([]string{"replay"}, append(window, "--resume", "garbage")...)...)
		require.Equal(t, ExitUsage, code)
		require.Contains(t, errOut, "--resume is not a token")

		// The same command (even with other chunks) continues after the
		// second chunk: the remaining 3 only.
		code, out, errOut := op(append([]string{"replay", "--json", "--resume", token}, window[:4]...)...)
		require.Equal(t, ExitOK, code, errOut)
		ls := strings.Split(strings.TrimSpace(out), "\n")
		var tot replayTotals
		require.NoError(t, json.Unmarshal([]byte(ls[len(ls)-1]), &tot))
		require.Equal(t, 7, tot.Published, "4 before the interruption, 3 after")
		require.Equal(t, 3, tot.Chunks, "2 before, 1 of 500 after")
		require.Equal(t, before+7, streamLen(), "no finished chunk published twice")
	})

	t.Run("ProgressOnATerminal", func(t *testing.T) {
		ptmx, tty, err := pty.Open()
		require.NoError(t, err)
		defer ptmx.Close()
		var screen strings.Builder
		read := make(chan struct{})
		go func() {
			defer close(read)
			r := bufio.NewReader(ptmx)
			buf := make([]byte, 4096)
			for {
				n, err := r.Read(buf)
				screen.Write(buf[:n])
				if err != nil {
					return
				}
			}
		}()
		var out strings.Builder
		code := run(ctx, append([]string{"replay", "--server", b.base}, window...), &out, tty)
		require.NoError(t, tty.Close())
		<-read
		require.Equal(t, ExitOK, code, screen.String())
		got := screen.String()
		for _, want := range []string{"\r\x1b[Kreplay: 2 of 7 (28%), ", "\r\x1b[Kreplay: 7 of 7 (100%), ", "/s, ", " left"} {
			require.Contains(t, got, want)
		}
		require.Contains(t, out.String(), "7 of the window's 7 originals re-published")
		require.NotContains(t, out.String(), "\r", "the progress goes to the terminal, the result to stdout")
	})
}
