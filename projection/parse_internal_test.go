package projection

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	probe := func(s *statement) string { return s.sql(func(i int) string { return "$" + strconv.Itoa(i+1) }) }
	t.Run("ParamsCastsStringsAndComments", func(t *testing.T) {
		stmts, key, err := parse("-- key: app.orders.id\n" +
			"SELECT :eventId::text, ':notParam', \"a:b\", $q$ :nope $q$, E'\\' :no', x[1:2], :payload.a.b, :eventId /* :c */\n" +
			";\n\n-- just a comment; with a semicolon\n;")
		require.NoError(t, err)
		require.Equal(t, &Key{Table: "app.orders", Column: "id"}, key)
		require.Len(t, stmts, 1)
		require.Equal(t, 2, stmts[0].line)
		require.Equal(t, "\nSELECT $1::text, ':notParam', \"a:b\", $q$ :nope $q$, E'\\' :no', x[1:2], $2, $1 /* :c */\n", probe(stmts[0]))
		require.Equal(t, []param{{name: "eventId"}, {name: "payload.a.b", path: []string{"a", "b"}}}, stmts[0].params)
	})
	t.Run("BatchForm", func(t *testing.T) {
		for _, tc := range []struct{ src, want string }{
			{"INSERT INTO t (a, b) VALUES (:eventId, lower(:type)) ON CONFLICT DO NOTHING",
				"INSERT INTO t (a, b) SELECT (_e.p1::text), lower((_e.p2::text)) FROM unnest($1::text[], $2::text[], $3::text[]) AS _e(event_id, p1, p2) ORDER BY _e.event_id ON CONFLICT DO NOTHING"},
			// the times go as timestamptz where PostgreSQL takes them so
			{"INSERT INTO t (a, b) VALUES (:occurredAt, :createdAt)",
				"INSERT INTO t (a, b) SELECT (_e.p1::timestamp with time zone), (_e.p2::text) FROM unnest($1::text[], $2::timestamptz[], $3::text[]) AS _e(event_id, p1, p2) ORDER BY _e.event_id"},
			{"INSERT INTO t VALUES (:eventId), (:type)", ""},                                // two rows
			{"INSERT INTO t VALUES (:eventId) ON CONFLICT (a) DO UPDATE SET b = :type", ""}, // a parameter outside
			{"UPDATE t SET a = 1 WHERE b = :eventId", ""},
		} {
			stmts, _, err := parse(tc.src)
			require.NoError(t, err)
			sqlTypes := []string{"text", "text"}
			if strings.Contains(tc.src, ":occurredAt") {
				sqlTypes[0] = "timestamp with time zone"
			}
			got, _ := stmts[0].batchSQL(sqlTypes, kinds(stmts[0], sqlTypes))
			require.Equal(t, tc.want, got, tc.src)
		}
	})
	t.Run("DemoRunsPerBatch", func(t *testing.T) {
		stmts, key, err := parse(demoSQL)
		require.NoError(t, err)
		require.Equal(t, &Key{Table: "events", Column: "event_id"}, key)
		require.Len(t, stmts, 1)
		_, ok := stmts[0].batchSQL(make([]string, len(stmts[0].params)), make([]arrayKind, len(stmts[0].params)))
		require.True(t, ok)
	})
	t.Run("Kinds", func(t *testing.T) {
		stmts, _, err := parse("-- key: t.id\nINSERT INTO t VALUES (:eventId);\n" +
			"-- unproject:\nDELETE FROM u WHERE id = ANY(:eventIds) AND id <> ALL(:eventIds);\n" +
			"-- types: a\n-- recompute:\nINSERT INTO v VALUES (:deviceKey);\n-- recompute:\n-- types: b\nUPDATE v SET n = 0 WHERE d = :deviceKey")
		require.NoError(t, err)
		require.Len(t, stmts, 4)
		require.Equal(t, []kind{kindProject, kindUnproject, kindRecompute, kindRecompute},
			[]kind{stmts[0].kind, stmts[1].kind, stmts[2].kind, stmts[3].kind})
		require.Equal(t, []param{{name: "eventIds"}}, stmts[1].params, "one parameter, used twice")
		require.Equal(t, []string{"a"}, stmts[2].types)
		require.Equal(t, []string{"b"}, stmts[3].types)
		require.Equal(t, 4, stmts[1].line, "the line after its directive")
		_, batch := stmts[2].batchSQL([]string{"text"}, []arrayKind{textArray})
		require.True(t, batch, "a recompute statement has a batch form too")
	})
	t.Run("KeyedTypes", func(t *testing.T) {
		for _, tc := range []struct {
			src  string
			want []string // nil: every type
		}{
			{"-- key: orders.event_id\n-- types: a, b\nINSERT INTO orders VALUES (:eventId);\n-- types: c\nUPDATE orders SET x = 1 WHERE event_id = :payload.id", []string{"a", "b"}},
			{"-- key: app.orders.event_id\n-- types: a\nWITH i AS (INSERT INTO \"app\" . \"orders\" VALUES (:eventId) RETURNING 1) SELECT 1;\n-- types: b\ninsert into ORDERS values (:eventId)", []string{"a", "b"}},
			{"-- key: orders.event_id\n-- types: a\nINSERT INTO orders VALUES (:eventId);\nINSERT INTO orders VALUES (:eventId)", nil},
			{"-- key: orders.event_id\n-- types: a\nINSERT INTO other VALUES (:eventId)", nil},
			{"-- key: orders.event_id types x, y\n-- types: a\nINSERT INTO orders VALUES (:eventId)", []string{"x", "y"}},
			{"-- types: a\nINSERT INTO orders VALUES (:eventId)", nil},
		} {
			f, err := Parse("f.sql", tc.src)
			require.NoError(t, err, tc.src)
			require.Equal(t, tc.want, f.keyed, tc.src)
			require.Equal(t, tc.want == nil, f.Checks("zzz"), tc.src)
		}
	})
	t.Run("PerEvent", func(t *testing.T) {
		stmts, _, err := parse("-- types: a\n-- per-event:\nINSERT INTO t VALUES (:eventId) ON CONFLICT (a) DO UPDATE SET b = EXCLUDED.b;\nINSERT INTO t VALUES (:eventId)")
		require.NoError(t, err)
		_, batch := stmts[0].batchSQL([]string{"text"}, []arrayKind{textArray})
		require.False(t, batch, "-- per-event: keeps the statement out of its batch form")
		require.Equal(t, []string{"a"}, stmts[0].types)
		_, batch = stmts[1].batchSQL([]string{"text"}, []arrayKind{textArray})
		require.True(t, batch, "only the next statement")
	})
	t.Run("Errors", func(t *testing.T) {
		for src, want := range map[string]string{
			"-- key: t.id kinds a\nSELECT 1":     "line 1: -- key: wants TABLE.COLUMN, optionally followed by types A, B",
			"-- key: t.id types ,\nSELECT 1":     "line 1: -- key: t.id types names no type",
			"SELECT :eventId;\n-- per-event:\n":  "line 2: a -- per-event: line with no statement after it",
			"-- per-event: yes\nSELECT :eventId": "line 1: -- per-event: takes nothing after the colon",
			"SELECT 1;\nSELECT :nope":            "line 2: unknown parameter :nope",
			"SELECT 1;\n-- types: a\n":           "line 3: a -- types: line with no statement after it",
			"-- key: a\n":                        "line 1: -- key: wants TABLE.COLUMN",
			"-- key: a.b\n-- key: a.c\nSELECT 1": "line 2: a second -- key: line",
			"SELECT 'x":                          "line 1: an unterminated ' quote",
			"-- nothing":                         "line 1: no statement",
			"-- key: t.id\n-- unproject:\nDELETE FROM u WHERE id = ANY(:eventIds)":             "line 1: no statement that projects",
			"SELECT :eventId;\n-- unproject:\nDELETE FROM u WHERE id = ANY(:eventIds)":         "line 3: a -- unproject: statement needs the file's -- key:",
			"-- key: t.id\nSELECT :eventId;\n-- unproject:\nDELETE FROM u WHERE id = :eventId": "line 4: an -- unproject: statement takes only :eventIds",
			"-- key: t.id\nSELECT :eventId;\n-- unproject:\nDELETE FROM u":                     "line 4: an -- unproject: statement must use :eventIds",
			"-- key: t.id\nSELECT :eventIds":                                                   "line 2: :eventIds is the parameter of -- unproject: statements only",
			"-- key: t.id\nSELECT :eventId;\n-- types: a\n-- unproject:\nSELECT :eventIds":     "line 4: an -- unproject: statement runs for every original removed",
			"-- key: t.id\nSELECT :eventId;\n-- recompute:\n-- unproject:\nSELECT :eventIds":   "line 4: two directives for one statement (-- recompute:, then -- unproject:)",
			"-- key: t.id\nSELECT :eventId;\n-- recompute: now\nSELECT :eventId":               "line 3: -- recompute: takes nothing after the colon",
			"-- key: t.id\nSELECT :eventId\n-- recompute:\n, 1":                                "line 3: a -- recompute: line inside a statement",
			"-- key: t.id\nSELECT :eventId;\n-- recompute:\n":                                  "line 3: a -- recompute: line with no statement after it",
		} {
			_, _, err := parse(src)
			require.ErrorContains(t, err, want, src)
		}
	})
}

// kinds is how the batch form sends s's parameters of the given types.
func kinds(s *statement, sqlTypes []string) []arrayKind {
	out := make([]arrayKind, len(s.params))
	for i, pr := range s.params {
		out[i] = kindOf(pr, sqlTypes[i])
	}
	return out
}
