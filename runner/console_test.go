package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/testkit"
)

// EnvScreenshots names a folder where the browser tests write a screenshot
// of each page at desktop and phone width (docs/ui holds the committed
// ones: OUTBOXD_TEST_SCREENSHOTS=docs/ui make test). A relative folder is
// relative to the module's root.
const EnvScreenshots = "OUTBOXD_TEST_SCREENSHOTS"

// browserWait bounds every wait of a browser test.
const browserWait = 30 * time.Second

// browser is a headless Chromium on a tab of its own, for one test; in
// gives it to a subtest.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string
	errs  *exceptions
}

// exceptions are the JavaScript exceptions the pages threw.
type exceptions struct {
	mu   sync.Mutex
	list []string
}

// in returns b for the subtest t (its failures are t's).
func (b *browser) in(t *testing.T) *browser {
	c := *b
	c.t = t
	return &c
}

// chromium returns the path of a Chromium binary, "" when there is none.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts headless Chromium for t against base, or skips t when
// no chromium binary exists. The flags keep it off the network: no update,
// sync, QUIC or background requests, and a fresh profile.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("skipped: no chromium binary on PATH; `make test` installs Debian's chromium (deploy/dev/ensure-services.sh)")
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true), chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-domain-reliability", true), chromedp.Flag("no-pings", true),
		chromedp.Flag("metrics-recording-only", true), chromedp.Flag("safebrowsing-disable-auto-update", true),
		chromedp.Flag("disable-client-side-phishing-detection", true), chromedp.WindowSize(1280, 900))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		acancel()
	})
	b := &browser{t: t, ctx: ctx, base: base, errs: &exceptions{}}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			d := e.ExceptionDetails
			msg := fmt.Sprintf("%s at %s:%d", d.Text, d.URL, d.LineNumber+1)
			if d.Exception != nil {
				msg += ": " + d.Exception.Description
			}
			b.errs.mu.Lock()
			b.errs.list = append(b.errs.list, msg)
			b.errs.mu.Unlock()
		}
	}), "start Chromium")
	if dir := os.Getenv(EnvScreenshots); dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join("..", dir)
		}
		require.NoError(t, os.MkdirAll(dir, 0o755))
		b.shots = dir
	}
	t.Cleanup(func() {
		b.errs.mu.Lock()
		defer b.errs.mu.Unlock()
		require.Empty(t, b.errs.list, "JavaScript exceptions in the pages")
	})
	return b
}

// step runs a browser action with a deadline.
func step[T any](b *browser, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	v, err := runOnPage(ctx, a)
	require.NoError(b.t, err)
	return v
}

// runOnPage runs a, again when it met the page's JavaScript context in a
// change (a navigation that had not settled: "Cannot find context with
// specified id", "Execution context was destroyed"), until ctx ends.
func runOnPage[T any](ctx context.Context, a chromedp.Action[T]) (T, error) {
	for {
		v, err := chromedp.Run(ctx, a)
		if err == nil || ctx.Err() != nil {
			return v, err
		}
		if msg := err.Error(); !strings.Contains(msg, "Cannot find context with specified id") &&
			!strings.Contains(msg, "Execution context was destroyed") {
			return v, err
		}
	}
}

// open loads a page of the console.
func (b *browser) open(path string) {
	b.t.Helper()
	step(b, chromedp.Steps(chromedp.Navigate(b.base+path)))
}

// follow does what loads a new page (a click on a link, a form sent) and
// waits for the page's load.
func (b *browser) follow(a chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	step(b, chromedp.WaitEvent(page.LoadEventFired, nil, a))
}

// until waits until the JavaScript expression is true on the page; when it
// never is, the test fails with what the page shows.
func (b *browser) until(expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait+5*time.Second)
	defer cancel()
	_, err := runOnPage(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(browserWait)))
	if err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + '\n' + document.body.innerText`))
		b.t.Fatalf("waiting for %s: %v; the page shows:\n%s", expr, err, shown)
	}
}

// untilText waits until the element of sel holds text.
func (b *browser) untilText(sel, text string) {
	b.t.Helper()
	js, _ := json.Marshal(sel)
	want, _ := json.Marshal(text)
	b.until(fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? '').includes(%s)`, js, want))
}

// eval returns the value of a JavaScript expression on the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	return step(b, chromedp.Evaluate[T](expr))
}

func (b *browser) count(sel string) int {
	b.t.Helper()
	js, _ := json.Marshal(sel)
	return eval[int](b, fmt.Sprintf(`document.querySelectorAll(%s).length`, js))
}

func (b *browser) click(sel string) {
	b.t.Helper()
	step(b, chromedp.Click(chromedp.CSS(sel)))
}

// screenshot writes the page to the screenshot folder as name.png, when
// there is one: the whole page, or what the viewport shows (a phone's
// screen) when screen is set.
func (b *browser) screenshot(name string, screen bool) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	shot := chromedp.FullScreenshot(100)
	if screen {
		shot = chromedp.CaptureScreenshot()
	}
	png := step(b, shot)
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644))
}

// desktop and phone set the viewport's width.
func (b *browser) desktop() { step(b, chromedp.EmulateViewport(1200, 900)) }
func (b *browser) phone()   { step(b, chromedp.EmulateViewport(390, 844)) }

// apiCall sends a request to dev's API with token (none when empty) and
// decodes the answer, or its problem, into out; it returns the status.
func (b *devBundle) apiCall(t *testing.T, token, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	if out != nil {
		require.NoError(t, json.NewDecoder(res.Body).Decode(out))
	}
	return res.StatusCode
}

// waitStatus waits until the status satisfies ok.
func (b *devBundle) waitStatus(t *testing.T, token string, ok func(s ostatus.Snapshot) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		var s ostatus.Snapshot
		req, _ := http.NewRequest(http.MethodGet, b.base+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		return res.StatusCode == http.StatusOK && json.NewDecoder(res.Body).Decode(&s) == nil && s.Events != nil && ok(s)
	}, browserWait, 20*time.Millisecond)
}

// TestConsoleInBrowser drives the console in headless Chromium against
// `outboxd dev` with real data (SQLite store, the test Redis and a
// PostgreSQL database of its own): the token entered once for the tab,
// every page loaded, a poison dead letter replayed by a click once its
// cause is fixed (the DLQ count and the event's state change), a drop
// confirmed in the dialog, an event looked up by its key with its row, a
// window counted and replayed, a verify. It takes a screenshot of each page
// at desktop and phone width when OUTBOXD_TEST_SCREENSHOTS is set.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	const token = "console-token"
	ctx := context.Background()
	d := startDev(t, "", "--min-age", "1h", "--auth-token", token, "--ui-sample-every", "200ms",
		"--max-deliveries", "2", "--retry-backoff", "20ms")
	// A projection that rejects one device stands for a bug: its event is
	// dead-lettered as poison; dropping the constraint fixes it.
	_, err := d.pg.Pool.Exec(ctx, `ALTER TABLE events ADD CONSTRAINT console_test_bug CHECK (device_key <> 'bad-sensor')`)
	require.NoError(t, err)
	d.deadLetters(t) // one whose original is missing, one that is not a message
	for i := range 6 {
		code := d.apiCall(t, token, http.MethodPost, "/v1/events",
			fmt.Sprintf(`{"sourceKey":"plant-a","deviceKey":"sensor-1","occurredAt":"2026-11-01T%02d:00:00Z","payload":{"t":%d}}`, i, 20+i), nil)
		require.Equal(t, http.StatusCreated, code)
	}
	var poison struct{ ID string }
	require.Equal(t, http.StatusCreated, d.apiCall(t, token, http.MethodPost, "/v1/events",
		`{"sourceKey":"plant-a","deviceKey":"bad-sensor","occurredAt":"2026-11-01T07:30:00Z","payload":{"t":99}}`, &poison))
	d.waitStatus(t, token, func(s ostatus.Snapshot) bool {
		return s.Events.Synced == 6 && s.Events.Failed == 1 && s.DLQ.Length == 3
	})

	browser := newBrowser(t, d.base)
	browser.desktop()

	t.Run("TokenOncePerTab", func(t *testing.T) {
		b := browser.in(t)
		b.open("/ui/")
		b.until(`!document.getElementById('token-form').hidden`)
		step(b, chromedp.SendKeys(chromedp.ID("token-input"), token+kb.Enter))
		b.untilText(`[data-field="total"]`, "7")
		require.Equal(t, token, eval[string](b, `sessionStorage.getItem('outboxd.console.token')`))
		require.Empty(t, eval[string](b, `document.cookie`), "no cookie")
		require.NotContains(t, eval[string](b, `location.href`), token, "not in the URL")
	})

	t.Run("Overview", func(t *testing.T) {
		b := browser.in(t)
		b.untilText(`[data-field="failed"]`, "1")
		b.untilText(`[data-field="dlqLength"]`, "3")
		b.untilText("#nav-dlq-count", "(3)")
		b.untilText(`[data-field="dAlive"]`, "alive")
		b.untilText(`[data-field="replayName"]`, ":replay")
		b.untilText(`[data-field="replayLag"]`, "0")
		// Redis memory: the group's lag, the memory, the policy
		// and the relay, from /v1/status.
		b.untilText(fmt.Sprintf(`#stream-groups [data-group=%q]`, d.group), "lag 0")
		b.untilText(`[data-field="redisUsed"]`, "iB")
		b.untilText(`[data-field="redisPolicy"]`, "maxmemory-policy noeviction")
		b.untilText(`[data-field="relayHold"]`, "relays")
		require.True(t, eval[bool](b, `document.getElementById('redis-eviction').hidden`), "noeviction is no misconfiguration")
		require.True(t, eval[bool](b, `document.getElementById('stalled').hidden`), "nothing is stalled")
		b.until(`document.querySelectorAll('#breakers tbody tr').length === 3`)
		b.until(`document.querySelectorAll('#chart-throughput svg polyline').length > 0`)
		b.until(`document.querySelectorAll('#sweeps tbody tr th').length > 0`)
		require.Contains(t, eval[string](b, `document.querySelector('#chart-throughput svg').getAttribute('aria-label')`), "Ingested: last")
	})

	t.Run("DeadLetters", func(t *testing.T) {
		b := browser.in(t)
		b.open("/ui/dlq")
		b.untilText("#dlq-summary", "3 dead letters")
		require.Equal(t, 3, b.count("#dlq-table tbody tr"))
		b.screenshot("dlq", false)
		step(b, chromedp.SetValue(chromedp.ID("f-category"), "poison"))
		b.follow(chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)))
		require.Contains(t, eval[string](b, `location.search`), "category=poison")
		b.untilText("#dlq-summary", "1 shown")
		require.Contains(t, eval[string](b, `document.querySelector('#dlq-table tbody').textContent`), "failed", "the original is parked")
		b.follow(chromedp.Click(chromedp.CSS(`#dlq-table tbody th a`)))
		b.untilText("#dl-failure", "poison")
		b.untilText("#dl-original", "failed")
		b.untilText("#dl-original", poison.ID)
		b.screenshot("deadletter", false)
	})

	t.Run("ReplayByClick", func(t *testing.T) {
		b := browser.in(t)
		_, err := d.pg.Pool.Exec(ctx, `ALTER TABLE events DROP CONSTRAINT console_test_bug`)
		require.NoError(t, err)
		b.open("/ui/dlq?category=poison")
		b.untilText("#dlq-summary", "3 dead letters")
		b.click(`#dlq-table button[data-action="replay"]`)
		b.untilText("#action-result", "Replayed 1")
		b.untilText("#dlq-summary", "2 dead letters")
		b.untilText("#dlq-table tbody", "No dead letter matches")
		b.untilText("#nav-dlq-count", "(2)")
		d.waitStatus(t, token, func(s ostatus.Snapshot) bool { return s.Events.Synced == 7 && s.Events.Failed == 0 })

		b.open("/ui/journey?ref=" + poison.ID)
		b.until(`!document.getElementById('journey').hidden`)
		b.untilText("#j-original", "synced")
		b.untilText("#j-stream", "dlq-replay")
		require.Equal(t, 2, b.count("#j-stream tbody tr"), "the delivery that failed and the replay")
		b.untilText("#j-row", "Projected")
	})

	t.Run("DropNeedsConfirmation", func(t *testing.T) {
		b := browser.in(t)
		b.open("/ui/dlq?code=bad_message")
		b.untilText("#dlq-summary", "1 shown")
		b.click(`#dlq-table button[data-action="drop"]`)
		b.until(`document.getElementById('confirm').open`)
		b.click("#confirm-cancel")
		b.until(`!document.getElementById('confirm').open`)
		require.Equal(t, "", eval[string](b, `document.getElementById('action-result').textContent`), "cancelled: nothing done")
		b.click(`#dlq-table button[data-action="drop"]`)
		b.until(`document.getElementById('confirm').open`)
		b.click("#confirm-ok")
		b.untilText("#action-result", "Dropped 1")
		b.untilText("#dlq-summary", "1 dead letter in")
	})

	t.Run("JourneyByKey", func(t *testing.T) {
		b := browser.in(t)
		b.open("/ui/journey")
		step(b, chromedp.Focus(chromedp.ID("ref")))
		b.follow(chromedp.SendKeys(chromedp.ID("ref"), "k-missing"+kb.Enter))
		b.untilText("#load-error", "No original has")
		var first operator.EventsPage
		require.Equal(t, http.StatusOK, d.apiCall(t, token, http.MethodGet, "/v1/admin/events?limit=1", "", &first))
		key := first.Events[0].IdempotencyKey
		step(b, chromedp.SetValue(chromedp.ID("ref"), key))
		b.follow(chromedp.Click(chromedp.CSS(`form.lookup button[type=submit]`)))
		b.untilText("#j-original", "idempotency key")
		b.untilText("#j-row", first.Events[0].ID)
		b.untilText("#j-row", "Projected")
		b.untilText("#j-stats", "Events counted")
		b.untilText("#j-outbox", "UTC")
		b.untilText("#timeline", "Synced")
		b.screenshot("journey", false)
	})

	t.Run("Replay", func(t *testing.T) {
		b := browser.in(t)
		b.open("/ui/replay")
		step(b, chromedp.SendKeys(chromedp.ID("r-from"), "2026-11-01T00:00:00Z"))
		step(b, chromedp.SendKeys(chromedp.ID("r-to"), "2026-11-02T00:00:00Z"))
		require.True(t, eval[bool](b, `document.getElementById('replay-run').disabled`), "no replay before the count")
		b.click("#replay-count")
		b.untilText("#replay-result", "7 originals in the window")
		b.untilText("#replay-run", "Replay 7 originals")
		b.click("#replay-run")
		b.until(`document.getElementById('confirm').open`)
		require.Equal(t, "Replay 7 originals?", eval[string](b, `document.getElementById('confirm-title').textContent`), "the confirmation names the count")
		b.click("#confirm-ok")
		b.untilText("#replay-result", "Done: published 7 originals")
		step(b, chromedp.SendKeys(chromedp.ID("v-from"), "2026-11-01T00:00:00Z"))
		b.click("#verify-check")
		b.untilText("#verify-result", "Checked 7 synced originals and 7 rows: no drift")
		require.True(t, eval[bool](b, `document.getElementById('verify-repair').disabled`), "nothing to repair")
		b.screenshot("replay", false)

		// A row deleted by hand: the check finds it, and the repair asks
		// with the counts of what it will change; cancelled, it changes
		// nothing.
		rows := func() int64 {
			var n int64
			require.NoError(t, d.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
			return n
		}
		_, err := d.pg.Pool.Exec(ctx, `DELETE FROM events WHERE occurred_at = '2026-11-01T03:00:00Z'`)
		require.NoError(t, err)
		b.click("#verify-check")
		b.untilText("#verify-result", "drift 2")
		b.untilText("#verify-repair", "Repair 2 drifts")
		b.click("#verify-repair")
		b.until(`document.getElementById('confirm').open`)
		require.Equal(t, "Repair 2 drifts?", eval[string](b, `document.getElementById('confirm-title').textContent`))
		require.Contains(t, eval[string](b, `document.getElementById('confirm-text').textContent`),
			"1 synced original without a row will be re-published")
		require.Contains(t, eval[string](b, `document.getElementById('confirm-text').textContent`), "1 statistics row recomputed")
		b.click("#confirm-cancel")
		b.until(`!document.getElementById('confirm').open`)
		require.Equal(t, int64(6), rows(), "cancelled: nothing repaired")
		b.click("#verify-repair")
		b.until(`document.getElementById('confirm').open`)
		b.click("#confirm-ok")
		b.untilText("#verify-result", "Repaired: 1 re-published")
		require.Eventually(t, func() bool { return rows() == 7 }, 30*time.Second, 20*time.Millisecond)
	})

	t.Run("Keyboard", func(t *testing.T) {
		b := browser.in(t)
		b.open("/ui/dlq")
		b.untilText("#dlq-summary", "dead letter")
		step(b, chromedp.KeyEvent(kb.Tab))
		require.Equal(t, "Skip to content", eval[string](b, `document.activeElement.textContent`))
		step(b, chromedp.KeyEvent(kb.Enter))
		b.until(`document.activeElement.id === 'main'`)
	})

	t.Run("OverviewAfterTheActions", func(t *testing.T) {
		b := browser.in(t)
		b.open("/ui/")
		b.untilText(`[data-field="synced"]`, "7")
		b.untilText(`[data-field="dlqLength"]`, "1")
		b.untilText(`[data-field="replayPending"]`, "0") // the replays went through the lane
		b.until(`document.querySelectorAll('#chart-throughput svg polyline').length > 0`)
		b.screenshot("overview", false)
	})

	t.Run("PhoneWidth", func(t *testing.T) {
		b := browser.in(t)
		b.phone()
		for _, p := range []struct{ path, ready, name string }{
			{"/ui/", `document.querySelectorAll('#chart-throughput svg polyline').length > 0`, "overview-phone"},
			{"/ui/dlq", `document.querySelectorAll('#dlq-table tbody th').length > 0`, "dlq-phone"},
			{"/ui/journey?ref=" + poison.ID, `document.querySelector('#j-row dl') !== null`, "journey-phone"},
			{"/ui/replay", `document.getElementById('replay-count') !== null`, "replay-phone"},
		} {
			b.open(p.path)
			b.until(p.ready)
			require.LessOrEqual(t, eval[int](b, `document.documentElement.scrollWidth`), 390, "%s: no page-wide horizontal scroll", p.path)
			b.screenshot(p.name, true)
		}
		b.desktop()
	})
}

// TestConsoleReadOnly: with --ui-read-only the pages have no action button,
// and the admin API and the operator commands are refused the actions
// (403), while listings and dry runs still answer.
func TestConsoleReadOnly(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--min-age", "1h", "--ui-read-only")
	d.deadLetters(t)
	code, _ := d.post(t, "/v1/events", "k1", `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T00:00:00Z"}`)
	require.Equal(t, http.StatusCreated, code)

	var p httpapi.Problem
	require.Equal(t, http.StatusForbidden, d.apiCall(t, "", http.MethodPost, "/v1/admin/dlq:replay", `{"all":true}`, &p))
	require.Equal(t, httpapi.ProblemReadOnly, p.Type)
	require.Equal(t, http.StatusForbidden, d.apiCall(t, "", http.MethodPost, "/v1/admin/dlq:drop", `{"all":true}`, nil))
	window := `"from":"2026-11-01T00:00:00Z","to":"2026-11-02T00:00:00Z"`
	require.Equal(t, http.StatusForbidden, d.apiCall(t, "", http.MethodPost, "/v1/admin/replay", `{`+window+`}`, nil))
	require.Equal(t, http.StatusForbidden, d.apiCall(t, "", http.MethodPost, "/v1/admin/verify", `{"repair":true}`, nil))
	require.Equal(t, http.StatusOK, d.apiCall(t, "", http.MethodPost, "/v1/admin/replay", `{`+window+`,"dryRun":true}`, nil))
	exit, _, errOut := cli("dlq", "drop", "--all", "--yes", "--server", d.base)
	require.Equal(t, ExitUsage, exit)
	require.Contains(t, errOut, "read-only")

	b := newBrowser(t, d.base)
	b.desktop()
	b.open("/ui/dlq")
	b.untilText("#dlq-summary", "2 dead letters")
	require.Equal(t, 2, b.count("#dlq-table tbody th"))
	require.Zero(t, b.count("[data-action]"), "no action on the page")
	require.Zero(t, b.count("#dlq-table button"))
	require.Zero(t, b.count("dialog"))
	b.untilText(".badge-readonly", "read-only")
	id := eval[string](b, `document.querySelector('#dlq-table tbody th').textContent`)

	b.open("/ui/dlq/" + id)
	b.until(`!document.getElementById('dl-body').hidden`)
	require.Zero(t, b.count("[data-action]"))
	require.Zero(t, b.count("main button"))

	b.replayReadOnly()

	b.open("/ui/")
	b.untilText(`[data-field="total"]`, "1")
	require.Zero(t, b.count("[data-action]"))
	require.Equal(t, "No token needed.", eval[string](b, `document.getElementById('token-state').textContent`))
}

// TestConsoleScopes: the console shows what the entered token may do:
// with the viewer token every page reads but offers
// no action, and says so; the operator token brings the actions back; the
// ingest token is asked to be replaced.
func TestConsoleScopes(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--min-age", "1h", "--operator-token", "op-c0n5", "--viewer-token", "view-c0n5", "--ingest-token", "in-c0n5")
	d.deadLetters(t)
	require.Equal(t, http.StatusCreated, d.apiCall(t, "in-c0n5", http.MethodPost, "/v1/events",
		`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T00:00:00Z"}`, nil))

	b := newBrowser(t, d.base)
	b.desktop()
	enter := func(token string) {
		b.until(`!document.getElementById('token-form').hidden`)
		step(b, chromedp.SendKeys(chromedp.ID("token-input"), token+kb.Enter))
	}

	b.open("/ui/dlq")
	enter("in-c0n5")
	b.untilText("#token-error", "ingest token")
	require.Empty(t, eval[string](b, `document.getElementById('dlq-summary').dataset.length || ''`), "nothing was read with it")

	enter("view-c0n5")
	b.untilText("#dlq-summary", "2 dead letters")
	b.untilText("#token-scope", "viewer token: read-only")
	require.Zero(t, b.count("[data-action]"), "no action on the page")
	require.Zero(t, b.count("#dlq-table button"))
	require.Zero(t, b.count("#dlq-table th[data-operator]"))
	require.Zero(t, b.count("dialog"))

	b.replayReadOnly()
	b.untilText("#token-scope", "viewer token")

	b.click("#token-set")
	b.follow(chromedp.SendKeys(chromedp.ID("token-input"), "op-c0n5"+kb.Enter)) // the page comes back with its actions
	b.untilText("#token-scope", "operator token")
	b.until(`document.querySelectorAll('[data-action]').length === 2`)
	b.open("/ui/dlq")
	b.untilText("#dlq-summary", "2 dead letters")
	b.until(`document.querySelectorAll('#dlq-table button[data-action="drop"]').length === 2`)
	require.Equal(t, 1, b.count("dialog"))
}

// replayReadOnly checks the replay page of a read-only console
// (an instance's --ui-read-only, or the viewer token) holding one original
// of 2026-11-01: no action and no rebuild, but the count and the check
// answer.
func (b *browser) replayReadOnly() {
	b.t.Helper()
	b.open("/ui/replay")
	b.until(`document.querySelectorAll('[data-action], #r-rebuild').length === 0`)
	step(b, chromedp.SendKeys(chromedp.ID("r-from"), "2026-11-01T00:00:00Z"))
	step(b, chromedp.SendKeys(chromedp.ID("r-to"), "2026-11-02T00:00:00Z"))
	b.click("#replay-count")
	b.untilText("#replay-result", "1 original in the window")
	b.click("#verify-check")
	b.untilText("#verify-result", "no drift")
}

// TestConsoleRedisMemory: `outboxd dev` on a Redis of
// the test's own. At its maxmemory (noeviction) the overview shows the
// memory full, the relay holding and the pipeline stalled; with the
// memory raised and an evicting policy, the relay relays again and the
// eviction misconfiguration shows.
func TestConsoleRedisMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testkit.NewRedisServer(t)
	d := startDev(t, "", "--min-age", "1h", "--redis-url", srv.URL(), "--ui-sample-every", "200ms")
	require.Equal(t, http.StatusCreated, d.apiCall(t, "", http.MethodPost, "/v1/events",
		`{"sourceKey":"plant-a","deviceKey":"sensor-1","occurredAt":"2026-11-01T00:00:00Z","payload":{}}`, nil))
	browser := newBrowser(t, d.base)
	browser.desktop()
	b := browser.in(t)
	b.open("/ui/")
	b.untilText(fmt.Sprintf(`#stream-groups [data-group=%q]`, d.group), "lag 0")
	b.untilText(`[data-field="redisMax"]`, "no limit")
	b.untilText(`[data-field="relayHold"]`, "relays")

	rdb := srv.Client()
	used, err := rdb.InfoMap(ctx, "memory").Result()
	require.NoError(t, err)
	n, err := strconv.ParseInt(used["Memory"]["used_memory"], 10, 64)
	require.NoError(t, err)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(n/2, 10)).Err()) // full: it refuses writes
	b.untilText(`[data-field="relayHold"]`, "holds")
	b.untilText(`[data-field="redisUsed"]`, "full")
	b.untilText(`[data-field="redisMax"]`, "iB")
	b.until(`!document.getElementById('stalled').hidden`)
	require.True(t, eval[bool](b, `document.getElementById('redis-eviction').hidden`))

	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	b.untilText(`[data-field="redisPolicy"]`, "allkeys-lru")
	b.until(`!document.getElementById('redis-eviction').hidden`)
	b.untilText(`[data-field="relayHold"]`, "relays")
	b.until(`document.getElementById('stalled').hidden`)
}
