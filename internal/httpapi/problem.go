package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemContentType is the media type of an RFC 9457 problem document.
const ProblemContentType = "application/problem+json"

// Problem types. Each is a URN (RFC 9457 allows any URI; a URN does not
// pretend to be a page one can open). Errors without a type of their own use
// "about:blank", whose title is the HTTP status text.
const (
	ProblemMalformed   = "urn:outboxd:problem:malformed-request"
	ProblemValidation  = "urn:outboxd:problem:validation"
	ProblemMismatch    = "urn:outboxd:problem:idempotency-key-reused"
	ProblemUnavailable = "urn:outboxd:problem:store-unavailable"
	// ProblemBusy is a 503 that did nothing: the server was reading too
	// many bodies at once, or shutting down. The same request may be sent
	// again after Retry-After.
	ProblemBusy  = "urn:outboxd:problem:busy"
	problemBlank = "about:blank"
)

// Problem is an RFC 9457 problem document. Errors lists the offending fields
// of a 422 (and the unknown field of a 400).
type Problem struct {
	Type     string         `json:"type"`
	Title    string         `json:"title"`
	Status   int            `json:"status"`
	Detail   string         `json:"detail,omitempty"`
	Instance string         `json:"instance,omitempty"`
	Errors   []ProblemField `json:"errors,omitempty"`
	// Scope names the scope a 403 ProblemScope needs: "ingest", "viewer"
	// or "operator".
	Scope string `json:"scope,omitempty"`
}

// ProblemField is one offending field of a request: its path as the
// client wrote it ("events[3].deviceKey", "payload.a[0].x", the
// Idempotency-Key header) and what is wrong with it ("is required").
type ProblemField struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// newProblem returns a problem of type typ (about:blank when empty) whose
// title is the status text unless a specific type names its own.
func newProblem(status int, typ, title, detail string) *Problem {
	if typ == "" {
		typ = problemBlank
	}
	if title == "" {
		title = http.StatusText(status)
	}
	return &Problem{Type: typ, Title: title, Status: status, Detail: detail}
}

// writeProblem sends p, with instance set to the request path.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	body, err := json.Marshal(p)
	if err != nil { // only strings, ints and ProblemFields: cannot fail
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	noStore(h)
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// writeJSON sends v as application/json with status.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, r, newProblem(http.StatusInternalServerError, "", "", "the response could not be encoded"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	noStore(h)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// noStore marks an answer of the API as one that no cache keeps (the
// status and the admin answers describe the pipeline now, and may name
// events) and whose type is not to be sniffed.
func noStore(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}
