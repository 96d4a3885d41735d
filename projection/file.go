package projection

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/outbox"
)

// File is a SQL projection: the statements of one file that together
// project an original, run for a whole batch in the worker's transaction.
// It is a worker.PipelinedProjector once Prepare has checked it against
// PostgreSQL, and with a `-- key:` line a worker.Checker, a
// worker.Unprojector (replay --rebuild: its `-- unproject:` statements,
// then the key rows' delete) and a worker.Recomputer (verify --repair: its
// `-- recompute:` statements). It keeps no state between batches: one
// value serves any number of workers.
type File struct {
	// Name is the file's name, as errors name it.
	Name string
	// Key is where the file keeps the event id (its `-- key:` line); nil
	// when it has none, and then the read model cannot be checked.
	Key *Key

	stmts []*statement
	// keyed are the event types the file keeps a key row for; nil: every
	// type (Checks).
	keyed    []string
	prepared atomic.Pointer[preparedFile]
	mu       sync.Mutex // held by Prepare
}

// preparedFile is a File's statements as they run, by kind, in file order.
type preparedFile struct {
	project, unproject, recompute []*prepared
}

// Key names the table and column holding the event id of every original
// a projection wrote.
type Key struct {
	// Table is the table, possibly schema-qualified ("schema.table").
	Table string
	// Column is the column that holds the event id.
	Column string
	// Types are the event types whose originals get a key row, as the
	// key line names them (`-- key: TABLE.COLUMN types A, B`); nil when it
	// names none, and then they are the types of the statements that
	// insert into Table (File.Checks).
	Types []string
}

// String returns TABLE.COLUMN.
func (k Key) String() string { return k.Table + "." + k.Column }

// prepared is a statement as it runs: its SQL with the parameters' types
// PostgreSQL inferred, once per event (perEvent) or, when its parameters
// all sit in one single-row VALUES list, once per batch over the batch's
// rows (perBatch, "" otherwise).
type prepared struct {
	stmt     *statement
	sqlTypes []string
	jsonish  []bool
	// arrays is each parameter's column in the batch form: a text array,
	// or for :occurredAt and :createdAt bound to timestamptz a timestamptz
	// array of the times themselves (no text to format and parse per row).
	arrays   []arrayKind
	perEvent string
	perBatch string
}

// arrayKind is how the batch form sends a parameter's values.
type arrayKind int

const (
	// textArray: text[], NULL where the value is missing (payload paths).
	textArray arrayKind = iota
	// originArray: text[] of a value every original has.
	originArray
	// timeArray: timestamptz[] of :occurredAt or :createdAt.
	timeArray
)

// arrayType is k's SQL array type in the batch form.
func (k arrayKind) arrayType() string {
	if k == timeArray {
		return "timestamptz[]"
	}
	return "text[]"
}

// kindOf is how the batch form sends a parameter whose type PostgreSQL
// inferred as sqlType.
func kindOf(pr param, sqlType string) arrayKind {
	switch {
	case (pr.name == "occurredAt" || pr.name == "createdAt") && sqlType == "timestamp with time zone":
		return timeArray
	case pr.path == nil:
		return originArray
	default:
		return textArray
	}
}

// StatementError is a statement of a file that PostgreSQL (or the file's
// parser) refused: the file, the line and the message.
type StatementError struct {
	File string
	Line int
	// Message is PostgreSQL's message (with its SQLSTATE), or the parser's.
	Message string
	Err     error
}

// Error returns "FILE:LINE: MESSAGE".
func (e *StatementError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Message) }

// Unwrap returns the PostgreSQL error, if any.
func (e *StatementError) Unwrap() error { return e.Err }

// ErrNotPrepared is returned by Project when Prepare has not run.
var ErrNotPrepared = errors.New("projection not prepared (call Prepare first)")

// Load reads and parses the projection file at path. Prepare must then
// check it against PostgreSQL before the worker runs it.
func Load(path string) (*File, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading the projection file: %w", err)
	}
	return Parse(path, string(src))
}

// Parse parses src, the text of the projection file name.
func Parse(name, src string) (*File, error) {
	stmts, key, err := parse(src)
	if err != nil {
		var le *lineError
		if errors.As(err, &le) {
			return nil, &StatementError{File: name, Line: le.line, Message: le.msg}
		}
		return nil, err
	}
	return &File{Name: name, Key: key, stmts: stmts, keyed: keyedTypes(stmts, key)}, nil
}

// insertInto matches the table an INSERT writes.
var insertInto = regexp.MustCompile(`(?i)\binsert\s+into\s+((?:"[^"]+"|[a-z_][a-z0-9_$]*)(?:\s*\.\s*(?:"[^"]+"|[a-z_][a-z0-9_$]*))*)`)

// keyedTypes returns the event types whose originals get a key row: the
// key line's types, else the union of the -- types: of the projecting
// statements that insert into the key table; nil (every type) when one of
// those is unrestricted, when none is found, or without a key.
func keyedTypes(stmts []*statement, key *Key) []string {
	if key == nil {
		return nil
	}
	if len(key.Types) > 0 {
		return key.Types
	}
	var types []string
	for _, s := range stmts {
		if s.kind != kindProject || !insertsInto(s, key.Table) {
			continue
		}
		if len(s.types) == 0 {
			return nil
		}
		for _, t := range s.types {
			if !slices.Contains(types, t) {
				types = append(types, t)
			}
		}
	}
	return types
}

// insertsInto reports whether s has an INSERT INTO table (compared
// without quotes and case; an unqualified name on either side matches
// any schema).
func insertsInto(s *statement, table string) bool {
	want := strings.ToLower(table)
	_, wantName, _ := strings.Cut(want, ".")
	if wantName == "" {
		wantName = want
	}
	for _, m := range insertInto.FindAllStringSubmatch(s.sql(func(int) string { return "$1" }), -1) {
		got := strings.ToLower(strings.NewReplacer(`"`, "", " ", "", "\t", "", "\n", "", "\r", "").Replace(m[1]))
		gotName := got[strings.LastIndexByte(got, '.')+1:]
		if got == want || gotName == wantName && (!strings.Contains(got, ".") || !strings.Contains(want, ".")) {
			return true
		}
	}
	return false
}

// Checks reports whether the file keeps a key row for the originals of
// eventType (worker.TypeChecker): those the key line's `types` name, else
// those of the -- types: of its statements that insert into the key
// table; every type when one of them has no -- types: line, or none is
// found. Verify and the audit check only those originals: one of another
// type (which an UPDATE only touches, or no statement runs for) has no
// key row by design.
func (f *File) Checks(eventType string) bool {
	return f.keyed == nil || slices.Contains(f.keyed, cmp.Or(eventType, outbox.TypeDefault))
}

//go:embed demo.sql
var demoSQL string

// DemoSQL is the text of the demo read model as a projection file: the
// tables events and device_daily_stats of the migrations, the statistics
// grown only from the rows inserted.
func DemoSQL() string { return demoSQL }

// Demo returns the demo read model as a projection file (not prepared).
func Demo() *File {
	f, err := Parse("demo.sql", demoSQL)
	if err != nil { // the embedded file is tested
		panic(err)
	}
	return f
}

// Prepare checks every statement against PostgreSQL (inside a
// transaction it rolls back: nothing is written), learns the type
// PostgreSQL infers for each parameter, and makes f ready to project. A
// statement PostgreSQL refuses yields a *StatementError naming the file, the
// line and PostgreSQL's message. Prepare must return before the first
// Project (the worker calls it in Start: worker.Preparer); once it
// succeeded, it does nothing.
func (f *File) Prepare(ctx context.Context, pool *pgxpool.Pool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.prepared.Load() != nil {
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("error preparing the projection %s: %w", f.Name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	conn := tx.Conn().PgConn()
	out := &preparedFile{}
	for _, s := range f.stmts {
		if s.kind == kindUnproject {
			sql := s.sql(func(int) string { return "($1::text[])" })
			if _, err := conn.Prepare(ctx, "", sql, nil); err != nil {
				return f.statementError(s, sql, err)
			}
			out.unproject = append(out.unproject, &prepared{stmt: s, perEvent: sql})
			continue
		}
		p, err := f.prepare(ctx, tx, conn, s)
		if err != nil {
			return err
		}
		if s.kind == kindRecompute {
			out.recompute = append(out.recompute, p)
		} else {
			out.project = append(out.project, p)
		}
	}
	if f.Key != nil {
		for _, sql := range []string{f.projectedSQL(), f.keyLockSQL(), f.keyDeleteSQL()} {
			if _, err := conn.Prepare(ctx, "", sql, nil); err != nil {
				return f.pgError(err, "-- key: "+f.Key.String())
			}
		}
	}
	f.prepared.Store(out)
	return nil
}

// prepare checks one statement and builds its forms.
func (f *File) prepare(ctx context.Context, tx pgx.Tx, conn *pgconn.PgConn, s *statement) (*prepared, error) {
	probe := s.sql(func(i int) string { return "$" + strconv.Itoa(i+1) })
	desc, err := conn.Prepare(ctx, "", probe, nil)
	if err != nil {
		return nil, f.statementError(s, probe, err)
	}
	p := &prepared{stmt: s}
	for i, oid := range desc.ParamOIDs {
		var name string
		if err := tx.QueryRow(ctx, "SELECT format_type($1::oid, NULL)", oid).Scan(&name); err != nil {
			return nil, fmt.Errorf("error reading the type of :%s: %w", s.params[i].name, err)
		}
		p.sqlTypes = append(p.sqlTypes, name)
		p.jsonish = append(p.jsonish, name == "json" || name == "jsonb")
		p.arrays = append(p.arrays, kindOf(s.params[i], name))
	}
	p.perEvent = s.sql(func(i int) string { return fmt.Sprintf("($%d::text::%s)", i+1, p.sqlTypes[i]) })
	if _, err := conn.Prepare(ctx, "", p.perEvent, nil); err != nil {
		return nil, f.statementError(s, p.perEvent, err)
	}
	if batch, ok := s.batchSQL(p.sqlTypes, p.arrays); ok {
		// A statement that PostgreSQL refuses in its batch form (DEFAULT
		// in the VALUES list, say) runs once per event.
		if _, err := conn.Prepare(ctx, "", batch, nil); err == nil {
			p.perBatch = batch
		}
	}
	return p, nil
}

// statementError turns PostgreSQL's refusal of s (whose SQL was sql) into a
// StatementError at the line of the error's position.
func (f *File) statementError(s *statement, sql string, err error) error {
	line := s.line
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Position > 0 {
		// sql has the statement's lines (a parameter's replacement has
		// no newline); the position counts characters from 1.
		n := 0
		for _, r := range sql {
			if n == int(pgErr.Position)-1 {
				break
			}
			if r == '\n' {
				line++
			}
			n++
		}
		line -= leadingLines(sql)
	}
	return f.pgErrorAt(err, line)
}

// leadingLines counts the newlines before a statement's first non-blank
// text (s.line is the line of that text).
func leadingLines(sql string) int {
	trimmed := strings.TrimLeftFunc(sql, func(r rune) bool { return r == ' ' || r == '\t' || r == '\r' || r == '\n' })
	return strings.Count(sql[:len(sql)-len(trimmed)], "\n")
}

func (f *File) pgError(err error, what string) error {
	return &StatementError{File: f.Name, Line: 0, Message: what + ": " + pgMessage(err), Err: err}
}

func (f *File) pgErrorAt(err error, line int) error {
	return &StatementError{File: f.Name, Line: line, Message: pgMessage(err), Err: err}
}

func pgMessage(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	return err.Error()
}

// sql returns the statement's text with each parameter reference replaced
// by ref(its index).
func (s *statement) sql(ref func(int) string) string {
	var b strings.Builder
	for i, part := range s.parts {
		b.WriteString(part)
		if i < len(s.refs) {
			b.WriteString(ref(s.refs[i]))
		}
	}
	return b.String()
}

// batchSQL returns the statement with its VALUES list turned into a SELECT
// over the batch's rows (unnest of one array per parameter, of the type
// arrays gives, in event id order), and reports whether it has such a list.
func (s *statement) batchSQL(sqlTypes []string, arrays []arrayKind) (string, bool) {
	if s.values < 0 {
		return "", false
	}
	var b strings.Builder
	open, closing := -1, -1
	for i, part := range s.parts {
		if i == s.values {
			open = b.Len() + s.valuesOpen
		}
		if i == s.valuesPart {
			closing = b.Len() + s.valuesClose
		}
		b.WriteString(part)
		if i < len(s.refs) {
			fmt.Fprintf(&b, "(_e.p%d::%s)", s.refs[i]+1, sqlTypes[s.refs[i]])
		}
	}
	text := b.String()
	head := strings.TrimRight(text[:open], " \t\r\n")
	if len(head) < len("values") || !strings.EqualFold(head[len(head)-len("values"):], "values") {
		return "", false
	}
	head = head[:len(head)-len("values")]
	cols := []string{"event_id"}
	unnest := []string{"$1::text[]"}
	for i := range s.params {
		cols = append(cols, fmt.Sprintf("p%d", i+1))
		unnest = append(unnest, fmt.Sprintf("$%d::%s", i+2, arrays[i].arrayType()))
	}
	return fmt.Sprintf("%sSELECT %s FROM unnest(%s) AS _e(%s) ORDER BY _e.event_id%s",
		head, text[open+1:closing], strings.Join(unnest, ", "), strings.Join(cols, ", "), text[closing+1:]), true
}

// Project runs the file's statements for events in tx, as one pipeline.
func (f *File) Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
	b := &pgx.Batch{}
	if err := f.QueueProject(b, events); err != nil {
		return err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("error projecting %d events with %s: %w", len(events), f.Name, err)
	}
	return nil
}

// QueueProject queues the file's statements for events on b
// (worker.PipelinedProjector): a statement in its batch form once, with one
// array of values per parameter, else once per event; statement by
// statement, events in event id order.
func (f *File) QueueProject(b *pgx.Batch, events []*outbox.Event) error {
	pf := f.prepared.Load()
	if pf == nil {
		return ErrNotPrepared
	}
	_, err := queue(b, pf.project, events)
	return err
}

// Recompute runs the file's `-- recompute:` statements for events in tx,
// as one pipeline, bound from each original as the projecting statements
// are (worker.Recomputer): verify --repair runs them for the originals it
// is about to re-publish, so that what the file derives from their rows
// (counters) is set to what the rows left say and each is counted once
// when projected again. It returns how many of events a statement ran
// for: 0 when the file declares none.
func (f *File) Recompute(ctx context.Context, tx pgx.Tx, events []*outbox.Event) (int, error) {
	pf := f.prepared.Load()
	if pf == nil {
		return 0, ErrNotPrepared
	}
	b := &pgx.Batch{}
	n, err := queue(b, pf.recompute, events)
	if err != nil || n == 0 {
		return 0, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("error recomputing the derived rows of %d originals with %s: %w", n, f.Name, err)
	}
	return n, nil
}

// queue queues stmts for events on b (see QueueProject) and returns how
// many distinct events a statement was queued for.
func queue(b *pgx.Batch, stmts []*prepared, events []*outbox.Event) (int, error) {
	sorted := slices.Clone(events)
	slices.SortFunc(sorted, func(a, b *outbox.Event) int { return strings.Compare(a.ID, b.ID) })
	sorted = slices.CompactFunc(sorted, func(a, b *outbox.Event) bool { return a.ID == b.ID })
	docs := make([]*document, len(sorted))
	for i, ev := range sorted {
		docs[i] = &document{ev: ev}
	}
	for _, p := range stmts {
		var mine []*document
		for _, d := range docs {
			if len(p.stmt.types) == 0 || slices.Contains(p.stmt.types, d.ev.Type) {
				mine = append(mine, d)
				d.queued = true
			}
		}
		if len(mine) == 0 {
			continue
		}
		if p.perBatch != "" {
			args := make([]any, 1+len(p.stmt.params))
			ids := make([]string, len(mine))
			for i, d := range mine {
				ids[i] = d.ev.ID
			}
			args[0] = ids
			for k, pr := range p.stmt.params {
				col, err := column(mine, pr, p.jsonish[k], p.arrays[k])
				if err != nil {
					return 0, err
				}
				args[k+1] = col
			}
			b.Queue(p.perBatch, args...)
			continue
		}
		for _, d := range mine {
			args := make([]any, len(p.stmt.params))
			for k, pr := range p.stmt.params {
				v, err := d.value(pr, p.jsonish[k])
				if err != nil {
					return 0, err
				}
				args[k] = v
			}
			b.Queue(p.perEvent, args...)
		}
	}
	n := 0
	for _, d := range docs {
		if d.queued {
			n++
		}
	}
	return n, nil
}

// column returns the batch form's array of pr's values for docs, of the
// kind given: the times themselves, the texts of values every original
// has, or texts with nil for a missing payload path.
func column(docs []*document, pr param, jsonish bool, kind arrayKind) (any, error) {
	switch kind {
	case timeArray:
		col := make([]time.Time, len(docs))
		for i, d := range docs {
			if pr.name == "occurredAt" {
				col[i] = d.ev.OccurredAt
			} else {
				col[i] = d.ev.CreatedAt
			}
		}
		return col, nil
	case originArray:
		col := make([]string, len(docs))
		for i, d := range docs {
			v, err := d.value(pr, jsonish)
			if err != nil {
				return nil, err
			}
			col[i] = *v
		}
		return col, nil
	default:
		col := make([]*string, len(docs))
		for i, d := range docs {
			v, err := d.value(pr, jsonish)
			if err != nil {
				return nil, err
			}
			col[i] = v
		}
		return col, nil
	}
}

// document is an original being bound: its payload decoded once, on
// first use.
type document struct {
	ev      *outbox.Event
	payload map[string]json.RawMessage
	decoded bool
	err     error
	// queued is set once a statement is queued for it.
	queued bool
}

// value returns the text a parameter binds for the original (nil: NULL):
// JSON as it is for a json or jsonb parameter, else a string's text, a
// number's or a boolean's literal, an object's or array's JSON.
func (d *document) value(p param, jsonish bool) (*string, error) {
	var s string
	switch p.name {
	case "eventId":
		s = d.ev.ID
	case "idempotencyKey":
		s = d.ev.IdempotencyKey
	case "sourceKey":
		s = d.ev.SourceKey
	case "deviceKey":
		s = d.ev.DeviceKey
	case "type":
		s = d.ev.Type
	case "occurredAt":
		s = d.ev.OccurredAt.UTC().Format(time.RFC3339Nano)
	case "createdAt":
		s = d.ev.CreatedAt.UTC().Format(time.RFC3339Nano)
	case "payload":
		s = string(d.ev.Payload)
		if s == "" {
			s = "{}"
		}
	default:
		raw, err := d.field(p.path)
		if err != nil || raw == nil {
			return nil, err
		}
		return jsonText(raw, jsonish)
	}
	return &s, nil
}

// field returns the raw JSON at path in the payload, nil when it is
// missing (or a step is not an object).
func (d *document) field(path []string) (json.RawMessage, error) {
	if !d.decoded {
		d.decoded = true
		if len(d.ev.Payload) > 0 {
			if err := json.Unmarshal(d.ev.Payload, &d.payload); err != nil {
				d.err = fmt.Errorf("error reading the payload of %s: %w", d.ev.ID, err)
			}
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	obj := d.payload
	for i, key := range path {
		raw, ok := obj[key]
		if !ok {
			return nil, nil
		}
		if i == len(path)-1 {
			return raw, nil
		}
		obj = nil
		if len(raw) > 0 && raw[0] == '{' {
			if err := json.Unmarshal(raw, &obj); err != nil {
				return nil, fmt.Errorf("error reading the payload of %s: %w", d.ev.ID, err)
			}
		}
	}
	return nil, nil
}

// jsonText returns what raw binds as (nil for JSON null).
func jsonText(raw json.RawMessage, jsonish bool) (*string, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if string(raw) == "null" {
		return nil, nil
	}
	s := string(raw)
	if !jsonish && len(raw) > 0 && raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("error reading a payload string: %w", err)
		}
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("a payload string is not UTF-8")
		}
	}
	return &s, nil
}

// projectedSQL selects those of the ids $1 that have a key row.
func (f *File) projectedSQL() string {
	return fmt.Sprintf("SELECT %s::text FROM %s WHERE %[1]s::text = ANY($1::text[])", f.keyColumn(), f.keyTable())
}

// keyLockSQL selects, and locks in key order, those of the ids $1 that
// have a key row: the originals replay --rebuild removes.
func (f *File) keyLockSQL() string {
	return f.projectedSQL() + fmt.Sprintf(" ORDER BY %s FOR UPDATE", f.keyColumn())
}

// keyDeleteSQL deletes the key rows of the ids $1.
func (f *File) keyDeleteSQL() string {
	return fmt.Sprintf("DELETE FROM %s WHERE %s::text = ANY($1::text[])", f.keyTable(), f.keyColumn())
}

func (f *File) keyColumn() string { return pgx.Identifier{f.Key.Column}.Sanitize() }

func (f *File) keyTable() string {
	return pgx.Identifier(strings.Split(f.Key.Table, ".")).Sanitize()
}

// ErrNoKey is returned by Projected when the file has no `-- key:` line.
var ErrNoKey = errors.New("the projection file has no -- key: line")

// Projected returns those of ids that have a row in the key table
// (worker.Checker).
func (f *File) Projected(ctx context.Context, tx pgx.Tx, ids []string) (map[string]bool, error) {
	if f.Key == nil {
		return nil, ErrNoKey
	}
	rows, err := tx.Query(ctx, f.projectedSQL(), ids)
	if err != nil {
		return nil, fmt.Errorf("error reading %s: %w", f.Key, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error reading %s: %w", f.Key, err)
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// Unproject removes the rows of those of ids that have a key row, in tx,
// for replay --rebuild (worker.Unprojector): it locks their key rows (in
// key order), runs the file's `-- unproject:` statements with :eventIds
// bound to their ids (the key rows still there, so a statement can take
// their share out of what the file derives from them), then deletes their
// key rows. It returns how many originals had a key row. An original
// projected meanwhile by a worker is not among them, and keeps its rows.
func (f *File) Unproject(ctx context.Context, tx pgx.Tx, ids []string) (int64, error) {
	if f.Key == nil {
		return 0, ErrNoKey
	}
	pf := f.prepared.Load()
	if pf == nil {
		return 0, ErrNotPrepared
	}
	rows, err := tx.Query(ctx, f.keyLockSQL(), ids)
	if err != nil {
		return 0, fmt.Errorf("error locking the rows of %d originals in %s: %w", len(ids), f.Key, err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(held) == 0 {
		if err != nil {
			err = fmt.Errorf("error locking the rows of %d originals in %s: %w", len(ids), f.Key, err)
		}
		return 0, err
	}
	b := &pgx.Batch{}
	for _, p := range pf.unproject {
		b.Queue(p.perEvent, held)
	}
	b.Queue(f.keyDeleteSQL(), held)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("error removing the rows of %d originals with %s: %w", len(held), f.Name, err)
	}
	return int64(len(held)), nil
}
