package projection

import (
	"strconv"
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
			{"INSERT INTO t VALUES (:eventId), (:type)", ""},                                // two rows
			{"INSERT INTO t VALUES (:eventId) ON CONFLICT (a) DO UPDATE SET b = :type", ""}, // a parameter outside
			{"UPDATE t SET a = 1 WHERE b = :eventId", ""},
		} {
			stmts, _, err := parse(tc.src)
			require.NoError(t, err)
			got, _ := stmts[0].batchSQL([]string{"text", "text"})
			require.Equal(t, tc.want, got, tc.src)
		}
	})
	t.Run("DemoRunsPerBatch", func(t *testing.T) {
		stmts, key, err := parse(demoSQL)
		require.NoError(t, err)
		require.Equal(t, &Key{Table: "events", Column: "event_id"}, key)
		require.Len(t, stmts, 1)
		_, ok := stmts[0].batchSQL(make([]string, len(stmts[0].params)))
		require.True(t, ok)
	})
	t.Run("Errors", func(t *testing.T) {
		for src, want := range map[string]string{
			"SELECT 1;\nSELECT :nope":            "line 2: unknown parameter :nope",
			"SELECT 1;\n-- types: a\n":           "line 3: a -- types: line with no statement after it",
			"-- key: a\n":                        "line 1: -- key: wants TABLE.COLUMN",
			"-- key: a.b\n-- key: a.c\nSELECT 1": "line 2: a second -- key: line",
			"SELECT 'x":                          "line 1: an unterminated ' quote",
			"-- nothing":                         "line 1: no statement",
		} {
			_, _, err := parse(src)
			require.ErrorContains(t, err, want, src)
		}
	})
}
