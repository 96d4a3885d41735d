package outbox

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/outboxd/outboxd/internal/jsonlex"
)

// The range of PostgreSQL's numeric, which jsonb numbers are: a number
// outside it is refused by the read model (22003), so ingest refuses it
// too.
const (
	// MaxNumberIntegerDigits is how many digits a payload number may have
	// before the decimal point.
	MaxNumberIntegerDigits = 131072
	// MaxNumberScale is how many digits a payload number may have after
	// the decimal point, as written (trailing zeros count) and shifted by
	// its exponent: 1e-16383 is the smallest positive number accepted,
	// 1.0e-16383 already has one digit too many.
	MaxNumberScale = 16383
	// maxNumberExponent bounds the exponent of a number PostgreSQL reads,
	// even of a zero.
	maxNumberExponent = math.MaxInt32 / 2
)

// canonicalizer turns a payload's JSON into its canonical form in one pass
// over the bytes, without decoding it into a tree: members sorted by name
// (the last of members named alike kept), no white space, strings as
// encoding/json writes them, numbers as written. The output is byte for
// byte what json.Marshal makes of the map[string]any that encoding/json
// decodes the payload into (with UseNumber).
type canonicalizer struct {
	data []byte
	i    int
	out  []byte
	// members are the members of the open objects, outermost first; their
	// names live in names when unescaped, else in data.
	members []jsonMember
	names   []byte
	tmp     []byte
	path    []pathStep
	// field and reason are the first rule broken (the walk goes on, so
	// that malformed JSON is told as such).
	field, reason string
}

// jsonMember is one member of an object being read: its name (in data, or in
// names when escaped) and its value's canonical JSON in out.
type jsonMember struct {
	nameStart, nameEnd int
	escaped            bool
	valStart, valEnd   int
}

// pathStep is a member name, or an array index when isIndex.
type pathStep struct {
	name    string
	index   int
	isIndex bool
}

// errMalformed ends a walk over JSON that is not well formed.
var errMalformed = fmt.Errorf("malformed JSON")

var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

// maxPooledScratch is the largest scratch buffer a pooled canonicalizer
// keeps.
const maxPooledScratch = 1 << 20

// canonicalPayload checks that raw is a JSON object every store and the
// read model can hold, and returns its canonical JSON (sorted keys, numbers
// as written). On refusal it returns the offending field ("payload" or
// "payload.a.b[2]") and the reason.
func canonicalPayload(raw []byte) ([]byte, string, string) {
	c := canonicalizers.Get().(*canonicalizer)
	defer func() {
		if cap(c.tmp) <= maxPooledScratch && cap(c.names) <= maxPooledScratch && cap(c.members) <= maxPooledScratch/32 {
			*c = canonicalizer{members: c.members[:0], names: c.names[:0], tmp: c.tmp[:0], path: c.path[:0]}
			canonicalizers.Put(c)
		}
	}()
	*c = canonicalizer{data: raw, out: make([]byte, 0, len(raw)), members: c.members[:0], names: c.names[:0], tmp: c.tmp[:0], path: c.path[:0]}
	c.space()
	if c.i >= len(c.data) || c.data[c.i] != '{' {
		return nil, "payload", "must be a JSON object"
	}
	if err := c.value(0); err != nil {
		return nil, "payload", "must be a JSON object"
	}
	if c.space(); c.i != len(c.data) {
		return nil, "payload", "must be a JSON object"
	}
	if c.reason != "" {
		return nil, c.field, c.reason
	}
	return c.out, "", ""
}

// bad records the first rule broken, at the current path (plus name, when
// not empty).
func (c *canonicalizer) bad(reason string) {
	if c.reason == "" {
		c.field, c.reason = c.pathString(), reason
	}
}

func (c *canonicalizer) pathString() string {
	var b strings.Builder
	b.WriteString("payload")
	for _, st := range c.path {
		if st.isIndex {
			fmt.Fprintf(&b, "[%d]", st.index)
			continue
		}
		b.WriteByte('.')
		b.WriteString(st.name)
	}
	return b.String()
}

// value writes the canonical form of the value at c.i; depth counts the
// objects and arrays around it.
func (c *canonicalizer) value(depth int) error {
	c.space()
	if c.i >= len(c.data) {
		return errMalformed
	}
	switch b := c.data[c.i]; {
	case b == '{':
		return c.object(depth)
	case b == '[':
		return c.array(depth)
	case b == '"':
		return c.stringValue()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number()
	}
	return errMalformed
}

func (c *canonicalizer) object(depth int) error {
	c.i++ // {
	if depth+1 > MaxPayloadDepth {
		c.bad(fmt.Sprintf("is nested deeper than %d levels", MaxPayloadDepth))
	}
	start := len(c.out)
	base := len(c.members)
	c.space()
	if c.i < len(c.data) && c.data[c.i] == '}' {
		c.i++
		c.out = append(c.out, '{', '}')
		return nil
	}
	for {
		c.space()
		if c.i >= len(c.data) || c.data[c.i] != '"' {
			return errMalformed
		}
		m, err := c.name()
		if err != nil {
			return err
		}
		name := c.memberName(m)
		if len(name) == 0 || name[0] == '$' || bytes.IndexByte(name, 0) >= 0 {
			c.bad(fmt.Sprintf("key %q is not allowed (empty, starts with $ or holds NUL)", name))
		}
		c.space()
		if c.i >= len(c.data) || c.data[c.i] != ':' {
			return errMalformed
		}
		c.i++
		c.path = append(c.path, pathStep{name: string(name)})
		m.valStart = len(c.out)
		if err := c.value(depth + 1); err != nil {
			return err
		}
		m.valEnd = len(c.out)
		c.path = c.path[:len(c.path)-1]
		c.members = append(c.members, m)
		more, err := c.next('}')
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	c.emitObject(start, base)
	return nil
}

// emitObject replaces the values written since start by the object of
// members[base:], sorted by name.
func (c *canonicalizer) emitObject(start, base int) {
	ms := c.members[base:]
	slices.SortStableFunc(ms, func(a, b jsonMember) int { return bytes.Compare(c.memberName(a), c.memberName(b)) })
	t := append(c.tmp[:0], '{')
	for k, m := range ms {
		if k+1 < len(ms) && bytes.Equal(c.memberName(m), c.memberName(ms[k+1])) {
			continue // a later member has this name
		}
		if len(t) > 1 {
			t = append(t, ',')
		}
		t = jsonlex.AppendString(t, c.memberName(m))
		t = append(t, ':')
		t = append(t, c.out[m.valStart:m.valEnd]...)
	}
	t = append(t, '}')
	c.out = append(c.out[:start], t...)
	c.tmp = t
	c.members = c.members[:base]
	if base == 0 {
		c.names = c.names[:0]
	}
}

func (c *canonicalizer) memberName(m jsonMember) []byte {
	if m.escaped {
		return c.names[m.nameStart:m.nameEnd]
	}
	return c.data[m.nameStart:m.nameEnd]
}

func (c *canonicalizer) array(depth int) error {
	c.i++ // [
	if depth+1 > MaxPayloadDepth {
		c.bad(fmt.Sprintf("is nested deeper than %d levels", MaxPayloadDepth))
	}
	c.out = append(c.out, '[')
	c.space()
	if c.i < len(c.data) && c.data[c.i] == ']' {
		c.i++
		c.out = append(c.out, ']')
		return nil
	}
	c.path = append(c.path, pathStep{isIndex: true})
	for n := 0; ; n++ {
		if n > 0 {
			c.out = append(c.out, ',')
		}
		c.path[len(c.path)-1].index = n
		if err := c.value(depth + 1); err != nil {
			return err
		}
		more, err := c.next(']')
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	c.path = c.path[:len(c.path)-1]
	c.out = append(c.out, ']')
	return nil
}

// next reads the comma or the closing byte end after a value; more
// reports a comma.
func (c *canonicalizer) next(end byte) (bool, error) {
	i, more, ok := jsonlex.Next(c.data, c.i, end)
	if !ok {
		return false, errMalformed
	}
	c.i = i
	return more, nil
}

// rawString reads the string at c.i and returns the bytes between its
// quotes and whether they need decoding (escapes, or bytes that are not
// valid UTF-8).
func (c *canonicalizer) rawString() ([]byte, bool, error) {
	end, escaped, ok := jsonlex.String(c.data, c.i)
	if !ok {
		return nil, false, errMalformed
	}
	s := c.data[c.i+1 : end-1]
	c.i = end
	return s, escaped || !utf8.Valid(s), nil
}

// name reads a member name.
func (c *canonicalizer) name() (jsonMember, error) {
	s, coded, err := c.rawString()
	if err != nil {
		return jsonMember{}, err
	}
	if !coded {
		start := c.i - 1 - len(s)
		return jsonMember{nameStart: start, nameEnd: c.i - 1}, nil
	}
	start := len(c.names)
	c.names = jsonlex.Unquote(c.names, s)
	return jsonMember{nameStart: start, nameEnd: len(c.names), escaped: true}, nil
}

func (c *canonicalizer) stringValue() error {
	s, coded, err := c.rawString()
	if err != nil {
		return err
	}
	if !coded {
		// PostgreSQL text and jsonb cannot hold U+0000 (22P05); unescaped,
		// it is not JSON.
		c.out = jsonlex.AppendString(c.out, s)
		return nil
	}
	mark := len(c.tmp)
	c.tmp = jsonlex.Unquote(c.tmp, s)
	v := c.tmp[mark:]
	if bytes.IndexByte(v, 0) >= 0 {
		c.bad("must not contain the NUL character (U+0000), which the read model cannot store")
	}
	c.out = jsonlex.AppendString(c.out, v)
	c.tmp = c.tmp[:mark]
	return nil
}

func (c *canonicalizer) literal(lit string) error {
	i, ok := jsonlex.Literal(c.data, c.i, lit)
	if !ok {
		return errMalformed
	}
	c.i = i
	c.out = append(c.out, lit...)
	return nil
}

// number reads a JSON number (RFC 8259 section 6), checks it and writes it
// as written.
func (c *canonicalizer) number() error {
	start := c.i
	i, ok := jsonlex.Number(c.data, start)
	if !ok {
		return errMalformed
	}
	c.i = i
	num := c.data[start:i]
	if reason := numberProblem(num); reason != "" {
		c.bad(reason)
	}
	c.out = append(c.out, num...)
	return nil
}

// numberProblem says why the JSON number num cannot be stored, or "".
// Integers beyond 64 bits and floats beyond float64 do not survive BSON
// (an integer would come back as a rounded double), and PostgreSQL's
// numeric would read them differently; numbers beyond numeric's range
// the read model refuses.
func numberProblem(num []byte) string {
	fast := len(num) <= 18
	for _, b := range num {
		if !jsonlex.IsDigit(b) && b != '-' {
			fast = false
			break
		}
	}
	if fast {
		return "" // an integer of at most 18 digits
	}
	// The text is converted where it is used, not once into a variable
	// that the messages would move to the heap for every number.
	if !bytes.ContainsAny(num, ".eE") {
		if _, err := strconv.ParseInt(string(num), 10, 64); err == nil {
			return ""
		}
		return fmt.Sprintf("integer %s does not fit in a signed 64-bit integer (%d to %d); send it as a string", shortNumber(string(num)), int64(math.MinInt64), int64(math.MaxInt64))
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil {
		return fmt.Sprintf("number %s is out of range", shortNumber(string(num)))
	}
	if !inNumericRange(string(num)) {
		return fmt.Sprintf("number %s is beyond the read model's range (at most %d digits before the decimal point and %d after)",
			shortNumber(string(num)), MaxNumberIntegerDigits, MaxNumberScale)
	}
	// A decimal with more digits than a float64 holds would read back
	// rounded from MongoDB (123456789012345678.5 as 1.2345678901234568e+17)
	// while SQLite keeps its text: refused on every store. One whose value
	// the float's shortest form states exactly (21.5, 0.1, 1e-7) is kept.
	if !shortDecimal(num) && !exactFloat(string(num), f) {
		return fmt.Sprintf("number %s has more significant digits than a 64-bit float holds (it would read back as %s); send it as a string",
			shortNumber(string(num)), strconv.FormatFloat(f, 'g', -1, 64))
	}
	return ""
}

// Bounds of shortDecimal: a float64 holds every decimal of up to 15
// significant digits (DBL_DIG) between its smallest normal number (about
// 2.2e-308) and its largest (about 1.8e308), and states it again as the
// shortest form of the float.
const (
	shortDecimalDigits = 15
	shortDecimalPower  = 300
)

// shortDecimal reports whether the JSON number num (with a fraction or an
// exponent) is a decimal that its nearest float64 states exactly, so that
// exactFloat would say so without its math/big work: zero, or at most
// shortDecimalDigits significant digits (trailing zeros are not) with its
// first one between 10^-shortDecimalPower and 10^shortDecimalPower.
func shortDecimal(num []byte) bool {
	i := 0
	if i < len(num) && num[i] == '-' {
		i++
	}
	first, last, n := -1, -1, 0 // positions among the mantissa's digits
	intDigits := 0
	for ; i < len(num) && num[i] != 'e' && num[i] != 'E'; i++ {
		c := num[i]
		if c == '.' {
			intDigits = n
			continue
		}
		if c != '0' {
			if first < 0 {
				first = n
			}
			last = n
		}
		n++
	}
	if !bytes.ContainsRune(num, '.') {
		intDigits = n
	}
	if first < 0 {
		return true // zero
	}
	if last-first+1 > shortDecimalDigits {
		return false
	}
	exp, neg := 0, false
	if i < len(num) {
		i++
		if i < len(num) && (num[i] == '+' || num[i] == '-') {
			neg = num[i] == '-'
			i++
		}
		for ; i < len(num); i++ {
			if exp = exp*10 + int(num[i]-'0'); exp > 2*shortDecimalPower {
				return false
			}
		}
	}
	if neg {
		exp = -exp
	}
	power := intDigits - 1 - first + exp // of the first significant digit
	return power >= -shortDecimalPower && power <= shortDecimalPower
}

// exactFloat reports whether the decimal text and the shortest form of f,
// its nearest float64, are the same number.
func exactFloat(text string, f float64) bool {
	want, ok := new(big.Rat).SetString(text)
	if !ok {
		return false
	}
	got, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return ok && want.Cmp(got) == 0
}

// inNumericRange reports whether PostgreSQL's numeric takes the JSON number
// s: its scale (fraction digits as written, less the exponent) at most
// MaxNumberScale, its integer digits at most MaxNumberIntegerDigits.
func inNumericRange(s string) bool {
	s = strings.TrimPrefix(s, "-")
	mant, expText, _ := strings.Cut(strings.ToLower(s), "e")
	exp := 0
	if expText != "" {
		e, err := strconv.ParseInt(expText, 10, 64)
		if err != nil || e > maxNumberExponent || e < -maxNumberExponent {
			return false
		}
		exp = int(e)
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if scale := len(frac) - exp; scale > MaxNumberScale {
		return false
	}
	all := strings.TrimLeft(intPart+frac, "0")
	if all == "" {
		return true // zero
	}
	// The digits before the point: those of the integer part that are
	// significant, moved by the exponent.
	intDigits := len(intPart) + exp - (len(intPart) + len(frac) - len(all))
	return intDigits <= MaxNumberIntegerDigits
}

// shortNumber is s for a message: at most 40 bytes of it.
func shortNumber(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:20] + "…" + s[len(s)-10:]
}

func (c *canonicalizer) space() { c.i = jsonlex.Space(c.data, c.i) }
