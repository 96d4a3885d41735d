package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/redact"
)

// clientTimeout bounds one request of an operator command (each handles
// at most one chunk).
const clientTimeout = 2 * time.Minute

// client calls the API of the outboxd at --server.
type client struct {
	base, token string
	http        *http.Client
}

func (a *app) client() *client {
	return &client{base: strings.TrimRight(a.o.server, "/"), token: a.o.authToken.value, http: &http.Client{Timeout: clientTimeout}}
}

// problemError is an answer of the server that is not a success.
type problemError struct {
	method, path string
	problem      httpapi.Problem
	// retryAfter is the answer's Retry-After, if any.
	retryAfter time.Duration
}

func (e *problemError) Error() string {
	p := e.problem
	msg := fmt.Sprintf("%s %s answered %d %s", e.method, e.path, p.Status, p.Title)
	if p.Detail != "" {
		msg += ": " + p.Detail
	}
	for _, f := range p.Errors {
		msg += fmt.Sprintf(" (%s %s)", f.Field, f.Reason)
	}
	return msg
}

// Is makes the answers that mean the command or its configuration is wrong
// usage errors (exit 2): a malformed or invalid request, a missing or wrong
// token, and an action the instance at --server cannot perform (its role
// lacks Redis or PostgreSQL: point --server at a work or dev instance).
func (e *problemError) Is(target error) bool {
	if target != config.ErrUsage {
		return false
	}
	switch e.problem.Status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestEntityTooLarge,
		http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusNotImplemented:
		return true
	}
	return false
}

// do sends body (JSON, nil for none) and decodes a 200 answer into out;
// raw, when not nil, receives the answer's bytes as they came.
// A 503 that did nothing (httpapi.ProblemBusy: the server was reading
// too many bodies at once) is tried again after its Retry-After, at most
// busyRetries times, the wait doubling from there up to busyWaitMax.
func (c *client) do(ctx context.Context, method, path string, body, out any, raw *[]byte) error {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("error encoding the request: %w", err)
		}
		payload = b
	}
	for attempt := 0; ; attempt++ {
		err := c.once(ctx, method, path, payload, body != nil, out, raw)
		var pe *problemError
		if attempt >= busyRetries || !errors.As(err, &pe) || pe.problem.Type != httpapi.ProblemBusy {
			return err
		}
		wait := min(max(pe.retryAfter, time.Second)<<attempt, busyWaitMax)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// Retries of a busy server (client.do).
const (
	busyRetries = 5
	busyWaitMax = 30 * time.Second
)

// once sends one request (payload when hasBody) and decodes a 200 answer
// into out.
func (c *client) once(ctx context.Context, method, path string, payload []byte, hasBody bool, out any, raw *[]byte) error {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return config.Invalid("server", "%v", err)
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("error reaching outboxd at %s (is it running?): %w", redact.DSN(c.base), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("error reading the answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		pe := &problemError{method: method, path: path}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
			pe.retryAfter = time.Duration(secs) * time.Second
		}
		if json.Unmarshal(b, &pe.problem) != nil || pe.problem.Status == 0 {
			pe.problem = httpapi.Problem{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
		}
		return pe
	}
	if raw != nil {
		*raw = b
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("error decoding the answer of %s %s: %w", method, path, err)
		}
	}
	return nil
}

// errDrift ends a command whose output already showed a problem it found
// (drift, dead letters it could not replay): exit 1.
var errDrift = fmt.Errorf("problem found: %w", errReported)

// isTerminal reports whether w is a terminal, for progress lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
