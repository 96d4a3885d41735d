package projection

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// The named parameters a statement may use besides :payload.<path>.
var originParams = []string{"eventId", "idempotencyKey", "sourceKey", "deviceKey", "type", "occurredAt", "createdAt", "payload"}

// eventIDsParam is the one parameter of an -- unproject: statement: the
// ids of the originals whose rows replay --rebuild removes (text[]).
const eventIDsParam = "eventIds"

// The kinds of statement: what a file's statement runs for.
type kind int

const (
	// kindProject projects originals (the worker's batches).
	kindProject kind = iota
	// kindUnproject takes originals' share out of derived rows before
	// replay --rebuild removes their key rows (-- unproject:).
	kindUnproject
	// kindRecompute sets derived rows to what the rows say, for the
	// originals verify --repair re-publishes (-- recompute:).
	kindRecompute
)

// directive returns the comment line that marks a statement of k.
func (k kind) directive() string {
	switch k {
	case kindUnproject:
		return "-- unproject:"
	case kindRecompute:
		return "-- recompute:"
	default:
		return ""
	}
}

// statement is one statement of a file: its text cut at its parameters.
// Its SQL with each parameter reference refs[i] between parts[i] and
// parts[i+1] is what the file says.
type statement struct {
	// line is the file's line the statement starts on (1-based).
	line int
	// parts and refs: the text around the parameter references; refs are
	// indexes into params.
	parts []string
	refs  []int
	// params are the statement's distinct parameters, in order of first
	// use.
	params []param
	// types restricts the statement to these event types; empty: every
	// type.
	types []string
	// kind is what the statement runs for.
	kind kind
	// values is the index of the part that holds the statement's one
	// single-row VALUES list, and valuesOpen, valuesClose the offsets of its
	// parentheses in that part and in the part closing it; -1 when the
	// statement has no such list with every parameter inside it.
	values                 int
	valuesOpen, valuesPart int
	valuesClose            int
}

// param is a named parameter: one of originParams, or a payload path.
type param struct {
	name string
	// path is the payload path of :payload.<path>; nil otherwise.
	path []string
}

// parse cuts src (the file's text) into statements and reads its
// directives: `-- key: TABLE.COLUMN [types A, B]` once per file; before a
// statement `-- types: A, B`, `-- per-event:` (it runs once per event, never
// in its batch form), and `-- unproject:` or `-- recompute:` for a statement
// that does not project (see kind). Errors name the line.
func parse(src string) ([]*statement, *Key, error) {
	p := &parser{src: src, line: 1}
	return p.run()
}

type parser struct {
	src  string
	i    int
	line int

	key   *Key
	types []string
	// kind is the kind the next statement has (its directive's), and
	// kindLine that directive's line.
	kind     kind
	kindLine int
	// perEvent is set by a -- per-event: line for the next statement, at
	// perEventLine.
	perEvent     bool
	perEventLine int
	out          []*statement

	cur      *statement
	buf      strings.Builder
	paramIdx map[string]int
	// depth of parentheses; valuesDepth is the depth inside the VALUES
	// list being read, 0 when none.
	depth       int
	valuesDepth int
	valuesSeen  int
	// valuesState: 0 before VALUES, 1 after it, 2 inside its list, 3 just
	// after the list, 4 past it; -1 when it is not a single-row list.
	valuesState int
	outside     bool
}

func (p *parser) errorf(line int, format string, args ...any) error {
	return &lineError{line: line, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) run() ([]*statement, *Key, error) {
	p.begin()
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '\n':
			p.line++
			p.emit(1)
		case c == '-' && p.peek(1) == '-':
			if err := p.comment(); err != nil {
				return nil, nil, err
			}
		case c == '/' && p.peek(1) == '*':
			if err := p.blockComment(); err != nil {
				return nil, nil, err
			}
		case c == '\'':
			escapes := p.i > 0 && (p.src[p.i-1] == 'E' || p.src[p.i-1] == 'e') && (p.i < 2 || !isIdent(p.src[p.i-2]))
			if err := p.quoted('\'', escapes); err != nil {
				return nil, nil, err
			}
		case c == '"':
			if err := p.quoted('"', false); err != nil {
				return nil, nil, err
			}
		case c == '$' && p.dollarTag() != "":
			if err := p.dollarQuoted(); err != nil {
				return nil, nil, err
			}
		case c == ':' && p.peek(1) == ':':
			p.emit(2)
		case c == ':' && isIdentStart(p.peek(1)) && (p.i == 0 || p.src[p.i-1] != ':'):
			if err := p.param(); err != nil {
				return nil, nil, err
			}
		case c == ';':
			if err := p.end(); err != nil {
				return nil, nil, err
			}
			p.i++
			p.begin()
		case c == '(':
			p.depth++
			if p.valuesState == 1 && p.valuesDepth == 0 {
				p.valuesState, p.valuesDepth = 2, p.depth
				p.cur.values, p.cur.valuesOpen = len(p.cur.parts), p.buf.Len()
			}
			p.emit(1)
		case c == ')':
			if p.valuesState == 2 && p.depth == p.valuesDepth {
				p.valuesState = 3
				p.cur.valuesPart, p.cur.valuesClose = len(p.cur.parts), p.buf.Len()
			}
			p.depth--
			p.emit(1)
		case p.valuesState == 3 && c != ' ' && c != '\t' && c != '\r':
			// The first byte after the list: a comma starts another row.
			p.valuesState = 4
			if c == ',' {
				p.valuesState = -1
			}
			continue
		case isIdentStart(c) && (p.i == 0 || !isIdent(p.src[p.i-1])):
			j := p.i
			for j < len(p.src) && isIdent(p.src[j]) {
				j++
			}
			if strings.EqualFold(p.src[p.i:j], "values") {
				p.valuesSeen++
				if p.valuesState == 0 {
					p.valuesState = 1
				}
			} else if p.valuesState == 1 {
				p.valuesState = -1 // VALUES not followed by a list
			}
			p.emit(j - p.i)
		default:
			if p.valuesState == 1 && !unicode.IsSpace(rune(c)) {
				p.valuesState = -1
			}
			p.emit(1)
		}
	}
	if err := p.end(); err != nil {
		return nil, nil, err
	}
	if len(p.types) > 0 {
		return nil, nil, p.errorf(p.line, "a -- types: line with no statement after it")
	}
	if p.kind != kindProject {
		return nil, nil, p.errorf(p.kindLine, "a %s line with no statement after it", p.kind.directive())
	}
	if p.perEvent {
		return nil, nil, p.errorf(p.perEventLine, "a -- per-event: line with no statement after it")
	}
	if !slices.ContainsFunc(p.out, func(s *statement) bool { return s.kind == kindProject }) {
		return nil, nil, p.errorf(1, "no statement that projects")
	}
	if p.key == nil {
		for _, s := range p.out {
			if s.kind != kindProject {
				return nil, nil, p.errorf(s.line, "a %s statement needs the file's -- key: TABLE.COLUMN line", s.kind.directive())
			}
		}
	}
	return p.out, p.key, nil
}

func (p *parser) peek(n int) byte {
	if p.i+n < len(p.src) {
		return p.src[p.i+n]
	}
	return 0
}

// emit copies n bytes of the source to the current statement.
func (p *parser) emit(n int) {
	if p.cur.line == 0 && strings.TrimSpace(p.src[p.i:p.i+n]) != "" {
		p.cur.line = p.line
	}
	p.buf.WriteString(p.src[p.i : p.i+n])
	p.i += n
}

// begin starts a new statement.
func (p *parser) begin() {
	p.cur = &statement{values: -1}
	p.buf.Reset()
	p.paramIdx = map[string]int{}
	p.depth, p.valuesDepth, p.valuesSeen, p.valuesState = 0, 0, 0, 0
	p.outside = false
}

// end ends the current statement, keeping it when it has any text.
func (p *parser) end() error {
	p.cur.parts = append(p.cur.parts, p.buf.String())
	if p.cur.line == 0 { // only blanks and comments
		return nil
	}
	if p.valuesState < 3 || p.valuesSeen != 1 || p.outside {
		p.cur.values = -1
	}
	if p.kind == kindUnproject && len(p.types) > 0 {
		return p.errorf(p.kindLine, "an -- unproject: statement runs for every original removed: -- types: does not apply to it")
	}
	if p.kind == kindUnproject && len(p.cur.params) == 0 {
		return p.errorf(p.cur.line, "an -- unproject: statement must use :%s (the ids of the originals removed)", eventIDsParam)
	}
	if p.kind == kindUnproject && p.cur.values >= 0 {
		p.cur.values = -1 // it runs once, with the ids as one array
	}
	if p.perEvent {
		p.cur.values, p.perEvent = -1, false
	}
	p.cur.types, p.types = p.types, nil
	p.cur.kind, p.kind = p.kind, kindProject
	p.out = append(p.out, p.cur)
	return nil
}

// comment reads a line comment and its directive, if it is one.
func (p *parser) comment() error {
	j := strings.IndexByte(p.src[p.i:], '\n')
	if j < 0 {
		j = len(p.src) - p.i
	}
	text := strings.TrimSpace(strings.TrimPrefix(p.src[p.i:p.i+j], "--"))
	name, value, ok := strings.Cut(text, ":")
	name = strings.ToLower(strings.TrimSpace(name))
	value = strings.TrimSpace(value)
	switch {
	case ok && name == "key":
		if p.key != nil {
			return p.errorf(p.line, "a second -- key: line")
		}
		k, err := parseKey(value)
		if err != nil {
			return p.errorf(p.line, "%v", err)
		}
		p.key = k
	case ok && name == "types":
		if p.cur.line != 0 {
			return p.errorf(p.line, "a -- types: line inside a statement (put it before the statement)")
		}
		for t := range strings.SplitSeq(value, ",") {
			if t = strings.TrimSpace(t); t != "" {
				p.types = append(p.types, t)
			}
		}
		if len(p.types) == 0 {
			return p.errorf(p.line, "a -- types: line with no type")
		}
	case ok && name == "per-event":
		if err := p.bare("-- per-event:", value); err != nil {
			return err
		}
		p.perEvent, p.perEventLine = true, p.line
	case ok && (name == "unproject" || name == "recompute"):
		k := map[string]kind{"unproject": kindUnproject, "recompute": kindRecompute}[name]
		if err := p.bare(k.directive(), value); err != nil {
			return err
		}
		if p.kind != kindProject {
			return p.errorf(p.line, "two directives for one statement (%s, then %s)", p.kind.directive(), k.directive())
		}
		p.kind, p.kindLine = k, p.line
	}
	p.i += j // the newline is read by run
	return nil
}

// bare checks a directive line that marks the next statement and takes
// nothing after its colon.
func (p *parser) bare(directive, value string) error {
	switch {
	case p.cur.line != 0:
		return p.errorf(p.line, "a %s line inside a statement (put it before the statement)", directive)
	case value != "":
		return p.errorf(p.line, "%s takes nothing after the colon: the statement follows on the next lines", directive)
	}
	return nil
}

// parseKey reads TABLE.COLUMN (or SCHEMA.TABLE.COLUMN), optionally
// followed by `types A, B`: the event types the key table holds rows of.
func parseKey(s string) (*Key, error) {
	var types []string
	if name, list, ok := strings.Cut(s, " "); ok {
		word, list, _ := strings.Cut(strings.TrimSpace(list), " ")
		if word != "types" {
			return nil, fmt.Errorf("-- key: wants TABLE.COLUMN, optionally followed by types A, B (got %q)", s)
		}
		for t := range strings.SplitSeq(list, ",") {
			if t = strings.TrimSpace(t); t != "" {
				types = append(types, t)
			}
		}
		if len(types) == 0 {
			return nil, fmt.Errorf("-- key: %s types names no type", name)
		}
		s = name
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 || slices.Contains(parts, "") {
		return nil, fmt.Errorf("-- key: wants TABLE.COLUMN, got %q", s)
	}
	for _, part := range parts {
		for i := range len(part) {
			if !isIdent(part[i]) {
				return nil, fmt.Errorf("-- key: %q is not a plain identifier", part)
			}
		}
	}
	return &Key{Table: strings.Join(parts[:len(parts)-1], "."), Column: parts[len(parts)-1], Types: types}, nil
}

func (p *parser) blockComment() error {
	start := p.line
	j := strings.Index(p.src[p.i+2:], "*/")
	if j < 0 {
		return p.errorf(start, "an unterminated /* comment")
	}
	text := p.src[p.i : p.i+2+j+2]
	p.line += strings.Count(text, "\n")
	p.buf.WriteString(text)
	p.i += len(text)
	return nil
}

// quoted copies a string or quoted identifier; a doubled quote is part of
// it, and with escapes a backslash escapes the next byte.
func (p *parser) quoted(q byte, escapes bool) error {
	start := p.line
	j := p.i + 1
	for {
		if j >= len(p.src) {
			return p.errorf(start, "an unterminated %c quote", q)
		}
		c := p.src[j]
		switch {
		case escapes && c == '\\':
			j++
		case c == q && j+1 < len(p.src) && p.src[j+1] == q:
			j++
		case c == q:
			text := p.src[p.i : j+1]
			p.line += strings.Count(text, "\n")
			p.buf.WriteString(text)
			p.i = j + 1
			return nil
		}
		j++
	}
}

// dollarTag returns the $tag$ that starts at i, or "".
func (p *parser) dollarTag() string {
	if p.i > 0 && isIdent(p.src[p.i-1]) {
		return ""
	}
	j := p.i + 1
	for j < len(p.src) && isIdent(p.src[j]) && (j != p.i+1 || p.src[j] < '0' || p.src[j] > '9') {
		j++
	}
	if j < len(p.src) && p.src[j] == '$' {
		return p.src[p.i : j+1]
	}
	return ""
}

func (p *parser) dollarQuoted() error {
	start := p.line
	tag := p.dollarTag()
	j := strings.Index(p.src[p.i+len(tag):], tag)
	if j < 0 {
		return p.errorf(start, "an unterminated %s quote", tag)
	}
	text := p.src[p.i : p.i+len(tag)+j+len(tag)]
	p.line += strings.Count(text, "\n")
	p.buf.WriteString(text)
	p.i += len(text)
	return nil
}

// param reads a named parameter.
func (p *parser) param() error {
	j := p.i + 1
	for j < len(p.src) && (isIdent(p.src[j]) || p.src[j] == '.' && j+1 < len(p.src) && isIdentStart(p.src[j+1])) {
		j++
	}
	name := p.src[p.i+1 : j]
	var pr param
	switch {
	case p.kind == kindUnproject && name != eventIDsParam:
		return p.errorf(p.line, "an -- unproject: statement takes only :%s (the ids of the originals removed), not :%s", eventIDsParam, name)
	case name == eventIDsParam && p.kind != kindUnproject:
		return p.errorf(p.line, ":%s is the parameter of -- unproject: statements only", eventIDsParam)
	case name == eventIDsParam:
		pr = param{name: name}
	case slices.Contains(originParams, name):
		pr = param{name: name}
	case strings.HasPrefix(name, "payload."):
		pr = param{name: name, path: strings.Split(strings.TrimPrefix(name, "payload."), ".")}
	default:
		return p.errorf(p.line, "unknown parameter :%s (known: :%s and :payload.<path>)", name, strings.Join(originParams, ", :"))
	}
	if p.cur.line == 0 {
		p.cur.line = p.line
	}
	idx, ok := p.paramIdx[name]
	if !ok {
		idx = len(p.cur.params)
		p.paramIdx[name] = idx
		p.cur.params = append(p.cur.params, pr)
	}
	if p.valuesState != 2 {
		p.outside = true
	}
	p.cur.parts = append(p.cur.parts, p.buf.String())
	p.cur.refs = append(p.cur.refs, idx)
	p.buf.Reset()
	p.i = j
	return nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// lineError is an error of the file at a line.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }
