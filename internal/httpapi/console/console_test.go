package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi/console"
)

// get serves one request and returns the status, the headers and the body.
func get(t *testing.T, h http.Handler, path string, header ...string) (int, http.Header, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, rec.Header(), string(body)
}

var pages = []struct{ path, title, nav, script string }{
	{"/ui/", "Overview", "/ui/", "overview.js"},
	{"/ui/dlq?category=poison", "Dead letters", "/ui/dlq", "dlq.js"},
	{"/ui/dlq/1-0", "Dead letter", "/ui/dlq", "deadletter.js"},
	{"/ui/journey?ref=k1", "Event journey", "/ui/journey", "journey.js"},
	{"/ui/replay", "Replay", "/ui/replay", "replay.js"},
}

// TestPages: every page is HTML with the console's security headers, its
// own script after the shared one, the navigation marking where it is, and
// the actions of a console that is not read-only.
func TestPages(t *testing.T) {
	t.Parallel()
	c, err := console.New(&console.Config{Instance: "work", AuthRequired: true})
	require.NoError(t, err)
	for _, p := range pages {
		t.Run(p.title, func(t *testing.T) {
			code, header, body := get(t, c, p.path)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, "text/html; charset=utf-8", header.Get("Content-Type"))
			require.Contains(t, header.Get("Content-Security-Policy"), "script-src 'self'")
			require.Contains(t, header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
			require.Equal(t, "nosniff", header.Get("X-Content-Type-Options"))
			require.Contains(t, body, "<title>"+p.title+" · outboxd console (work)</title>")
			require.Contains(t, body, `<a href="`+p.nav+`" aria-current="page">`)
			require.Equal(t, 1, strings.Count(body, `aria-current="page"`))
			require.Regexp(t, `src="/ui/assets/console\.js\?v=[0-9a-f]{16}" defer></script>\s*<script src="/ui/assets/`+regexp.QuoteMeta(p.script), body)
			require.Contains(t, body, `data-auth-required="true"`)
			require.Contains(t, body, `data-read-only="false"`)
			require.Contains(t, body, `<dialog id="confirm"`)
			require.NotContains(t, body, "<script>", "no inline script: the policy forbids it")
		})
	}
	_, _, body := get(t, c, "/ui/dlq?category=poison&code=bad")
	require.Contains(t, body, `<option value="poison" selected>`, "the filter is shown as asked")
	require.Contains(t, body, `value="bad"`)
	for _, path := range []string{"/ui/dlq", "/ui/dlq/1-0", "/ui/replay"} {
		_, _, body := get(t, c, path)
		require.Contains(t, body, "data-action=", path)
	}
}

// TestReprocessMovedToReplay: the replay page's former path answers with a
// permanent redirect to /ui/replay, keeping the query, and no longer
// renders a page of its own.
func TestReprocessMovedToReplay(t *testing.T) {
	t.Parallel()
	c, err := console.New(nil)
	require.NoError(t, err)
	code, header, body := get(t, c, "/ui/reprocess")
	require.Equal(t, http.StatusMovedPermanently, code)
	require.Equal(t, "/ui/replay", header.Get("Location"))
	require.NotContains(t, body, "<h1>")
	code, header, _ = get(t, c, "/ui/reprocess?from=2026-11-01T00:00:00Z")
	require.Equal(t, http.StatusMovedPermanently, code)
	require.Equal(t, "/ui/replay?from=2026-11-01T00:00:00Z", header.Get("Location"))
	_, _, body = get(t, c, "/ui/replay")
	require.Contains(t, body, "<h1>Replay</h1>")
	require.NotContains(t, body, "Reprocessing")
}

// TestReadOnlyPages: a read-only console has no action on any page, not
// even a hidden one, and says that it is read-only.
func TestReadOnlyPages(t *testing.T) {
	t.Parallel()
	c, err := console.New(&console.Config{ReadOnly: true})
	require.NoError(t, err)
	for _, p := range pages {
		code, _, body := get(t, c, p.path)
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, body, "data-action", p.path)
		require.NotContains(t, body, "rebuild", p.path)
		require.NotContains(t, body, `<dialog`, p.path)
		require.Contains(t, body, "read-only", p.path)
		require.Contains(t, body, `data-read-only="true"`, p.path)
		require.Contains(t, body, "instance: <strong>outboxd</strong>", "the default instance name")
	}
}

// TestPageDataIsEscaped: what comes from the URL is text in the page.
func TestPageDataIsEscaped(t *testing.T) {
	t.Parallel()
	c, err := console.New(nil)
	require.NoError(t, err)
	_, _, body := get(t, c, `/ui/journey?ref=%22%3E%3Cscript%3Ealert(1)%3C/script%3E`)
	require.NotContains(t, body, "<script>alert")
	require.Contains(t, body, `value="&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"`)
	_, _, body = get(t, c, `/ui/dlq/%3Cb%3E`)
	require.Contains(t, body, `&lt;b&gt;`)
}

// TestAssets: an asset asked for by its versioned URL is kept for a year,
// otherwise revalidated by its ETag; an unknown one is not found.
func TestAssets(t *testing.T) {
	t.Parallel()
	c, err := console.New(nil)
	require.NoError(t, err)
	_, _, page := get(t, c, "/ui/")
	url := regexp.MustCompile(`/ui/assets/console\.css\?v=[0-9a-f]+`).FindString(page)
	require.NotEmpty(t, url)
	code, header, body := get(t, c, url)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/css; charset=utf-8", header.Get("Content-Type"))
	require.Contains(t, header.Get("Cache-Control"), "immutable")
	require.Contains(t, body, ":focus-visible")
	etag := header.Get("ETag")
	require.NotEmpty(t, etag)

	code, header, _ = get(t, c, "/ui/assets/console.css")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "no-cache", header.Get("Cache-Control"))
	code, _, body = get(t, c, "/ui/assets/console.css", "If-None-Match", etag)
	require.Equal(t, http.StatusNotModified, code)
	require.Empty(t, body)

	code, header, _ = get(t, c, "/ui/assets/console.js")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/javascript; charset=utf-8", header.Get("Content-Type"))
	code, _, _ = get(t, c, "/ui/assets/missing.js")
	require.Equal(t, http.StatusNotFound, code)
}

// TestNotFound: a path of no page is a page that says so.
func TestNotFound(t *testing.T) {
	t.Parallel()
	c, err := console.New(nil)
	require.NoError(t, err)
	code, header, body := get(t, c, "/ui/nothing/here")
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "text/html; charset=utf-8", header.Get("Content-Type"))
	require.Contains(t, body, "<h1>Not found</h1>")
	require.NotContains(t, body, `aria-current="page"`)

	_, err = console.New(&console.Config{Refresh: -1})
	require.ErrorContains(t, err, "Refresh")
}
