package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"github.com/outboxd/outboxd/outbox"
)

// Scope is what a bearer token may do (README.md, "Access"). Every token is
// optional; once one is set, every /v1/ route needs one.
type Scope string

// The scopes, from the narrowest.
const (
	// ScopeIngest writes events (POST /v1/events, POST /v1/events:batch):
	// Config.IngestToken. It reads none, not even its own: an ingest
	// client holding ids of other clients' events (from a log, a
	// neighbour) must not read them.
	ScopeIngest Scope = "ingest"
	// ScopeViewer reads everything (every GET: one event, the status, the
	// admin listings, the journey, the console without actions) and runs what
	// changes nothing (a replay's dry run, verify without repair):
	// Config.ViewerToken.
	ScopeViewer Scope = "viewer"
	// ScopeOperator does everything, the admin actions included:
	// Config.AuthToken.
	ScopeOperator Scope = "operator"
	// ScopeOpen is the scope of every request when no token is set: all
	// of them (to the clients whose Host names a loopback address, with
	// Config.LoopbackHosts).
	ScopeOpen Scope = "open"
)

// Problem types of access.
const (
	// ProblemScope: the bearer token is known, but the route is outside
	// its scope (403); the problem's scope member names the scope the route
	// needs.
	ProblemScope = "urn:outboxd:problem:insufficient-scope"
	// ProblemHost: no token is set, so the API answers only requests whose
	// Host names a loopback address (403), which a page of another origin
	// cannot send (DNS rebinding).
	ProblemHost = "urn:outboxd:problem:host-not-allowed"
)

// access is what a route asks of the caller's scope.
type access int

const (
	// accessOpen: no token (the probes, /metrics, the console's pages).
	accessOpen access = iota
	// accessAny: any known token (GET /v1/whoami).
	accessAny
	// accessIngest: the ingest token (or the operator's).
	accessIngest
	// accessView: the viewer token (or the operator's).
	accessView
	// accessOperate: the operator token.
	accessOperate
)

// allows reports whether a caller of scope s may use a route of access a.
func (a access) allows(s Scope) bool {
	switch s {
	case ScopeOpen, ScopeOperator:
		return true
	case ScopeIngest:
		return a == accessOpen || a == accessAny || a == accessIngest
	case ScopeViewer:
		return a == accessOpen || a == accessAny || a == accessView
	}
	return a == accessOpen
}

// needs is the narrowest scope that opens a route of access a.
func (a access) needs() Scope {
	switch a {
	case accessIngest:
		return ScopeIngest
	case accessView:
		return ScopeViewer
	case accessOperate:
		return ScopeOperator
	}
	return ""
}

// tokenOf is one configured token: its scope, the Config field that holds
// it, the ingest client it names ("" for the default one) and its hash.
type tokenOf struct {
	scope  Scope
	field  string
	client string
	value  string
	hash   [sha256.Size]byte
}

// tokenList lists the configured tokens of c, the named ingest clients in
// name order, without their hashes.
func (c *Config) tokenList() []tokenOf {
	var out []tokenOf
	add := func(t tokenOf) {
		if t.value != "" {
			out = append(out, t)
		}
	}
	add(tokenOf{scope: ScopeIngest, field: "IngestToken", value: c.IngestToken})
	for _, name := range slices.Sorted(maps.Keys(c.IngestClients)) {
		add(tokenOf{scope: ScopeIngest, field: fmt.Sprintf("IngestClients[%s]", name), client: name, value: c.IngestClients[name]})
	}
	add(tokenOf{scope: ScopeViewer, field: "ViewerToken", value: c.ViewerToken})
	add(tokenOf{scope: ScopeOperator, field: "AuthToken", value: c.AuthToken})
	return out
}

// tokens lists the configured tokens of c with their hashes.
func (c *Config) tokens() []tokenOf {
	out := c.tokenList()
	for i := range out {
		out[i].hash, out[i].value = sha256.Sum256([]byte(out[i].value)), ""
	}
	return out
}

// validateTokens checks the tokens: no spaces or control characters, no
// token for two scopes or clients, and the clients' names. The errors name
// the fields.
func (c *Config) validateTokens() error {
	var errs []error
	for name, token := range c.IngestClients {
		if reason := outbox.ClientNameProblem(name); reason != "" {
			errs = append(errs, fmt.Errorf("IngestClients: the name %q %s", name, reason))
		} else if name == outbox.ClientDefault {
			errs = append(errs, fmt.Errorf("IngestClients: the name %q is IngestToken's", name))
		}
		if token == "" {
			errs = append(errs, fmt.Errorf("IngestClients[%s] is empty", name))
		}
	}
	seen := map[string]string{}
	for _, t := range c.tokenList() {
		if err := CheckToken(t.value); err != nil {
			errs = append(errs, fmt.Errorf("%s %w", t.field, err))
		}
		if other, ok := seen[t.value]; ok {
			errs = append(errs, fmt.Errorf("%s is the same token as %s: each scope and client needs a token of its own", t.field, other))
		}
		seen[t.value] = t.field
	}
	return errors.Join(errs...)
}

// CheckToken returns an error when token cannot be a bearer token: empty,
// or holding a space or a control character.
func CheckToken(token string) error {
	switch {
	case token == "":
		return errors.New("is empty")
	case strings.ContainsFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return errors.New("must not contain spaces or control characters")
	}
	return nil
}

// scopeKey is the context key of the caller's scope.
type scopeKey struct{}

// clientKey is the context key of the caller's ingest client name (absent
// for the default client).
type clientKey struct{}

// clientOf returns the name of the ingest client of r's token, "" for the
// default client (IngestToken, another scope's token, or none).
func clientOf(r *http.Request) string {
	c, _ := r.Context().Value(clientKey{}).(string)
	return c
}

// scopeOf returns the scope ServeHTTP found for r ("" for none: a request
// outside /v1/ on an instance with tokens).
func scopeOf(r *http.Request) Scope {
	s, _ := r.Context().Value(scopeKey{}).(Scope)
	return s
}

// authenticate returns the token r's bearer token is, nil when it carries
// none or an unknown one. Every configured token is compared, each in
// constant time (hashed first, so that the length does not show).
func (h *handler) authenticate(r *http.Request) *tokenOf {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	var found *tokenOf
	for i := range h.tokens {
		if subtle.ConstantTimeCompare(got[:], h.tokens[i].hash[:]) == 1 {
			found = &h.tokens[i]
		}
	}
	return found
}

// admit checks a request before it is routed: with tokens, a request under
// /v1/ or /debug/, or to one of the program's own routes, needs a known one
// (401); without, with
// Config.LoopbackHosts, every request but the probes and /metrics needs a
// Host that names a loopback address (403). It returns the request with
// its scope, or false when it answered.
func (h *handler) admit(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if len(h.tokens) == 0 {
		if h.cfg.LoopbackHosts && !openPath(r) && !LoopbackHost(r.Host) {
			writeProblem(w, r, newProblem(http.StatusForbidden, ProblemHost, "Host not allowed",
				"no token is set, so this instance answers only requests whose Host names a loopback address (localhost, 127.0.0.1, [::1]); "+
					"set a token (--operator-token, --viewer-token, --ingest-token) to serve other names"))
			return nil, false
		}
		return r.WithContext(context.WithValue(r.Context(), scopeKey{}, ScopeOpen)), true
	}
	if !protected(r) && !h.ownRoute(r) {
		return r, true
	}
	t := h.authenticate(r)
	if t == nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="outboxd"`)
		writeProblem(w, r, newProblem(http.StatusUnauthorized, "", "", "a valid bearer token is required"))
		return nil, false
	}
	if t.scope != ScopeIngest {
		privilege(r) // the reserve of bodies is the operator's and viewer's
	}
	ctx := context.WithValue(r.Context(), scopeKey{}, t.scope)
	if t.client != "" {
		ctx = context.WithValue(ctx, clientKey{}, t.client)
		nameClient(r, t.client) // its share of the bodies is its own, wherever it connects from
	}
	return r.WithContext(ctx), true
}

// guard serves next to the callers whose scope allows a; others get 403
// naming the scope the route needs.
func guard(a access, next http.Handler) http.Handler {
	if a == accessOpen {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := scopeOf(r); !a.allows(s) {
			forbidScope(w, r, a.needs(), s)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errScope refuses an admin request that changes something to a token
// that may only read (the viewer token).
var errScope = errors.New("this action changes something: it needs the operator token")

// forbidScope answers 403: the route needs scope need, the caller has s.
func forbidScope(w http.ResponseWriter, r *http.Request, need, s Scope) {
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="outboxd", error="insufficient_scope", scope=%q`, string(need)))
	p := newProblem(http.StatusForbidden, ProblemScope, "Token outside its scope",
		fmt.Sprintf("%s %s needs the %s token%s; this request carries the %s token", r.Method, r.URL.Path, need, orOperator(need), s))
	p.Scope = string(need)
	writeProblem(w, r, p)
}

func orOperator(need Scope) string {
	if need == ScopeOperator {
		return ""
	}
	return " (or the operator token)"
}

// protected reports a request under /v1 (fail closed: /v1x too) or the
// profiles under /debug/. It looks at the decoded and the raw path so that
// an escaped slash cannot slip past.
func protected(r *http.Request) bool {
	for _, p := range []string{r.URL.Path, r.URL.EscapedPath()} {
		if strings.HasPrefix(p, "/v1") || strings.HasPrefix(p, "/debug") {
			return true
		}
	}
	return false
}

// ownRoute reports whether r goes to one of the program's own routes
// (Config.Routes).
func (h *handler) ownRoute(r *http.Request) bool {
	if len(h.own) == 0 {
		return false
	}
	_, pattern := h.mux.Handler(r)
	return h.own[pattern]
}

// openPath reports the routes that any client may reach, whatever its Host:
// the probes and /metrics (a kubelet or Prometheus names the pod's address).
func openPath(r *http.Request) bool {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
		return r.URL.RawPath == ""
	}
	return false
}

// LoopbackHost reports whether a Host header (or an address) names a
// loopback address: localhost, 127.0.0.0/8 or ::1, with or without a port.
// An empty Host (HTTP/1.0) counts: no browser sends one.
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
	if host == "" || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Whoami is the answer of GET /v1/whoami: the scope of the caller's token
// and what it may do here, which the console shows.
type Whoami struct {
	// Scope is "ingest", "viewer", "operator", or "open" when the instance
	// has no token.
	Scope Scope `json:"scope"`
	// Client is the name of the caller's ingest client, absent for the
	// default one (--ingest-token, or another scope's token).
	Client string `json:"client,omitempty"`
	// AuthRequired is true when the instance has a token.
	AuthRequired bool `json:"authRequired"`
	// Ingest: may write events. Read: may read the status and the admin
	// listings. Act: may run the admin actions that change something
	// (false on a read-only instance, whatever the token).
	Ingest bool `json:"ingest"`
	Read   bool `json:"read"`
	Act    bool `json:"act"`
}

func (h *handler) whoami(w http.ResponseWriter, r *http.Request) {
	s := scopeOf(r)
	writeJSON(w, r, http.StatusOK, Whoami{Scope: s, Client: clientOf(r), AuthRequired: len(h.tokens) > 0,
		Ingest: h.writer != nil && accessIngest.allows(s), Read: accessView.allows(s),
		Act: !h.cfg.ReadOnly && h.cfg.Admin != nil && accessOperate.allows(s)})
}
