package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// treeCanonical is the canonical form as a tree decoder makes it: decode
// into map[string]any (UseNumber), check, json.Marshal. canonicalPayload
// must write the same bytes without the tree.
func treeCanonical(raw []byte) ([]byte, string, string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, "payload", "must be a JSON object"
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		// Decode reads the first value only; the stores take one.
		return nil, "payload", "must be a JSON object"
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, "payload", "must be a JSON object"
	}
	if field, reason := treeCheck(obj, "payload", 0); reason != "" {
		return nil, field, reason
	}
	canonical, err := json.Marshal(obj)
	if err != nil {
		return nil, "payload", "must be a JSON object"
	}
	return canonical, "", ""
}

func treeCheck(v any, path string, depth int) (string, string) {
	switch x := v.(type) {
	case map[string]any:
		if depth+1 > MaxPayloadDepth {
			return path, "deep"
		}
		for k, e := range x {
			if k == "" || strings.HasPrefix(k, "$") || strings.ContainsRune(k, 0) {
				return path, "key"
			}
			if f, reason := treeCheck(e, path+"."+k, depth+1); reason != "" {
				return f, reason
			}
		}
	case []any:
		if depth+1 > MaxPayloadDepth {
			return path, "deep"
		}
		for i, e := range x {
			if f, reason := treeCheck(e, fmt.Sprintf("%s[%d]", path, i), depth+1); reason != "" {
				return f, reason
			}
		}
	case string:
		if strings.ContainsRune(x, 0) {
			return path, "nul"
		}
	case json.Number:
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return "", ""
		}
		if !strings.ContainsAny(string(x), ".eE") {
			return path, "int"
		}
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) {
			return path, "range"
		}
		if !inNumericRange(string(x)) {
			return path, "numeric"
		}
		if !exactFloat(string(x), f) {
			return path, "float"
		}
	}
	return "", ""
}

var canonicalSeeds = []string{
	`{"t":21.5,"n":3}`,
	`{"b":1,"a":{"d":[1,2,{"z":null,"y":true}],"c":"x"}}`,
	`{"a":1,"a":2}`,
	`{"a":{"x":1},"b":2,"a":[3]}`,
	` { "s" : "<>&\u2028\u2029\ud800\udc00\ud800x\"\\\/\b\f\n\r\t\u0001é" } `,
	"{\"k\xff\":\"v\xfe\"}",
	`{"\u0061":1,"a":2,"b":-0.5e-3,"c":1E5,"d":-0}`,
	`{"n":1e-20000}`, `{"n":1e-16383}`, `{"n":1.0e-16383}`, `{"n":1e400}`, `{"n":123456789012345678901}`,
	`{"$x":1}`, `{"":1}`, `{"a\u0000":1}`, `{"a":"x\u0000"}`,
	`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"a":1} x`, `{"a":1}}`, `[1]`, `"s"`, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `{"a":tru}`, `{"a":01}`, `{"a":"\x"}`,
	`{"x":"\u00e9\u00E9"}`, `{"b":{},"a":[]}`,
}

// TestCanonicalPayloadMatchesTree: for each seed, the one-pass form is the
// tree's, byte for byte, and both refuse the same bodies.
func TestCanonicalPayloadMatchesTree(t *testing.T) {
	t.Parallel()
	for _, s := range canonicalSeeds {
		compareCanonical(t, []byte(s))
	}
}

func compareCanonical(t *testing.T, raw []byte) {
	t.Helper()
	want, wantField, wantReason := treeCanonical(raw)
	got, field, reason := canonicalPayload(raw)
	if wantReason == "" {
		require.Empty(t, reason, "%q refused (%s: %s)", raw, field, reason)
		require.Equal(t, string(want), string(got), "%q", raw)
		return
	}
	require.NotEmpty(t, reason, "%q accepted as %s; the tree refuses it (%s: %s)", raw, got, wantField, wantReason)
	if wantReason == "must be a JSON object" {
		require.Equal(t, wantReason, reason, "%q", raw)
	}
}

// FuzzCanonicalPayload compares the one-pass canonical form with the tree's.
func FuzzCanonicalPayload(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, _, wantReason := treeCanonical(raw)
		got, field, reason := canonicalPayload(raw)
		switch {
		case wantReason == "" && reason != "":
			t.Fatalf("%q refused (%s: %s); the tree takes it", raw, field, reason)
		case wantReason != "" && reason == "" && wantReason != "key" && wantReason != "nul" && wantReason != "deep":
			t.Fatalf("%q accepted; the tree refuses it (%s)", raw, wantReason)
		case wantReason == "" && !bytes.Equal(want, got):
			t.Fatalf("%q:\n tree %s\n pass %s", raw, want, got)
		}
	})
}

// TestShortDecimal: every decimal shortDecimal lets skip exactFloat is one
// exactFloat finds exact (random decimals of up to 15 significant digits
// across the exponents it takes, and the bounds), and what it leaves to
// exactFloat includes the inexact.
func TestShortDecimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(s string) {
		t.Helper()
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			require.False(t, shortDecimal([]byte(s)), "%s is out of a float's range", s)
			return
		}
		if shortDecimal([]byte(s)) {
			require.True(t, exactFloat(s, f), "%s is taken as exact but reads back as %s", s, strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	for range 200000 {
		digits := 1 + rng.IntN(shortDecimalDigits)
		var b strings.Builder
		if rng.IntN(2) == 0 {
			b.WriteByte('-')
		}
		mant := strconv.FormatUint(rng.Uint64N(uint64(math.Pow10(digits))), 10)
		point := rng.IntN(len(mant) + 1)
		switch {
		case point == 0:
			b.WriteString("0." + mant)
		case point == len(mant):
			b.WriteString(mant + ".0")
		default:
			b.WriteString(mant[:point] + "." + mant[point:])
		}
		fmt.Fprintf(&b, "e%d", rng.IntN(2*shortDecimalPower+20)-shortDecimalPower-10)
		check(b.String())
	}
	for _, c := range []struct {
		num   string
		short bool
	}{
		{"21.5", true}, {"0.1", true}, {"1e-7", true}, {"-0.0", true}, {"0e-16383", true}, {"1.5", true},
		{"123456789012345e285", true}, {"1e300", true}, {"1e-300", true}, {"0.001e-297", true}, {"100.000000000000000000", true},
		{"1e301", false}, {"1e-301", false}, {"5e-324", false}, {"1e308", false},
		{"1234567890123456.0", false}, {"0.1234567890123456", false}, {"123456789012345678.5", false}, {"9007199254740993.0", false},
		{"1e0000000000000000000000300", true},
	} {
		require.Equal(t, c.short, shortDecimal([]byte(c.num)), c.num)
		check(c.num)
	}
	require.False(t, exactFloat("9007199254740993.0", 9007199254740993.0), "a decimal left to exactFloat can be inexact")
}
