// Package jsonlex reads JSON's tokens in a byte slice, without
// allocating: the one lexer of the request decoder and of the payload's
// canonical form, which read the same bytes alike.
package jsonlex

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Space returns the index of the first byte at or after i that is not
// JSON white space.
func Space(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// Next reads what follows a value of an object or array whose closing
// byte is end: a comma (more is true) or end. It returns the index after
// it, or ok false when neither comes.
func Next(d []byte, i int, end byte) (next int, more, ok bool) {
	i = Space(d, i)
	switch {
	case i >= len(d):
		return i, false, false
	case d[i] == ',':
		return i + 1, true, true
	case d[i] == end:
		return i + 1, false, true
	}
	return i, false, false
}

// String reads the string whose opening quote is at d[i]. It returns the
// index after its closing quote and whether it holds an escape; ok is
// false when it is not a well-formed JSON string (a control byte, a bad
// escape, no end). It does not check UTF-8.
func String(d []byte, i int) (end int, escaped, ok bool) {
	for i++; i < len(d); {
		switch c := d[i]; {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(d) {
				return i, false, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) || !isHex(d[i+5]) {
					return i, false, false
				}
				i += 6
			default:
				return i, false, false
			}
		case c < 0x20:
			return i, false, false
		default:
			i++
		}
	}
	return i, false, false
}

// Number reads the number (RFC 8259 section 6) that starts at d[i]. It
// returns the index after it, or ok false.
func Number(d []byte, i int) (end int, ok bool) {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digits(d, i)
	default:
		return i, false
	}
	if i < len(d) && d[i] == '.' {
		if i++; i >= len(d) || !IsDigit(d[i]) {
			return i, false
		}
		i = digits(d, i)
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		if i++; i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !IsDigit(d[i]) {
			return i, false
		}
		i = digits(d, i)
	}
	return i, true
}

// Literal reads lit (true, false, null) at d[i]. It returns the index
// after it, or ok false.
func Literal(d []byte, i int, lit string) (end int, ok bool) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

func digits(d []byte, i int) int {
	for i < len(d) && IsDigit(d[i]) {
		i++
	}
	return i
}

// IsDigit reports whether c is an ASCII digit.
func IsDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return IsDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }

// Unquote appends to dst the text of the JSON string s (the bytes between
// its quotes, well formed), as encoding/json decodes it: a lone or
// unpaired surrogate escape, and each byte that is not UTF-8, becomes
// U+FFFD.
func Unquote(dst, s []byte) []byte {
	for r := 0; r < len(s); {
		b := s[r]
		switch {
		case b == '\\':
			switch s[r+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				rr := getu4(s[r:])
				r += 6
				if utf16.IsSurrogate(rr) {
					rr1 := getu4(s[r:])
					if dec := utf16.DecodeRune(rr, rr1); dec != utf8.RuneError {
						r += 6
						dst = utf8.AppendRune(dst, dec)
						continue
					}
					rr = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, rr)
				continue
			default: // " \ /
				dst = append(dst, s[r+1])
			}
			r += 2
		case b < utf8.RuneSelf:
			dst = append(dst, b)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			dst = utf8.AppendRune(dst, rr)
			r += size
		}
	}
	return dst
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	v, err := strconv.ParseUint(string(s[2:6]), 16, 16)
	if err != nil {
		return -1
	}
	return rune(v)
}

const hexDigits = "0123456789abcdef"

// AppendString appends the JSON string of s as encoding/json writes it
// (HTML-safe: <, > and & escaped, as are U+2028 and U+2029; bytes that are
// not UTF-8 become U+FFFD).
func AppendString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
