package runner

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	ostatus "github.com/outboxd/outboxd/internal/status"
)

// TestConsoleStagesAndDLQSearch drives the console's stage controls and
// the DLQ search form in headless Chromium against `outboxd dev
// --partitions 2`: one partition's relay paused by a click (confirmed in
// the dialog) is paused in the store for the admin API and holds its
// events, and resumed by a click it relays them; the search form filters
// the dead letters by device, error and payload, and "Replay every match"
// of a device replays only its dead letter (the other device's stays). It
// writes the screenshots stages-paused-partition and dlq-filtered when
// OUTBOXD_TEST_SCREENSHOTS is set.
func TestConsoleStagesAndDLQSearch(t *testing.T) {
	t.Parallel()
	const token = "console-ops-token"
	ctx := context.Background()
	d := startDev(t, "", "--min-age", "1h", "--auth-token", token, "--partitions", "2",
		"--max-deliveries", "2", "--retry-backoff", "20ms")
	// A projection that rejects the bad- devices stands for a bug.
	_, err := d.pg.Pool.Exec(ctx, `ALTER TABLE events ADD CONSTRAINT console_ops_bug CHECK (device_key NOT LIKE 'bad-%')`)
	require.NoError(t, err)
	post := func(device, unit string, hour int) {
		t.Helper()
		code := d.apiCall(t, token, http.MethodPost, "/v1/events", fmt.Sprintf(
			`{"sourceKey":"plant-a","deviceKey":%q,"occurredAt":"2026-11-01T%02d:00:00Z","payload":{"reading":{"unit":%q}}}`, device, hour, unit), nil)
		require.Equal(t, http.StatusCreated, code)
	}
	post("bad-1", "C", 1)
	post("bad-2", "F", 2)
	for i := range 4 {
		post(fmt.Sprintf("sensor-%d", i), "C", 3+i)
	}
	d.waitStatus(t, token, func(s ostatus.Snapshot) bool {
		return s.Events.Synced == 4 && s.Events.Failed == 2 && s.DLQ.Length == 2
	})

	browser := newBrowser(t, d.base)
	browser.desktop()
	b0 := browser.in(t)
	b0.open("/ui/")
	b0.until(`!document.getElementById('token-form').hidden`)
	step(b0, chromedp.SendKeys(chromedp.ID("token-input"), token+kb.Enter))

	t.Run("PauseAndResumeAPartition", func(t *testing.T) {
		b := browser.in(t)
		b.open("/ui/")
		b.until(`document.querySelectorAll('#stages tbody tr').length === 5`) // relay, relay:0, relay:1, projection, replay
		b.untilText(`#stages tr[data-stage="relay:1"]`, "running")
		b.click(`#stages tr[data-stage="relay:1"] button[data-action="pause"]`)
		b.until(`document.getElementById('confirm').open`)
		require.Equal(t, "Pause relay, partition 1?", eval[string](b, `document.getElementById('confirm-title').textContent`))
		b.click("#confirm-ok")
		b.untilText("#stage-result", "Relay, partition 1: paused.")
		b.untilText(`#stages tr[data-stage="relay:1"]`, "paused by console")
		b.untilText(`#stages tr[data-stage="relay:0"]`, "running")
		var pauses operator.PausesResult
		require.Equal(t, http.StatusOK, d.apiCall(t, token, http.MethodGet, "/v1/admin/pauses", "", &pauses))
		require.Len(t, pauses.Paused, 1)
		require.Equal(t, "relay:1", pauses.Paused[0].Stage)
		require.Equal(t, "console", pauses.Paused[0].By)

		// Events of both partitions: those of partition 1 wait in the
		// outbox while its relay is paused.
		for i := range 8 {
			post(fmt.Sprintf("paused-%d", i), "C", 10+i)
		}
		d.waitStatus(t, token, func(s ostatus.Snapshot) bool {
			return s.Events.Synced > 4 && s.Events.Synced < 12 && s.Outbox != nil && s.Outbox.Undispatched > 0
		})
		b.open("/ui/") // the figures of now: the outbox holds partition 1's events
		b.untilText(`#stages tr[data-stage="relay:1"]`, "paused by console")
		b.until(`Number(document.querySelector('[data-field="undispatched"]').textContent) > 0`)
		b.screenshot("stages-paused-partition", false)

		b.click(`#stages tr[data-stage="relay:1"] button[data-action="resume"]`)
		b.untilText("#stage-result", "Relay, partition 1: resumed.")
		b.untilText(`#stages tr[data-stage="relay:1"]`, "running")
		d.waitStatus(t, token, func(s ostatus.Snapshot) bool { return s.Events.Synced == 12 && s.Outbox.Undispatched == 0 })
	})

	t.Run("SearchAndReplayTheMatches", func(t *testing.T) {
		b := browser.in(t)
		b.open("/ui/dlq")
		b.untilText("#dlq-summary", "2 dead letters")
		step(b, chromedp.SetValue(chromedp.ID("f-device"), "bad-2"))
		step(b, chromedp.SetValue(chromedp.ID("f-error"), "CHECK CONSTRAINT"))
		step(b, chromedp.SetValue(chromedp.ID("f-payload"), "reading.unit=F"))
		b.follow(chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)))
		require.Contains(t, eval[string](b, `location.search`), "deviceKey=bad-2")
		b.untilText("#dlq-summary", "1 shown, error containing CHECK CONSTRAINT, device bad-2, payload field reading.unit=F")
		require.Equal(t, "bad-2", eval[string](b, `document.getElementById('f-device').value`), "the form keeps the filter")
		b.screenshot("dlq-filtered", false)
		b.open("/ui/dlq?payload=reading.unit%3DK")
		b.untilText("#dlq-table tbody", "No dead letter matches")

		_, err := d.pg.Pool.Exec(ctx, `ALTER TABLE events DROP CONSTRAINT console_ops_bug`)
		require.NoError(t, err)
		b.open("/ui/dlq?deviceKey=bad-2")
		b.untilText("#dlq-summary", "1 shown")
		b.click("#replay-all")
		b.until(`document.getElementById('confirm').open`)
		b.click("#confirm-ok")
		b.untilText("#action-result", "Replayed 1")
		d.waitStatus(t, token, func(s ostatus.Snapshot) bool {
			return s.Events.Synced == 13 && s.Events.Failed == 1 && s.DLQ.Length == 1
		})
		var page operator.DLQPage
		require.Equal(t, http.StatusOK, d.apiCall(t, token, http.MethodGet, "/v1/admin/dlq", "", &page))
		require.Len(t, page.Entries, 1)
		require.Contains(t, page.Entries[0].Payload, "bad-1", "the other device's dead letter stays")
	})
}
