package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// RefreshDefault is how often the overview reads the status again, in
// seconds.
const RefreshDefault = 5

//go:embed templates/*.html assets/*
var files embed.FS

// Config configures the console. A nil config means all defaults.
type Config struct {
	// ReadOnly leaves every action out of the pages (replay, drop, repair).
	// Defaults to false.
	ReadOnly bool
	// Instance names the instance in the pages' header (its role).
	// Defaults to "outboxd".
	Instance string
	// AuthRequired says that the API wants a bearer token: the pages ask
	// for it before their first request. Defaults to false (they ask when
	// the API answers 401).
	AuthRequired bool
	// Refresh is the overview's refresh period in seconds. Defaults to
	// RefreshDefault.
	Refresh int
}

// page is one page of the console.
type page struct {
	name  string // template file and data-page value
	title string
	nav   string // the navigation entry it belongs to
}

// pages are the console's pages by route.
var pages = map[string]page{
	"GET " + Prefix + "{$}":      {"overview", "Overview", "overview"},
	"GET " + Prefix + "dlq":      {"dlq", "Dead letters", "dlq"},
	"GET " + Prefix + "dlq/{id}": {"deadletter", "Dead letter", "dlq"},
	"GET " + Prefix + "journey":  {"journey", "Event journey", "journey"},
	"GET " + Prefix + "replay":   {"replay", "Replay", "replay"},
}

// moved are the former paths of pages, answered with a permanent redirect
// to the page's path (the query kept) for one version after the move:
// /ui/reprocess was the replay page's.
var moved = map[string]string{
	Prefix + "reprocess": Prefix + "replay",
}

// notFound is the page of every other path under Prefix.
var notFound = page{"notfound", "Not found", ""}

// asset is an embedded file with its version (a hash of its content).
type asset struct {
	body        []byte
	contentType string
	version     string
}

// Console serves the pages and their assets.
type Console struct {
	cfg       Config
	mux       *http.ServeMux
	templates map[string]*template.Template
	assets    map[string]asset
}

// pageData is what a page's template gets.
type pageData struct {
	Page, Title, Nav, Instance string
	ReadOnly, AuthRequired     bool
	Refresh                    int
	// Scripts are the page's own scripts, after console.js.
	Scripts []string
	// ID is the dead letter of the dead-letter page; Ref the reference of
	// the journey page; Category, Code and After the DLQ page's filter.
	ID, Ref, Category, Code, After string
	// Filter is the rest of the DLQ page's search form, as the query gave
	// it (GET /v1/admin/dlq checks it).
	Filter dlqFilter
}

// dlqFilter is the DLQ search form's fields beside the category and code.
type dlqFilter struct {
	Error, SourceKey, DeviceKey, Type, Since, Until, Payload string
}

// New returns the console's handler, to be mounted at Prefix.
func New(cfg *Config) (*Console, error) {
	c := &Console{mux: http.NewServeMux(), templates: map[string]*template.Template{}, assets: map[string]asset{}}
	if cfg != nil {
		c.cfg = *cfg
	}
	if c.cfg.Instance == "" {
		c.cfg.Instance = "outboxd"
	}
	if c.cfg.Refresh == 0 {
		c.cfg.Refresh = RefreshDefault
	}
	if c.cfg.Refresh < 1 {
		return nil, fmt.Errorf("invalid console config: Refresh must be at least 1 second (got %d)", c.cfg.Refresh)
	}
	if err := c.loadAssets(); err != nil {
		return nil, err
	}
	funcs := template.FuncMap{"asset": c.assetURL}
	for _, p := range append(slices.Collect(maps.Values(pages)), notFound) {
		t, err := template.New(p.name).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+p.name+".html")
		if err != nil {
			return nil, fmt.Errorf("error parsing the console's %s page: %w", p.name, err)
		}
		c.templates[p.name] = t
	}
	for pattern, p := range pages {
		c.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { c.render(w, r, p, http.StatusOK) })
	}
	for from, to := range moved {
		c.mux.HandleFunc("GET "+from, func(w http.ResponseWriter, r *http.Request) {
			target := to
			if r.URL.RawQuery != "" {
				target += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, target, http.StatusMovedPermanently)
		})
	}
	c.mux.HandleFunc("GET "+Prefix+"assets/{name}", c.serveAsset)
	c.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, notFound, http.StatusNotFound)
	})
	return c, nil
}

// ServeHTTP serves the console's routes under Prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.mux.ServeHTTP(w, r) }

// loadAssets reads the embedded assets and their versions.
func (c *Console) loadAssets() error {
	return fs.WalkDir(files, "assets", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return fmt.Errorf("error reading the console's asset %s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		ct := "application/octet-stream"
		switch path.Ext(name) {
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".js":
			ct = "text/javascript; charset=utf-8"
		}
		c.assets[path.Base(name)] = asset{body: b, contentType: ct, version: hex.EncodeToString(sum[:8])}
		return nil
	})
}

// assetURL returns the URL of an asset with its version, so a browser may
// keep it for as long as it likes.
func (c *Console) assetURL(name string) (string, error) {
	a, ok := c.assets[name]
	if !ok {
		return "", fmt.Errorf("no console asset %q", name)
	}
	return Prefix + "assets/" + name + "?v=" + a.version, nil
}

// securityHeaders are sent with every page and asset: the console's own
// origin only, no framing, no referrer.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
}

// render writes page p with status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, p page, status int) {
	q := r.URL.Query()
	data := pageData{Page: p.name, Title: p.title, Nav: p.nav, Instance: c.cfg.Instance, ReadOnly: c.cfg.ReadOnly,
		AuthRequired: c.cfg.AuthRequired, Refresh: c.cfg.Refresh, ID: r.PathValue("id"), Ref: q.Get("ref"),
		Category: q.Get("category"), Code: q.Get("code"), After: q.Get("after"),
		Filter: dlqFilter{Error: q.Get("error"), SourceKey: q.Get("sourceKey"), DeviceKey: q.Get("deviceKey"), Type: q.Get("type"),
			Since: q.Get("since"), Until: q.Get("until"), Payload: q.Get("payload")}}
	if p != notFound {
		s, err := c.assetURL(p.name + ".js")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		data.Scripts = []string{s}
	}
	var buf bytes.Buffer
	if err := c.templates[p.name].ExecuteTemplate(&buf, "layout", data); err != nil {
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	securityHeaders(h)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// serveAsset serves an embedded asset: kept for a year when asked for by
// its versioned URL, revalidated by its ETag otherwise.
func (c *Console) serveAsset(w http.ResponseWriter, r *http.Request) {
	a, ok := c.assets[r.PathValue("name")]
	if !ok {
		c.render(w, r, notFound, http.StatusNotFound)
		return
	}
	h := w.Header()
	securityHeaders(h)
	etag := `"` + a.version + `"`
	h.Set("ETag", etag)
	if r.URL.Query().Get("v") == a.version {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", a.contentType)
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.body)
	}
}
