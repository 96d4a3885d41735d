package outbox

import (
	"errors"
	"fmt"
	"time"
	"unicode"
)

// ParseTime reads an RFC 3339 date-time (section 5.6) exactly:
//
//	date-time = full-date ("T" / "t") partial-time ("Z" / "z" / ("+" / "-") hh ":" mm)
//
// with months 01–12, days valid for the month and year, hours 00–23,
// minutes 00–59, seconds 00–60, any number of fraction digits (digits past
// the nanosecond are dropped), and offsets of at most 23:59. Anything else is
// refused, including the forms time.Parse lets through (an offset of 24:00,
// one-digit fields) and the space that section 5.6's note allows in other
// protocols.
//
// A leap second (second 60) is accepted only at 23:59:60 UTC, as RFC 3339
// section 5.7 allows, and is read as 23:59:59.999999999 UTC, the last
// instant of that second's day, so the event keeps its UTC day in the
// statistics. (Whether a leap second was really inserted that day is not
// checked.)
func ParseTime(s string) (time.Time, error) {
	p := parser{s: s}
	year := p.digits(4, "year")
	p.lit('-')
	month := p.digits(2, "month")
	p.lit('-')
	day := p.digits(2, "day")
	p.oneOf("Tt")
	hour := p.digits(2, "hour")
	p.lit(':')
	minute := p.digits(2, "minute")
	p.lit(':')
	sec := p.digits(2, "second")
	nanos := 0
	if p.err == nil && p.peek() == '.' {
		p.i++
		n := 0
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			if n < 9 {
				nanos = nanos*10 + int(p.s[p.i]-'0')
			}
			n++
			p.i++
		}
		if n == 0 {
			p.fail("a fraction needs at least one digit")
		}
		for ; n < 9; n++ {
			nanos *= 10
		}
	}
	offset := 0
	switch c := p.peek(); {
	case p.err != nil:
	case c == 'Z' || c == 'z':
		p.i++
	case c == '+' || c == '-':
		p.i++
		oh := p.digits(2, "offset hour")
		p.lit(':')
		om := p.digits(2, "offset minute")
		if p.err == nil && (oh > 23 || om > 59) {
			p.fail("the offset must lie between -23:59 and +23:59")
		}
		offset = oh*3600 + om*60
		if c == '-' {
			offset = -offset
		}
	default:
		p.fail("a time zone offset (Z or ±hh:mm) must follow the time")
	}
	if p.err == nil && p.i != len(p.s) {
		p.fail("unexpected text after the date-time")
	}
	if p.err != nil {
		return time.Time{}, p.err
	}
	switch {
	case month < 1 || month > 12:
		return time.Time{}, errors.New("the month must lie between 01 and 12")
	case day < 1 || day > daysIn(year, month):
		return time.Time{}, fmt.Errorf("day %02d does not exist in %04d-%02d", day, year, month)
	case hour > 23:
		return time.Time{}, errors.New("the hour must lie between 00 and 23")
	case minute > 59:
		return time.Time{}, errors.New("the minute must lie between 00 and 59")
	case sec > 60:
		return time.Time{}, errors.New("the second must lie between 00 and 60")
	}
	leap := sec == 60
	if leap {
		sec = 59
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nanos, time.FixedZone("", offset)).UTC()
	if leap {
		if t.Hour() != 23 || t.Minute() != 59 {
			return time.Time{}, errors.New("a leap second (second 60) can only be 23:59:60 UTC")
		}
		t = time.Date(t.Year(), t.Month(), t.Day(), 23, 59, 59, 999_999_999, time.UTC)
	}
	return t, nil
}

type parser struct {
	s   string
	i   int
	err error
}

func (p *parser) fail(msg string) {
	if p.err == nil {
		p.err = errors.New(msg)
	}
}

func (p *parser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *parser) digits(n int, what string) int {
	if p.err != nil {
		return 0
	}
	v := 0
	for k := 0; k < n; k++ {
		if p.i >= len(p.s) || !isDigit(p.s[p.i]) {
			p.fail(fmt.Sprintf("the %s must have %d digits", what, n))
			return 0
		}
		v = v*10 + int(p.s[p.i]-'0')
		p.i++
	}
	return v
}

func (p *parser) lit(c byte) {
	if p.err == nil && p.peek() != c {
		p.fail(fmt.Sprintf("expected %q at position %d", c, p.i+1))
	}
	p.i++
}

func (p *parser) oneOf(set string) {
	if p.err != nil {
		return
	}
	c := p.peek()
	for i := 0; i < len(set); i++ {
		if set[i] == c {
			p.i++
			return
		}
	}
	p.fail(fmt.Sprintf("expected 'T' between the date and the time at position %d", p.i+1))
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// isGraphic accepts letters, marks, numbers, punctuation and symbols: the
// graphic characters of Unicode without its space separators (the ASCII
// space is allowed by the caller).
func isGraphic(r rune) bool {
	return unicode.IsGraphic(r) && !unicode.Is(unicode.Zs, r)
}
