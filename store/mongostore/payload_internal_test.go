package mongostore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
)

// treePayloadToBSON is how payloads became BSON before payloadToBSON wrote
// them straight from the JSON: decoded into a bson.D/bson.A tree, then
// marshalled. It is the reference the streaming encoder must match byte
// for byte.
func treePayloadToBSON(raw json.RawMessage) (bson.Raw, error) {
	if len(raw) == 0 {
		return bson.Marshal(bson.D{})
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := treeDecode(dec)
	if err != nil {
		return nil, fmt.Errorf("payload is not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("payload is not one JSON value")
	}
	obj, ok := v.(bson.D)
	if !ok {
		return nil, errors.New("payload is not a JSON object")
	}
	return bson.Marshal(obj)
}

func treeDecode(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := bson.D{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				v, err := treeDecode(dec)
				if err != nil {
					return nil, err
				}
				d = append(d, bson.E{Key: key, Value: v})
			}
			_, err := dec.Token()
			return d, err
		case '[':
			a := bson.A{}
			for dec.More() {
				v, err := treeDecode(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i, nil
		}
		if !strings.ContainsAny(string(t), ".eE") {
			return nil, fmt.Errorf("payload integer %s does not fit in 64 bits", t)
		}
		f, err := t.Float64()
		if err != nil {
			return nil, fmt.Errorf("payload number %s is out of range", t)
		}
		return f, nil
	}
	return tok, nil
}

// payloadCorpus holds payloads of every JSON shape: nested arrays and
// objects, floats, the int64 bounds, unicode and escapes, invalid UTF-8,
// white space, members named alike.
var payloadCorpus = []string{
	``,
	`{}`,
	` { } `,
	`{"a":1}`,
	`{"t":21.5,"n":3,"tags":["a","b"],"loc":{"lat":47.1,"lon":8.5}}`,
	`{"a":[[],[[]],[[[1,2],[3]],{}],{"b":[{"c":[null,true,false]}]}]}`,
	`{"f":[0.1,1e-7,-0.0,0.0,1.5,1E3,1e+308,2.2250738585072014e-308,5e-324,123456789012345678.5,1e-400]}`,
	`{"i":[0,-0,1,-1,9223372036854775807,-9223372036854775808,4294967296,2147483648,-2147483649]}`,
	`{"u":"héllo wörld ✓ 日本語 🎉","e":"\u00e9\ud83c\udf89\n\t\"\\\/\b\f\r","lone":"\ud800x","<>&":"<>&\u2028"}`,
	`{"ключ":"значение","日本":{"語":["ü","\u0041"]}}`,
	"{\"bad\":\"\xff\xfe\",\"k\xc3\":1}",
	`{"dup":1,"dup":"two"}`,
	"{\n\t\"ws\" : [ 1 , 2 ,\r\n 3 ] ,\"o\" : { } }",
	`{"long":"` + strings.Repeat("x", 70000) + `"}`,
	`{"big":[0` + strings.Repeat(",1", 20000) + `]}`,
	`{"floats":[1.5` + strings.Repeat(",1.5", 5000) + `]}`,
}

// TestPayloadToBSONMatchesTheTree: the streaming encoder writes the bytes
// the tree decoder and bson.Marshal wrote, counts them exactly, and
// refuses what they refused.
func TestPayloadToBSONMatchesTheTree(t *testing.T) {
	for _, p := range payloadCorpus {
		name := p
		if len(name) > 60 {
			name = name[:60]
		}
		want, err := treePayloadToBSON(json.RawMessage(p))
		require.NoError(t, err, name)
		got, err := payloadToBSON(json.RawMessage(p))
		require.NoError(t, err, name)
		require.Equal(t, []byte(want), []byte(got), name)
		n, err := payloadBSONSize(json.RawMessage(p))
		require.NoError(t, err, name)
		require.Equal(t, len(want), n, name)
	}
	for _, p := range []string{`[]`, `"s"`, `1`, `{`, `{"a":}`, `{"a":1,}`, `{"a":1}x`, `{"a":1} {}`, `{a:1}`, `{"a":tru}`,
		`{"a":[1 2]}`, `{"a":9223372036854775808}`, `{"a":[-9223372036854775809]}`, `{"a":1e400}`, `{"a\u0000b":1}`, `{"a":"x` + "\x01" + `"}`, `  `} {
		_, treeErr := treePayloadToBSON(json.RawMessage(p))
		require.Error(t, treeErr, p)
		_, err := payloadToBSON(json.RawMessage(p))
		require.Error(t, err, p)
		_, err = payloadBSONSize(json.RawMessage(p))
		require.Error(t, err, p)
	}
}

// FuzzPayloadToBSON: on any input the streaming encoder and the tree agree
// (both refuse, or the same bytes), and the count is the length.
func FuzzPayloadToBSON(f *testing.F) {
	for _, p := range payloadCorpus {
		if len(p) < 4096 {
			f.Add([]byte(p))
		}
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		want, treeErr := treePayloadToBSON(p)
		got, err := payloadToBSON(p)
		if treeErr != nil || err != nil {
			require.Equal(t, treeErr != nil, err != nil, "tree: %v, stream: %v", treeErr, err)
			return
		}
		require.Equal(t, []byte(want), []byte(got))
		n, err := payloadBSONSize(p)
		require.NoError(t, err)
		require.Equal(t, len(got), n)
	})
}
