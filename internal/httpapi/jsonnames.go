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

	"github.com/outboxd/outboxd/internal/jsonlex"
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

// errTooManyValues: the body holds more JSON values than
// Config.MaxValues (413).
var errTooManyValues = errors.New("too many JSON values")

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
	// escaped tells whether the last string value read holds an escape.
	escaped bool
	// keys are the names of the open payload objects' members, outermost
	// object first.
	keys [][]byte
	// path is the position inside the payload, for the error.
	path []pathStep

	// decode: the values are read into inputs too (decodeInputs); else
	// only the names are checked.
	decode bool
	// inputs are the events read, maxItems at most (the items beyond are
	// counted in items only); cur is the one being read, nil while none
	// is (or it is beyond maxItems).
	inputs   []outbox.Input
	cur      *outbox.Input
	maxItems int
	items    int
	// curErr is the first value of cur of the wrong JSON type; fields are
	// the 422s of the body, in order (events[3] not an object, the first
	// value of the wrong type of each event, events not an array).
	curErr *ProblemField
	fields []ProblemField
	// values counts the JSON values read; beyond maxValues (when
	// positive) the read stops with errTooManyValues.
	values, maxValues int
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
	s.release()
	return err
}

// release puts s back in the pool, holding no reference into the body.
func (s *nameScanner) release() {
	if cap(s.keys) <= maxPooledStack && cap(s.path) <= maxPooledStack {
		clear(s.keys[:cap(s.keys)])
		clear(s.path[:cap(s.path)])
		*s = nameScanner{keys: s.keys[:0], path: s.path[:0]}
		scanners.Put(s)
	}
}

// decoded is what decodeInputs read of a body.
type decoded struct {
	// inputs are the events, at most maxItems of them; items counts the
	// items of a batch's events array (all of them).
	inputs []outbox.Input
	items  int
	// fields are the 422s found while reading (values of the wrong JSON
	// type, batch items that are not objects).
	fields []ProblemField
}

// decodeInputs reads body, one JSON value of shape sh (shapeEvent or
// shapeBatch), in one pass: the member-name rules of checkNames, and each
// event's values into an outbox.Input whose Payload is the payload's bytes
// in body (no copy). A batch keeps maxItems events at most and counts the
// others. It returns errSyntax for what is not JSON, a *requestError for a
// name, errTooManyValues past maxValues values (0: no bound), and, after
// the value, the index of the byte after it.
func decodeInputs(body []byte, sh shape, maxItems, maxValues int) (decoded, int, error) {
	s := scanners.Get().(*nameScanner)
	defer s.release()
	*s = nameScanner{data: body, item: -1, keys: s.keys[:0], path: s.path[:0], decode: true, maxItems: maxItems, maxValues: maxValues}
	if sh == shapeEvent {
		s.inputs = make([]outbox.Input, 1)
		s.cur = &s.inputs[0]
	}
	err := s.value(sh)
	if sh == shapeEvent && s.curErr != nil {
		s.fields = append(s.fields, *s.curErr)
	}
	return decoded{inputs: s.inputs, items: s.items, fields: s.fields}, s.i, err
}

// jsonType names the JSON type of the value that starts with b, as
// encoding/json's type errors do.
func jsonType(b byte) string {
	switch b {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

// assign sets field k of the event being read to the JSON value v.
func (s *nameScanner) assign(k int, v []byte, escaped bool) {
	if s.cur == nil {
		return
	}
	name := eventFields[k]
	if k == payloadField {
		s.cur.Payload = v
		return
	}
	switch v[0] {
	case 'n':
		return // null leaves the field empty, as encoding/json does
	case '"':
	default:
		if s.curErr == nil {
			s.curErr = &ProblemField{Field: s.field([]byte(name)), Reason: "must be a string, not " + jsonType(v[0])}
		}
		return
	}
	var str string
	if inner := v[1 : len(v)-1]; escaped {
		str = string(jsonlex.Unquote(nil, inner))
	} else {
		str = string(inner)
	}
	switch name {
	case "idempotencyKey":
		s.cur.IdempotencyKey = str
	case "sourceKey":
		s.cur.SourceKey = str
	case "deviceKey":
		s.cur.DeviceKey = str
	case "occurredAt":
		s.cur.OccurredAt = str
	case "type":
		s.cur.Type = str
	default:
		panic("httpapi: no decoding for field " + name)
	}
}

func (s *nameScanner) value(sh shape) error {
	if s.values++; s.maxValues > 0 && s.values > s.maxValues {
		return errTooManyValues
	}
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
		_, escaped, err := s.str()
		s.escaped = escaped
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || jsonlex.IsDigit(c):
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
		member := -1 // the index of the field named, in fields
		switch sh {
		case shapeEvent, shapeBatch:
			k := -1
			for j, f := range fields {
				if string(name) == f {
					k = j
					break
				}
			}
			member = k
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
		s.space()
		valStart := s.i
		if err := s.value(child); err != nil {
			return err
		}
		if s.decode {
			switch sh {
			case shapeEvent:
				s.assign(member, s.data[valStart:s.i], s.escaped)
			case shapeBatch:
				if c := s.data[valStart]; c != '[' && c != 'n' {
					s.fields = append(s.fields, ProblemField{Field: "events", Reason: "must be an array, not " + jsonType(c)})
				}
			}
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
			if sh == shapeEvents && s.decode {
				if err := s.item1(n); err != nil {
					return err
				}
			} else if err := s.value(child); err != nil {
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

// item1 reads item n of a batch's events array: an event (kept while
// fewer than maxItems are), or any other value, which is a 422.
func (s *nameScanner) item1(n int) error {
	s.items++
	s.space()
	if s.i < len(s.data) && s.data[s.i] != '{' {
		s.fields = append(s.fields, ProblemField{Field: "events[" + strconv.Itoa(n) + "]", Reason: "must be a JSON object"})
		return s.value(shapeAny)
	}
	s.cur, s.curErr = nil, nil
	if len(s.inputs) < s.maxItems {
		s.inputs = append(s.inputs, outbox.Input{})
		s.cur = &s.inputs[len(s.inputs)-1]
	}
	err := s.value(shapeEvent)
	if s.curErr != nil {
		s.fields = append(s.fields, *s.curErr)
	}
	s.cur, s.curErr = nil, nil
	return err
}

// str reads the string at s.i and returns the bytes between its quotes and
// whether they hold an escape.
func (s *nameScanner) str() ([]byte, bool, error) {
	end, escaped, ok := jsonlex.String(s.data, s.i)
	if !ok {
		return nil, false, errSyntax
	}
	str := s.data[s.i+1 : end-1]
	s.i = end
	return str, escaped, nil
}

// number reads a JSON number (RFC 8259 section 6).
func (s *nameScanner) number() error {
	end, ok := jsonlex.Number(s.data, s.i)
	if !ok {
		return errSyntax
	}
	s.i = end
	return nil
}

func (s *nameScanner) literal(lit string) error {
	end, ok := jsonlex.Literal(s.data, s.i, lit)
	if !ok {
		return errSyntax
	}
	s.i = end
	return nil
}

func (s *nameScanner) space() { s.i = jsonlex.Space(s.data, s.i) }

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
