package mongostore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/bsontype"

	"github.com/outboxd/outboxd/internal/jsonlex"
)

// PayloadSize returns the bytes payload takes as the BSON document the
// store writes (outbox.PayloadSizer): up to about eight times its JSON, for
// an array of one-digit integers (2 bytes of JSON become 10 bytes plus the
// index's digits: 7.93 times for a payload of 1.5 MiB). It counts them in
// one pass over the JSON, building nothing: refusing an event too large
// for the store costs no memory.
func (s *Store) PayloadSize(payload json.RawMessage) (int, error) {
	return payloadBSONSize(payload)
}

// payloadToBSON converts a JSON object into a BSON document that keeps its
// members in their order, so a payload reads back as it was written.
// Integers that fit in 64 bits become int64, numbers with a fraction or
// exponent float64; an integer beyond 64 bits is refused (ingest refuses it
// first, naming the field): as a double it would read back rounded.
// Strings and names are decoded as encoding/json decodes them. It writes
// the document straight from the JSON into one buffer of the size
// payloadBSONSize counts first, without a tree of Go values: the bytes are
// those bson.Marshal makes of the bson.D (objects) and bson.A (arrays) the
// JSON decodes into.
func payloadToBSON(raw json.RawMessage) (bson.Raw, error) {
	n, err := payloadBSONSize(raw)
	if err != nil {
		return nil, err
	}
	e := bsonEncoder{data: raw, build: true, out: make([]byte, 0, n)}
	if _, err := e.payload(); err != nil {
		return nil, err
	}
	return e.out, nil
}

// payloadBSONSize returns the bytes of payloadToBSON's document for raw,
// counted without building it.
func payloadBSONSize(raw json.RawMessage) (int, error) {
	e := bsonEncoder{data: raw}
	return e.payload()
}

// emptyDocument is the BSON of {}: its length and its end.
var emptyDocument = []byte{5, 0, 0, 0, 0}

// errNotJSON is the error of a payload that is not well-formed JSON.
var errNotJSON = errors.New("payload is not JSON")

// bsonEncoder walks a JSON object once and counts the bytes of its BSON
// document, appending them to out when build is set.
type bsonEncoder struct {
	data  []byte
	build bool
	out   []byte
	// key and str hold a member's name and a string value decoded from
	// their escapes; the name is written before the value is read.
	key, str []byte
}

// payload encodes the JSON object e.data and returns its BSON size.
func (e *bsonEncoder) payload() (int, error) {
	if len(e.data) == 0 {
		if e.build {
			e.out = append(e.out, emptyDocument...)
		}
		return len(emptyDocument), nil
	}
	i := jsonlex.Space(e.data, 0)
	if i >= len(e.data) {
		return 0, errNotJSON
	}
	if e.data[i] != '{' {
		return 0, errors.New("payload is not a JSON object")
	}
	end, n, err := e.document(i, '}')
	if err != nil {
		return 0, err
	}
	if jsonlex.Space(e.data, end) != len(e.data) {
		return 0, errors.New("payload is not one JSON value")
	}
	return n, nil
}

// document encodes the object (closing byte '}') or array (']') whose
// opening byte is at e.data[i]; it returns the index after it and the
// document's size.
func (e *bsonEncoder) document(i int, closing byte) (int, int, error) {
	start := len(e.out)
	if e.build {
		e.out = append(e.out, 0, 0, 0, 0)
	}
	size := 4 + 1 // the length and the end
	d := e.data
	i = jsonlex.Space(d, i+1)
	if i < len(d) && d[i] == closing {
		return e.endDocument(start, i+1, size)
	}
	for index := 0; ; index++ {
		var key []byte
		if closing == ']' {
			key = strconv.AppendInt(e.key[:0], int64(index), 10)
			e.key = key
		} else {
			if i >= len(d) || d[i] != '"' {
				return 0, 0, errNotJSON
			}
			var (
				decoded bool
				err     error
			)
			if key, i, decoded, err = e.string(i, e.key[:0]); err != nil {
				return 0, 0, err
			}
			if decoded {
				e.key = key
			}
			if bytes.IndexByte(key, 0) >= 0 {
				return 0, 0, errors.New("payload key holds NUL, which BSON cannot name")
			}
			if i = jsonlex.Space(d, i); i >= len(d) || d[i] != ':' {
				return 0, 0, errNotJSON
			}
			i = jsonlex.Space(d, i+1)
		}
		end, n, err := e.element(key, i)
		if err != nil {
			return 0, 0, err
		}
		size += n
		next, more, ok := jsonlex.Next(d, end, closing)
		if !ok {
			return 0, 0, errNotJSON
		}
		i = jsonlex.Space(d, next)
		if !more {
			return e.endDocument(start, next, size)
		}
	}
}

// endDocument ends the document that starts at out[start] and returns next
// and its size.
func (e *bsonEncoder) endDocument(start, next, size int) (int, int, error) {
	if size > math.MaxInt32 {
		return 0, 0, errors.New("payload is too large for a BSON document")
	}
	if e.build {
		e.out = append(e.out, 0)
		binary.LittleEndian.PutUint32(e.out[start:], uint32(size))
	}
	return next, size, nil
}

// element encodes the member named key whose value starts at e.data[i]; it
// returns the index after the value and the element's size.
func (e *bsonEncoder) element(key []byte, i int) (int, int, error) {
	d := e.data
	if i >= len(d) {
		return 0, 0, errNotJSON
	}
	header := 1 + len(key) + 1
	switch c := d[i]; {
	case c == '{':
		e.header(bson.TypeEmbeddedDocument, key)
		end, n, err := e.document(i, '}')
		return end, header + n, err
	case c == '[':
		e.header(bson.TypeArray, key)
		end, n, err := e.document(i, ']')
		return end, header + n, err
	case c == '"':
		s, end, decoded, err := e.string(i, e.str[:0])
		if err != nil {
			return 0, 0, err
		}
		if decoded {
			e.str = s
		}
		e.header(bson.TypeString, key)
		if e.build {
			e.out = binary.LittleEndian.AppendUint32(e.out, uint32(len(s)+1))
			e.out = append(append(e.out, s...), 0)
		}
		return end, header + 4 + len(s) + 1, nil
	case c == 't' || c == 'f':
		lit := "true"
		if c == 'f' {
			lit = "false"
		}
		end, ok := jsonlex.Literal(d, i, lit)
		if !ok {
			return 0, 0, errNotJSON
		}
		e.header(bson.TypeBoolean, key)
		if e.build {
			e.out = append(e.out, boolByte(c == 't'))
		}
		return end, header + 1, nil
	case c == 'n':
		end, ok := jsonlex.Literal(d, i, "null")
		if !ok {
			return 0, 0, errNotJSON
		}
		e.header(bson.TypeNull, key)
		return end, header, nil
	case c == '-' || jsonlex.IsDigit(c):
		end, ok := jsonlex.Number(d, i)
		if !ok {
			return 0, 0, errNotJSON
		}
		bits, t, err := numberBits(d[i:end])
		if err != nil {
			return 0, 0, err
		}
		e.header(t, key)
		if e.build {
			e.out = binary.LittleEndian.AppendUint64(e.out, bits)
		}
		return end, header + 8, nil
	}
	return 0, 0, errNotJSON
}

// numberBits returns the 8 bytes (little endian) and the BSON type of the
// JSON number num: an int64 when it has no fraction or exponent (an
// integer beyond 64 bits is an error), else a double.
func numberBits(num []byte) (uint64, bsontype.Type, error) {
	if !bytes.ContainsAny(num, ".eE") {
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("payload integer %s does not fit in 64 bits", num)
		}
		return uint64(v), bson.TypeInt64, nil
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil {
		return 0, 0, fmt.Errorf("payload number %s is out of range", num)
	}
	return math.Float64bits(f), bson.TypeDouble, nil
}

// header appends an element's type and name when building.
func (e *bsonEncoder) header(t bsontype.Type, key []byte) {
	if e.build {
		e.out = append(append(append(e.out, byte(t)), key...), 0)
	}
}

// string reads the JSON string whose opening quote is at e.data[i] and
// returns its text and the index after it. The text is in e.data when it
// needs no decoding, else (decoded) appended to buf.
func (e *bsonEncoder) string(i int, buf []byte) (text []byte, end int, decoded bool, err error) {
	end, escaped, ok := jsonlex.String(e.data, i)
	if !ok {
		return nil, 0, false, errNotJSON
	}
	s := e.data[i+1 : end-1]
	if !escaped && utf8.Valid(s) {
		return s, end, false, nil
	}
	return jsonlex.Unquote(buf, s), end, true, nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
