package httpapi

import (
	"bytes"
	"strconv"
	"sync"
)

// framing follows the HTTP/1.1 framing of the requests a connection
// carries, from the bytes the server reads, to find a request whose head
// has both Content-Length and Transfer-Encoding (RFC 9112 section 6.1: the
// server must close the connection after answering it). net/http reads
// such a request by its Transfer-Encoding and drops the Content-Length
// before the handler sees it, so the handler alone cannot tell; a proxy in
// front that framed it by the Content-Length would see another request in
// its body (request smuggling).
//
// It reads as the server does: a head up to its empty line, then a body of
// Content-Length bytes or chunks up to the last chunk and its trailer.
// Once it found such a request, or lost its place (a head net/http refuses
// anyway), it stops: the connection is closed after that request.
type framing struct {
	mu    sync.Mutex
	state int
	// line is the start of the line being read (enough for a header's name
	// and a Content-Length or a chunk size).
	line []byte
	// sawStart: the head's request line was read.
	sawStart     bool
	hasCL, hasTE bool
	cl           int64
	// remain is what is left of the body or of the chunk.
	remain int64
	// heads counts the heads read; smuggledHead is the number of the first
	// with both headers (0: none).
	heads, smuggledHead int
	stopped             bool
}

// States of framing.
const (
	frameHead      = iota // header lines
	frameBody             // remain bytes of a Content-Length body
	frameChunkSize        // a chunk-size line
	frameChunkData        // remain bytes of a chunk
	frameChunkEnd         // the CRLF after a chunk's data
	frameTrailer          // trailer lines up to the empty one
)

// lineKeep is how much of a line framing keeps.
const lineKeep = 64

// feed reads p, the next bytes of the connection.
func (f *framing) feed(p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(p) > 0 && !f.stopped {
		switch f.state {
		case frameBody, frameChunkData:
			n := min(int64(len(p)), f.remain)
			p, f.remain = p[n:], f.remain-n
			if f.remain == 0 {
				if f.state == frameBody {
					f.state = frameHead
				} else {
					f.state = frameChunkEnd
				}
			}
		default:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				f.keep(p)
				return
			}
			f.keep(p[:i])
			p = p[i+1:]
			f.endLine(bytes.TrimSuffix(f.line, []byte("\r")))
			f.line = f.line[:0]
		}
	}
}

// keep adds b to the line, up to lineKeep bytes.
func (f *framing) keep(b []byte) {
	if room := lineKeep - len(f.line); room > 0 {
		f.line = append(f.line, b[:min(room, len(b))]...)
	}
}

// endLine reads a whole line of a head, a chunk size or a trailer.
func (f *framing) endLine(line []byte) {
	switch f.state {
	case frameHead:
		switch {
		case len(line) == 0 && !f.sawStart: // an empty line before a request
		case len(line) == 0:
			f.endHead()
		case !f.sawStart:
			f.sawStart = true
		default:
			name, value, _ := bytes.Cut(line, []byte(":"))
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
				f.hasCL, f.cl = true, n
				if err != nil || n < 0 {
					f.stopped = true // net/http refuses it and closes
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				f.hasTE = true
			}
		}
	case frameChunkSize:
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		switch {
		case err != nil || n < 0:
			f.stopped = true // net/http fails the body
		case n == 0:
			f.state = frameTrailer
		default:
			f.state, f.remain = frameChunkData, n
		}
	case frameChunkEnd:
		f.state = frameChunkSize
	case frameTrailer:
		if len(line) == 0 {
			f.state = frameHead
		}
	}
}

// endHead ends a request's head: what its body is follows from its
// headers.
func (f *framing) endHead() {
	f.heads++
	switch {
	case f.hasCL && f.hasTE:
		f.smuggledHead, f.stopped = f.heads, true
	case f.hasTE:
		f.state = frameChunkSize
	case f.hasCL && f.cl > 0:
		f.state, f.remain = frameBody, f.cl
	}
	f.sawStart, f.hasCL, f.hasTE, f.cl = false, false, false, 0
}

// smuggled reports whether the n-th request of the connection (from 1)
// had both Content-Length and Transfer-Encoding.
func (f *framing) smuggled(n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.smuggledHead != 0 && f.smuggledHead <= n
}
