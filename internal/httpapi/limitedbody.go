package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// Errors of a body read under a Server's limits; readBody answers them.
var (
	// errBodyTimeout: the body did not arrive within ServerConfig.BodyTimeout
	// (408).
	errBodyTimeout = errors.New("the body did not arrive in time")
	// errShuttingDown: the body was still arriving when shutdown cut it
	// short (503).
	errShuttingDown = errors.New("the server is shutting down")
	// errTooManyBodies: ServerConfig.MaxInFlightBodies bodies are being read
	// already (503).
	errTooManyBodies = errors.New("too many request bodies are being received")
)

// limitedBody is a request body under its Server's limits. Its first read
// takes a slot of MaxInFlightBodies and sets the connection's read
// deadline; its end (EOF, an error, or the handler's return) gives the slot
// back. Only the handler's goroutine reads it; Shutdown moves its deadline
// under the server's lock.
type limitedBody struct {
	io.ReadCloser
	s  *Server
	rc *http.ResponseController

	state    int   // bodyUnread, bodyReading, bodyDone
	err      error // what every read returns once done (io.EOF at the end)
	deadline time.Time
	// cut is set when the deadline is the one Shutdown gives.
	cut bool
	// privileged lets the body take a place of the reserve
	// (ServerConfig.BodyReserve); slot is the place it holds.
	privileged bool
	slot       chan struct{}
	// client is whose share of the places the body takes
	// (ServerConfig.MaxClientBodies): "ip:" and its connection's remote
	// address, or "client:" and a named ingest client's name; counted
	// says it holds one.
	client  string
	counted bool
}

// bodyKey is the context key of a request's *limitedBody.
type bodyKey struct{}

// nameClient counts the body of r, read under a Server, in the share of
// the named ingest client name rather than its remote address's.
func nameClient(r *http.Request, name string) {
	if b, ok := r.Context().Value(bodyKey{}).(*limitedBody); ok {
		b.client = "client:" + name
	}
}

// privilege lets the body of r, read under a Server, take a place of the
// reserve when every other is taken.
func privilege(r *http.Request) {
	if b, ok := r.Context().Value(bodyKey{}).(*limitedBody); ok {
		b.privileged = true
	}
}

const (
	bodyUnread = iota
	bodyReading
	bodyDone
)

// Read reads under the body's deadline; a read past it fails with
// errBodyTimeout or errShuttingDown.
func (b *limitedBody) Read(p []byte) (int, error) {
	switch b.state {
	case bodyUnread:
		if err := b.start(); err != nil {
			return 0, err
		}
	case bodyDone:
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.s.mu.Lock()
			cause := errBodyTimeout
			if b.cut {
				cause = errShuttingDown
			}
			b.s.mu.Unlock()
			err = fmt.Errorf("%w: %w", cause, err)
		}
		b.err = err
		b.finish()
	}
	return n, err
}

// start takes a slot and sets the deadline: BodyTimeout from now, or the
// shutdown's cut when that comes first.
func (b *limitedBody) start() error {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !b.privileged && s.byClient[b.client] >= s.cfg.MaxClientBodies {
		b.state, b.err = bodyDone, errTooManyBodies
		return errTooManyBodies
	}
	select {
	case s.slots <- struct{}{}:
		b.slot = s.slots
	default:
		if !b.privileged {
			b.state, b.err = bodyDone, errTooManyBodies
			return errTooManyBodies
		}
		select {
		case s.reserve <- struct{}{}:
			b.slot = s.reserve
		default:
			b.state, b.err = bodyDone, errTooManyBodies
			return errTooManyBodies
		}
	}
	b.state = bodyReading
	s.reading[b] = struct{}{}
	if !b.privileged {
		s.byClient[b.client]++
		b.counted = true
	}
	deadline, cut := time.Now().Add(s.cfg.BodyTimeout), false
	if s.closing && s.cutAt.Before(deadline) {
		deadline, cut = s.cutAt, true
	}
	b.setDeadline(deadline, cut)
	return nil
}

// setDeadline moves the connection's read deadline; the caller holds the
// server's lock. A connection without deadlines (HTTP/2, a test recorder)
// keeps none.
func (b *limitedBody) setDeadline(t time.Time, cut bool) {
	b.deadline, b.cut = t, cut
	_ = b.rc.SetReadDeadline(t)
}

// finish gives the slot back. After a clean end it clears the deadline, so
// that the connection's background read does not fail (and cancel the
// request's context) while the handler writes.
func (b *limitedBody) finish() {
	if b.err == nil {
		b.err = io.EOF
	}
	if b.state != bodyReading {
		b.state = bodyDone
		return
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	b.state = bodyDone
	delete(s.reading, b)
	<-b.slot
	if b.counted {
		if s.byClient[b.client]--; s.byClient[b.client] <= 0 {
			delete(s.byClient, b.client)
		}
	}
	if errors.Is(b.err, io.EOF) {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// abandon ends a body its handler did not read to the end: net/http then
// discards what is left of it to keep the connection, which could wait on
// a stalled client for ever. With a deadline in the past it discards only
// what has already arrived and otherwise closes the connection (after the
// answer).
func (b *limitedBody) abandon() {
	if b.state == bodyDone && errors.Is(b.err, io.EOF) {
		return
	}
	b.finish()
	_ = b.rc.SetReadDeadline(time.Unix(1, 0))
}
