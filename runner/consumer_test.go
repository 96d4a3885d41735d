package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
)

// python3 returns the python3 the Python consumer example runs on.
func python3(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "the Python consumer example needs python3 (3.11 or later): `bash deploy/dev/ensure-services.sh --test-tools` installs it")
	return python
}

// TestPythonConsumer runs the non-Go consumer of examples/consumer-python
// (Python's standard library only) in a group of its own on the stream of
// `outboxd dev --message-payload`: it reads every event with its type and
// payload (one over --message-payload-max by reference, fetched from the
// API), acknowledges each, and its lag shows in /v1/status; the read
// model's group converges beside it, nothing lost while the other group
// lagged (it started after the events were in).
func TestPythonConsumer(t *testing.T) {
	t.Parallel()
	python := python3(t)
	b := startDev(t, "", "--message-payload", "--message-payload-max", "64")
	types := []string{"order.placed", "order.paid", "device.reading"}
	const n = 30
	ids := map[string]int{}
	for i := range n {
		note := ""
		if i%10 == 0 {
			note = `,"note":"` + strings.Repeat("x", 80) + `"` // over the bound: by reference
		}
		body := fmt.Sprintf(`{"sourceKey":"shop","deviceKey":"till-%d","type":%q,"occurredAt":"2026-11-04T10:%02d:00Z","payload":{"i":%d%s}}`,
			i%3, types[i%3], i, i, note)
		code, out := b.post(t, "/v1/events", "", body)
		require.Equal(t, http.StatusCreated, code, string(out))
		var res struct{ ID string }
		require.NoError(t, json.Unmarshal(out, &res))
		ids[res.ID] = i
	}
	require.Eventually(t, func() bool {
		s, err := b.status()
		return err == nil && converged(s, n)
	}, 60*time.Second, 50*time.Millisecond, "the read model did not converge: %s", b.stderr)

	stdout := runPythonConsumer(t, python, "--stream", b.stream, "--group", "py-orders",
		"--types", "order.placed,order.paid", "--server", b.base, "--count", fmt.Sprint(n))

	t.Logf("the consumer printed:\n%s", stdout)
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		var line struct {
			EventID string          `json:"eventId"`
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
		i, ok := ids[line.EventID]
		require.True(t, ok, "an event nobody sent: %s", sc.Text())
		require.False(t, seen[line.EventID], "printed twice: %s", line.EventID)
		seen[line.EventID] = true
		require.Equal(t, types[i%3], line.Type)
		var p struct{ I int }
		require.NoError(t, json.Unmarshal(line.Payload, &p), "the payload, carried or fetched: %s", sc.Text())
		require.Equal(t, i, p.I)
	}
	require.Len(t, seen, 2*n/3, "every order event once, the readings skipped")

	require.Eventually(t, func() bool {
		s, err := b.status()
		if err != nil || s.Stream == nil {
			return false
		}
		for _, g := range s.Stream.Groups {
			if g.Name == "py-orders" {
				return g.Pending == 0 && g.Lag != nil && *g.Lag == 0 && g.EntriesRead >= n
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "the consumer's group in /v1/status")
}

// runPythonConsumer runs examples/consumer-python/consumer.py with python
// on the test Redis and args, within a minute, and returns what it
// printed.
func runPythonConsumer(t *testing.T, python string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, append([]string{filepath.Join("..", "examples", "consumer-python", "consumer.py"),
		"--redis-url", testkit.RedisURL()}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	return stdout.Bytes()
}
