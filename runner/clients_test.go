package runner

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/outbox"
)

// TestIngestClientFlags: `outboxd dev` with two named clients from
// --ingest-clients-file and one from --ingest-client beside
// --ingest-token: the same reading from each is its own original (201),
// recorded with its client, and a retry is its own duplicate. With
// --max-values 50, a body of more values is 413.
func TestIngestClientFlags(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "clients", "# name token\nacme acme-5c1d0e7f9a2b\n\nglobex globex-0f3e8d6c4b2a\n")
	b := startDev(t, "", "--operator-token", "op-7c1e3d5f9b0a", "--ingest-token", "in-5b2f8e1c7d3a",
		"--ingest-clients-file", file, "--ingest-client", "initech=initech-9d8c7b6a5f4e", "--max-values", "50", "--http-max-decodes", "1")
	reading := `{"sourceKey":"plant","deviceKey":"m-1","occurredAt":"2026-11-01T00:00:00Z","payload":{"v":1}}`
	ids := map[string]bool{}
	for _, c := range []struct{ name, token string }{
		{"acme", "acme-5c1d0e7f9a2b"}, {"globex", "globex-0f3e8d6c4b2a"}, {"initech", "initech-9d8c7b6a5f4e"}, {"", "in-5b2f8e1c7d3a"},
	} {
		var res, again outbox.Result
		require.Equal(t, http.StatusCreated, b.apiCall(t, c.token, http.MethodPost, "/v1/events", reading, &res), c.name)
		require.Equal(t, http.StatusOK, b.apiCall(t, c.token, http.MethodPost, "/v1/events", reading, &again), c.name)
		require.Equal(t, res.ID, again.ID)
		var ev operator.Event
		require.Equal(t, http.StatusOK, b.apiCall(t, "op-7c1e3d5f9b0a", http.MethodGet, "/v1/events/"+res.ID, "", &ev))
		require.Equal(t, c.name, ev.Client)
		ids[res.ID] = true
	}
	require.Len(t, ids, 4)
	many := `{"sourceKey":"plant","deviceKey":"m-2","occurredAt":"2026-11-01T00:00:00Z","payload":{"a":[` + strings.Repeat("1,", 50) + `1]}}`
	require.Equal(t, http.StatusRequestEntityTooLarge, b.apiCall(t, "acme-5c1d0e7f9a2b", http.MethodPost, "/v1/events", many, nil))
}

// TestBodyFlagsRefused: --max-values, --http-max-decodes and
// --http-max-client-bodies out of range exit 2 naming the flag.
func TestBodyFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--max-values", "0"}, {"--http-max-decodes", "0"},
		{"--http-max-client-bodies", "65"}, {"--http-max-client-bodies", "-1"},
	} {
		code, out := runCLI(t, nil, append([]string{"ingest", "--store", "mongodb://h"}, args...)...)
		require.Equal(t, ExitUsage, code, out)
		require.Contains(t, out, args[0], out)
	}
}

// TestIngestClientFlagsRefused: a bad name, a token given twice or a bad
// line of the file exits 2 naming the flag, and shows no token.
func TestIngestClientFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"NoEquals", []string{"--ingest-client", "acme"}, []string{"--ingest-client", "NAME=TOKEN"}},
		{"BadName", []string{"--ingest-client", "a/b=hunter2"}, []string{"--ingest-client", `"a/b"`}},
		{"Default", []string{"--ingest-client", "default=hunter2"}, []string{"--ingest-token's"}},
		{"Twice", []string{"--ingest-client", "a=hunter2", "--ingest-client", "a=hunter3"}, []string{"given twice"}},
		{"SameAsIngestToken", []string{"--ingest-client", "a=hunter2", "--ingest-token", "hunter2"}, []string{"--ingest-client", "the same as --ingest-token"}},
		{"FileLine", []string{"--ingest-clients-file", writeFile(t, "c", "acme hunter2 x\n")}, []string{"--ingest-clients-file", "line 1"}},
		{"FileTwice", []string{"--ingest-clients-file", writeFile(t, "c", "acme hunter2\n"), "--ingest-client", "acme=hunter3"}, []string{"given twice"}},
		{"FileEmpty", []string{"--ingest-clients-file", writeFile(t, "c", "# none\n")}, []string{"names no client"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCLI(t, nil, append([]string{"ingest", "--store", "mongodb://h"}, tc.args...)...)
			require.Equal(t, ExitUsage, code, out)
			for _, w := range tc.wants {
				require.Contains(t, out, w)
			}
			require.NotContains(t, out, "hunter2")
		})
	}
}
