package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"unicode"
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
// it, and its hash.
type tokenOf struct {
	scope Scope
	field string
	hash  [sha256.Size]byte
}

// tokens lists the configured tokens of c.
func (c *Config) tokens() []tokenOf {
	var out []tokenOf
	for _, t := range []struct {
		scope Scope
		field string
		value string
	}{{ScopeIngest, "IngestToken", c.IngestToken}, {ScopeViewer, "ViewerToken", c.ViewerToken}, {ScopeOperator, "AuthToken", c.AuthToken}} {
		if t.value != "" {
			out = append(out, tokenOf{scope: t.scope, field: t.field, hash: sha256.Sum256([]byte(t.value))})
		}
	}
	return out
}

// validateTokens checks the tokens: no spaces or control characters, and
// no token for two scopes. The errors name the fields.
func (c *Config) validateTokens() error {
	var errs []error
	seen := map[string]string{}
	for _, t := range []struct{ field, value string }{{"IngestToken", c.IngestToken}, {"ViewerToken", c.ViewerToken}, {"AuthToken", c.AuthToken}} {
		if t.value == "" {
			continue
		}
		if err := CheckToken(t.value); err != nil {
			errs = append(errs, fmt.Errorf("%s %w", t.field, err))
		}
		if other, ok := seen[t.value]; ok {
			errs = append(errs, fmt.Errorf("%s is the same token as %s: each scope needs a token of its own", t.field, other))
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

// scopeOf returns the scope ServeHTTP found for r ("" for none: a request
// outside /v1/ on an instance with tokens).
func scopeOf(r *http.Request) Scope {
	s, _ := r.Context().Value(scopeKey{}).(Scope)
	return s
}

// authenticate returns the scope of r's bearer token, ok false when it
// carries none or an unknown one. Every configured token is compared, each
// in constant time (hashed first, so that the length does not show).
func (h *handler) authenticate(r *http.Request) (Scope, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	var found Scope
	for _, t := range h.tokens {
		if subtle.ConstantTimeCompare(got[:], t.hash[:]) == 1 {
			found = t.scope
		}
	}
	return found, found != ""
}

// admit checks a request before it is routed: with tokens, a request under
// /v1/ or /debug/ needs a known one (401); without, with
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
	if !protected(r) {
		return r, true
	}
	scope, ok := h.authenticate(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="outboxd"`)
		writeProblem(w, r, newProblem(http.StatusUnauthorized, "", "", "a valid bearer token is required"))
		return nil, false
	}
	if scope != ScopeIngest {
		privilege(r) // the reserve of bodies is the operator's and viewer's
	}
	return r.WithContext(context.WithValue(r.Context(), scopeKey{}, scope)), true
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
	writeJSON(w, r, http.StatusOK, Whoami{Scope: s, AuthRequired: len(h.tokens) > 0,
		Ingest: h.writer != nil && accessIngest.allows(s), Read: accessView.allows(s),
		Act: !h.cfg.ReadOnly && h.cfg.Admin != nil && accessOperate.allows(s)})
}
