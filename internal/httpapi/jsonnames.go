package httpapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/outboxd/outboxd/outbox"
)

// shape is what a JSON value of a request is, for nameScanner.
type shape uint8

const (
	// shapeAny is any value; its names are not checked (encoding/json
	// refuses it by type when it is not what the field takes).
	shapeAny shape = iota
	// shapeEvent is an event object: members named exactly as eventFields.
	shapeEvent
	// shapeBatch is the body of POST /v1/events:batch: batchFields.
	shapeBatch
	// shapeEvents is the events array of a batch: each item a shapeEvent.
	shapeEvents
	// shapePayload is a payload value: no object in it repeats a name.
	shapePayload
)

// maxNesting is encoding/json's nesting limit: deeper bodies are malformed
// for both readers.
const maxNesting = 10000

// batchRequest is the body of POST /v1/events:batch; its items are decoded
// one by one.
type batchRequest struct {
	Events []json.RawMessage `json:"events"`
}

// The member names of the request objects, from the JSON tags of the types
// they decode into, so that the two cannot disagree.
var (
	eventFields  = jsonNames(reflect.TypeFor[outbox.Input]())
	batchFields  = jsonNames(reflect.TypeFor[batchRequest]())
	payloadField = fieldIndex(eventFields, "payload")
	eventsField  = fieldIndex(batchFields, "events")
)

// jsonNames returns the JSON member names of struct type t.
func jsonNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && name != "-" {
			names = append(names, cmp.Or(name, f.Name))
		}
	}
	return names
}

func fieldIndex(fields []string, name string) int {
	for i, f := range fields {
		if f == name {
			return i
		}
	}
	panic("httpapi: no field " + name)
}

// errSyntax is a body that is not JSON; encoding/json then says why.
var errSyntax = errors.New("malformed JSON")

// nameScanner reads a request body once, without decoding it, to make sure
// that every JSON reader reads it as encoding/json does: the members of the
// request objects (the body, each batch item) are named exactly as the
// fields (encoding/json alone also takes "SOURCEKEY" or "sourceKEY") and
// no object, payload objects included, names a member twice (encoding/json
// alone keeps the last one; other readers may keep the first). It allocates
// only for names written with escapes, for objects of many members and for
// the error.
type nameScanner struct {
	data  []byte
	i     int
	depth int
	// item is the index of the batch item being read, or -1.
	item int
	// keys are the names of the open payload objects' members, outermost
	// object first.
	keys [][]byte
	// path is the position inside the payload, for the error.
	path []pathStep
}

// pathStep is a member name, or an array index when name is nil.
type pathStep struct {
	name  []byte
	index int
}

// linearNames is how many member names an object's duplicate check
// compares one by one before it builds a set.
const linearNames = 16

// scanners keeps nameScanners, whose stacks then need no allocation.
var scanners = sync.Pool{New: func() any { return new(nameScanner) }}

// maxPooledStack is the largest stack a pooled nameScanner keeps.
const maxPooledStack = 1024

// checkNames reads body (valid UTF-8) as a value of shape sh. It returns
// nil, a *requestError naming the first offending member, or errSyntax.
// It reads the first value only: data after it is the caller's to refuse.
func checkNames(body []byte, sh shape) error {
	s := scanners.Get().(*nameScanner)
	*s = nameScanner{data: body, item: -1, keys: s.keys[:0], path: s.path[:0]}
	err := s.value(sh)
	if cap(s.keys) <= maxPooledStack && cap(s.path) <= maxPooledStack {
		// Keep no reference into the body.
		clear(s.keys[:cap(s.keys)])
		clear(s.path[:cap(s.path)])
		s.data = nil
		scanners.Put(s)
	}
	return err
}

func (s *nameScanner) value(sh shape) error {
	s.space()
	if s.i >= len(s.data) {
		return errSyntax
	}
	switch c := s.data[s.i]; {
	case c == '{':
		return s.object(sh)
	case c == '[':
		return s.array(sh)
	case c == '"':
		_, _, err := s.str()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || isDigit(c):
		return s.number()
	}
	return errSyntax
}

func (s *nameScanner) object(sh shape) error {
	if s.depth++; s.depth > maxNesting {
		return errSyntax
	}
	s.i++ // {
	var fields []string
	switch sh {
	case shapeEvent:
		fields = eventFields
	case shapeBatch:
		fields = batchFields
	}
	var seen uint64 // fields seen, by index
	base := len(s.keys)
	var set map[string]struct{} // the names seen, once there are many
	s.space()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return errSyntax
		}
		start := s.i
		name, escaped, err := s.str()
		if err != nil {
			return err
		}
		if escaped {
			var unq string
			if json.Unmarshal(s.data[start:s.i], &unq) != nil {
				return errSyntax
			}
			name = []byte(unq)
		}
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return errSyntax
		}
		s.i++
		child := shapeAny
		switch sh {
		case shapeEvent, shapeBatch:
			k := -1
			for j, f := range fields {
				if string(name) == f {
					k = j
					break
				}
			}
			switch {
			case k < 0:
				return s.unknown(name, fields)
			case seen&(1<<k) != 0:
				return s.duplicate(s.field(name))
			}
			seen |= 1 << k
			switch {
			case sh == shapeEvent && k == payloadField:
				child = shapePayload
			case sh == shapeBatch && k == eventsField:
				child = shapeEvents
			}
		case shapePayload:
			child = shapePayload
			if set != nil {
				if _, dup := set[string(name)]; dup {
					return s.duplicate(s.payloadField(name))
				}
				set[string(name)] = struct{}{}
				break
			}
			for _, k := range s.keys[base:] {
				if bytes.Equal(k, name) {
					return s.duplicate(s.payloadField(name))
				}
			}
			s.keys = append(s.keys, name)
			if len(s.keys)-base > linearNames {
				set = make(map[string]struct{}, 2*linearNames)
				for _, k := range s.keys[base:] {
					set[string(k)] = struct{}{}
				}
			}
		}
		if sh == shapePayload {
			s.path = append(s.path, pathStep{name: name})
		}
		if err := s.value(child); err != nil {
			return err
		}
		if sh == shapePayload {
			s.path = s.path[:len(s.path)-1]
		}
		s.space()
		if s.i >= len(s.data) {
			return errSyntax
		}
		switch s.data[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			s.keys = s.keys[:base]
			s.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

func (s *nameScanner) array(sh shape) error {
	if s.depth++; s.depth > maxNesting {
		return errSyntax
	}
	s.i++ // [
	child := shapeAny
	switch sh {
	case shapeEvents:
		child = shapeEvent
	case shapePayload:
		child = shapePayload
		s.path = append(s.path, pathStep{})
	}
	s.space()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
	} else {
		for n := 0; ; n++ {
			switch sh {
			case shapeEvents:
				s.item = n
			case shapePayload:
				s.path[len(s.path)-1].index = n
			}
			if err := s.value(child); err != nil {
				return err
			}
			s.space()
			if s.i >= len(s.data) {
				return errSyntax
			}
			if s.data[s.i] == ']' {
				s.i++
				break
			}
			if s.data[s.i] != ',' {
				return errSyntax
			}
			s.i++
		}
	}
	switch sh {
	case shapeEvents:
		s.item = -1
	case shapePayload:
		s.path = s.path[:len(s.path)-1]
	}
	s.depth--
	return nil
}

// str reads the string at s.i and returns the bytes between its quotes and
// whether they hold an escape.
func (s *nameScanner) str() ([]byte, bool, error) {
	d := s.data
	start := s.i + 1
	escaped := false
	for i := start; i < len(d); {
		switch c := d[i]; {
		case c == '"':
			s.i = i + 1
			return d[start:i], escaped, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(d) {
				return nil, false, errSyntax
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) || !isHex(d[i+5]) {
					return nil, false, errSyntax
				}
				i += 6
			default:
				return nil, false, errSyntax
			}
		case c < 0x20:
			return nil, false, errSyntax
		default:
			i++
		}
	}
	return nil, false, errSyntax
}

// number reads a JSON number (RFC 8259 section 6).
func (s *nameScanner) number() error {
	d, i := s.data, s.i
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digits(d, i)
	default:
		return errSyntax
	}
	if i < len(d) && d[i] == '.' {
		if i++; i >= len(d) || !isDigit(d[i]) {
			return errSyntax
		}
		i = digits(d, i)
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		if i++; i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return errSyntax
		}
		i = digits(d, i)
	}
	s.i = i
	return nil
}

func (s *nameScanner) literal(lit string) error {
	if len(s.data)-s.i < len(lit) || string(s.data[s.i:s.i+len(lit)]) != lit {
		return errSyntax
	}
	s.i += len(lit)
	return nil
}

func (s *nameScanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func digits(d []byte, i int) int {
	for i < len(d) && isDigit(d[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }

// field names a member of the request object being read.
func (s *nameScanner) field(name []byte) string {
	if s.item >= 0 {
		return "events[" + strconv.Itoa(s.item) + "]." + string(name)
	}
	return string(name)
}

// payloadField names member name of the payload object being read.
func (s *nameScanner) payloadField(name []byte) string {
	var b strings.Builder
	b.WriteString(s.field([]byte("payload")))
	for _, st := range s.path {
		if st.name == nil {
			fmt.Fprintf(&b, "[%d]", st.index)
			continue
		}
		b.WriteByte('.')
		b.Write(st.name)
	}
	b.WriteByte('.')
	b.Write(name)
	return b.String()
}

func (s *nameScanner) unknown(name []byte, fields []string) error {
	field := s.field(name)
	reason := "is not a known field"
	detail := fmt.Sprintf("unknown field %q", field)
	for _, f := range fields {
		if strings.EqualFold(f, string(name)) {
			reason += fmt.Sprintf(" (field names are case-sensitive: %s)", f)
			detail += fmt.Sprintf(" (field names are case-sensitive: did you mean %q?)", f)
			break
		}
	}
	return &requestError{detail: detail, field: field, reason: reason}
}

func (s *nameScanner) duplicate(field string) error {
	return &requestError{detail: fmt.Sprintf("field %q appears more than once", field), field: field, reason: "appears more than once"}
}
