package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outboxd/outbox"
)

// readBody checks the content type and coding and reads the body up to
// MaxBody. On failure it has answered and returns false.
func (h *handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if !isJSON(r.Header.Get("Content-Type")) {
		writeProblem(w, r, newProblem(http.StatusUnsupportedMediaType, "", "", "Content-Type must be application/json (charset utf-8, if any)"))
		return nil, false
	}
	if coding, ok := identityCoded(r.Header.Values("Content-Encoding")); !ok {
		// RFC 9110 section 15.5.16: say which codings would do.
		w.Header().Set("Accept-Encoding", "identity")
		writeProblem(w, r, newProblem(http.StatusUnsupportedMediaType, "", "",
			fmt.Sprintf("Content-Encoding %q is not accepted: send the body uncompressed (identity)", coding)))
		return nil, false
	}
	if r.ContentLength > h.cfg.MaxBody {
		return nil, h.tooLarge(w, r, h.cfg.MaxBody)
	}
	// Full duplex: the 413 goes out while the rest of the body is still
	// read (tooLarge), which net/http would otherwise refuse.
	_ = http.NewResponseController(w).EnableFullDuplex()
	body, err := readAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody), r.ContentLength)
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return body, true
	case errors.As(err, &tooLarge):
		return nil, h.tooLarge(w, r, tooLarge.Limit)
	}
	writeProblem(w, r, h.bodyProblem(w, err))
	return nil, false
}

// bodyProblem is the answer to a body that could not be read (other than
// too large): 408 when it came too slowly, 503 with Retry-After when the
// server is shutting down or reading too many bodies already (ProblemBusy:
// nothing was done, the same request may come again), 400 otherwise.
func (h *handler) bodyProblem(w http.ResponseWriter, err error) *Problem {
	switch {
	case errors.Is(err, errBodyTimeout):
		w.Header().Set("Connection", "close")
		return newProblem(http.StatusRequestTimeout, "", "", "the body did not arrive in time")
	case errors.Is(err, errShuttingDown), errors.Is(err, errTooManyBodies):
		detail := "the server is shutting down; retry"
		if errors.Is(err, errTooManyBodies) {
			detail = "too many requests are sending their bodies at once; retry later"
		}
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", h.retryAfter)
		return newProblem(http.StatusServiceUnavailable, ProblemBusy, "", detail)
	}
	return newProblem(http.StatusBadRequest, ProblemMalformed, "Malformed request", "the body could not be read")
}

// readAll reads r to its end into one buffer: after the first read (which
// takes the body's slot under a Server) it grows to the declared length, if
// any (at most MaxBody: readBody refuses more), so that a body costs its
// size once. io.ReadAll reads into growing chunks and copies them into a
// right-sized slice at the end, even when the read fails: a body that timed
// out cost twice its size.
func readAll(r io.Reader, length int64) ([]byte, error) {
	size := 512
	if length >= 0 && length < int64(size) {
		size = int(length) + 1 // the read that sees EOF needs room
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			if int64(len(b)) < length {
				b = slices.Grow(b, int(length)+1-len(b))
			} else {
				b = append(b, 0)[:len(b)]
			}
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// Lingering close of a body too large: how much more of it is read, and
// for how long, after the 413 went out.
const (
	// DiscardExcess bounds the bytes of a body too large that are read
	// and thrown away after its 413.
	DiscardExcess = 4 << 20
	// DiscardTimeout bounds the time spent reading them.
	DiscardTimeout = 5 * time.Second
)

// tooLarge answers 413 and closes the connection. Like nginx's lingering
// close, it first reads and discards what the client still sends, up to
// DiscardExcess bytes within DiscardTimeout: a client that writes its whole
// body before it reads (Python's urllib, most simple clients) would
// otherwise meet a reset on a connection closed with its data unread, lose
// the 413, and retry the same body for ever. A body declared larger than
// MaxBody + DiscardExcess is not waited for.
func (h *handler) tooLarge(w http.ResponseWriter, r *http.Request, limit int64) bool {
	w.Header().Set("Connection", "close")
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	writeProblem(w, r, newProblem(http.StatusRequestEntityTooLarge, "", "", fmt.Sprintf("the body is larger than %d bytes", limit)))
	if r.ContentLength > limit+DiscardExcess {
		return false
	}
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(DiscardTimeout))
	_, _ = io.CopyN(io.Discard, r.Body, DiscardExcess)
	return false
}

// identityCoded reports whether the Content-Encoding values name no coding
// but identity; otherwise it returns the first other coding. outboxd
// decodes none: the body limit stays a limit on the bytes received and
// held, and no compressed body can expand past it.
func identityCoded(values []string) (string, bool) {
	for _, v := range values {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return c, false
			}
		}
	}
	return "", true
}

// isJSON accepts application/json with no charset or charset utf-8.
func isJSON(contentType string) bool {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8")
}

// requestError is a body that is not the JSON the route expects (400).
type requestError struct {
	// status is the answer's status, 0 for 400.
	status int
	detail string
	// field names the offending member, if any, and reason says what is
	// wrong with it.
	field, reason string
}

func (e *requestError) Error() string { return e.detail }

// validationError lists the invalid fields of an ingest request (422),
// each named as the client wrote it: the request's own fields
// (events[3].deviceKey, Idempotency-Key) and the outbox's FieldErrors,
// which name only an input's index and the field inside it.
type validationError struct {
	Fields []ProblemField
	// status is the answer's status, 0 for 422: 413 for an event refused
	// for its size in the store (outbox.ErrTooLarge).
	status int
}

// Error is the problem's detail: "invalid event: " and each field with
// its reason.
func (e *validationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Reason
	}
	return "invalid event: " + strings.Join(parts, "; ")
}

// invalidField returns a *validationError for one field.
func invalidField(field, reason string) *validationError {
	return &validationError{Fields: []ProblemField{{Field: field, Reason: reason}}}
}

// namedFields turns the *outbox.ValidationError in err, if any, into a
// *validationError whose fields name returns (a 413 when it refuses an
// event for its size, outbox.ErrTooLarge); any other err is returned as it
// is.
func namedFields(err error, name func(outbox.FieldError) string) error {
	var ve *outbox.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	out := &validationError{Fields: make([]ProblemField, len(ve.Fields))}
	if ve.TooLarge {
		out.status = http.StatusRequestEntityTooLarge
	}
	for i, f := range ve.Fields {
		out.Fields[i] = ProblemField{Field: name(f), Reason: f.Reason}
	}
	return out
}

// itemField names field of item i of a batch request: events[3].deviceKey.
func itemField(i int, field string) string { return fmt.Sprintf("events[%d].%s", i, field) }

// decodeOptions are what decodeEvent and decodeBatch take of the request
// and the config: the caller's ingest client (outbox.Input.Client) and
// Config.MaxValues (0: no bound).
type decodeOptions struct {
	client    string
	maxValues int
}

// decodeEvent decodes and validates the body of POST /v1/events. headerKey is
// the Idempotency-Key header ("" when absent). It returns the one Input and
// its Batch from w.Prepare, a *requestError (400) or a *validationError (422).
func decodeEvent(w *outbox.Writer, body []byte, headerKey string, o decodeOptions) ([]outbox.Input, *outbox.Batch, error) {
	d, err := decodeBody(body, shapeEvent, 1, o.maxValues)
	if err != nil {
		return nil, nil, err
	}
	if len(d.fields) > 0 {
		return nil, nil, &validationError{Fields: d.fields}
	}
	in := d.inputs[0]
	if headerKey != "" {
		if in.IdempotencyKey != "" && in.IdempotencyKey != headerKey {
			return nil, nil, invalidField("idempotencyKey", "differs from the "+IdempotencyKeyHeader+" header")
		}
		in.IdempotencyKey = headerKey
	}
	in.Client = o.client
	inputs := []outbox.Input{in}
	batch, err := w.Prepare(inputs)
	if err != nil {
		// The header's key is named as the header.
		return nil, nil, namedFields(err, func(f outbox.FieldError) string {
			if headerKey != "" && f.Field == "idempotencyKey" {
				return IdempotencyKeyHeader
			}
			return f.Field
		})
	}
	return inputs, batch, nil
}

// decodeBatch decodes and validates the body of POST /v1/events:batch
// ({"events":[…]}, 1 to maxBatch items). It returns the Inputs in request
// order and their Batch from w.Prepare, a *requestError (400) or a
// *validationError (422) whose fields are named events[i].field.
func decodeBatch(w *outbox.Writer, body []byte, maxBatch int, o decodeOptions) ([]outbox.Input, *outbox.Batch, error) {
	d, err := decodeBody(body, shapeBatch, maxBatch, o.maxValues)
	if err != nil {
		return nil, nil, err
	}
	if len(d.fields) > 0 && d.fields[0].Field == "events" {
		return nil, nil, &validationError{Fields: d.fields[:1]}
	}
	switch {
	case d.items == 0:
		return nil, nil, invalidField("events", "must hold at least one event")
	case d.items > maxBatch:
		return nil, nil, invalidField("events", fmt.Sprintf("must hold at most %d events (got %d)", maxBatch, d.items))
	case len(d.fields) > 0:
		return nil, nil, &validationError{Fields: d.fields}
	}
	for i := range d.inputs {
		d.inputs[i].Client = o.client
	}
	batch, err := w.Prepare(d.inputs)
	if err != nil {
		return nil, nil, namedFields(err, func(f outbox.FieldError) string { return itemField(f.Index, f.Field) })
	}
	return d.inputs, batch, nil
}

// isObject reports whether the JSON value data starts an object.
func isObject(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n")
	return len(data) > 0 && data[0] == '{'
}

// decodeBody strictly decodes a request body, one JSON object of shape sh,
// in one pass (decodeInputs): valid UTF-8, member names exactly the
// fields' and each once, no unknown fields, nothing after the object. The
// values of the wrong JSON type are in the result's fields (422).
func decodeBody(data []byte, sh shape, maxItems, maxValues int) (decoded, error) {
	// encoding/json would replace invalid UTF-8 with U+FFFD silently.
	if !utf8.Valid(data) {
		return decoded{}, &requestError{detail: "the body is not valid UTF-8"}
	}
	if len(bytes.TrimLeft(data, " \t\r\n")) == 0 {
		return decoded{}, &requestError{detail: "the body is empty"}
	}
	if !isObject(data) {
		return decoded{}, &requestError{detail: "the body must be a JSON object"}
	}
	d, end, err := decodeInputs(data, sh, maxItems, maxValues)
	switch {
	case errors.Is(err, errTooManyValues):
		return decoded{}, &requestError{status: http.StatusRequestEntityTooLarge,
			detail: fmt.Sprintf("the body holds more than the %d JSON values a body may (max-values)", maxValues)}
	case errors.Is(err, errSyntax) && end >= len(data):
		return decoded{}, &requestError{detail: "malformed JSON: the body ends inside a value"}
	case errors.Is(err, errSyntax):
		return decoded{}, &requestError{detail: fmt.Sprintf("malformed JSON at byte %d", end+1)}
	case err != nil:
		return decoded{}, err
	}
	if len(bytes.TrimLeft(data[end:], " \t\r\n")) > 0 {
		return decoded{}, &requestError{detail: "the body holds data after the JSON object"}
	}
	return d, nil
}
