package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// dashboardPath is the Grafana dashboard docs/operations.md points to.
const dashboardPath = "grafana/outboxd.json"

// dashboard is what the checks read of a Grafana dashboard.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasource              `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// checkDashboard holds a dashboard to the rules its panels share: unique
// ids and titles; panels in the 24 columns of the grid, none over
// another, in reading order (by row, then column), each under a row; every
// chart on the ${datasource} variable with at least one query, each with
// its own refId, a non-empty expression whose brackets and quotes balance,
// and the stream variable on every outboxd_ selector that has labels
// (but those of the families without a stream label, streamless).
// (Which metrics the queries name is runner's TestMetricsOfEveryRole: each
// must be exported, and each family of outboxd's has a panel.)
func checkDashboard(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		return fmt.Errorf("not a dashboard: %w", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		return errors.New("a dashboard needs a title, a uid and panels")
	}
	ids, titles := map[int]bool{}, map[string]bool{}
	var errs []error
	bad := func(p panel, format string, args ...any) {
		errs = append(errs, fmt.Errorf("panel %d %q: %s", p.ID, p.Title, fmt.Sprintf(format, args...)))
	}
	for i, p := range d.Panels {
		if ids[p.ID] {
			bad(p, "its id is taken")
		}
		if titles[p.Title] {
			bad(p, "its title is taken")
		}
		ids[p.ID], titles[p.Title] = true, true
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			bad(p, "gridPos %+v is outside the grid's 24 columns", g)
		}
		if i == 0 && p.Type != "row" {
			bad(p, "the first panel is a row")
		}
		if i > 0 {
			q := d.Panels[i-1].GridPos
			if g.Y < q.Y || (g.Y == q.Y && g.X < q.X) {
				bad(p, "is out of reading order: at %d,%d after a panel at %d,%d", g.X, g.Y, q.X, q.Y)
			}
		}
		for _, o := range d.Panels[:i] {
			h := o.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				bad(p, "overlaps panel %d %q", o.ID, o.Title)
			}
		}
		if p.Type == "row" {
			if len(p.Targets) > 0 || g.W != 24 || g.H != 1 {
				bad(p, "a row spans the 24 columns, one high, with no query")
			}
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			bad(p, "its datasource is not ${datasource}")
		}
		if len(p.Targets) == 0 {
			bad(p, "has no query")
		}
		refs := map[string]bool{}
		for _, t := range p.Targets {
			if refs[t.RefID] || t.RefID == "" {
				bad(p, "refId %q is empty or taken", t.RefID)
			}
			refs[t.RefID] = true
			if t.Datasource == nil || t.Datasource.UID != "${datasource}" {
				bad(p, "query %s: its datasource is not ${datasource}", t.RefID)
			}
			if err := checkExpr(t.Expr); err != nil {
				bad(p, "query %s: %v", t.RefID, err)
			}
		}
	}
	return errors.Join(errs...)
}

// checkExpr checks what can be checked of a PromQL expression without
// Prometheus: not empty, brackets and quotes balanced, and every
// outboxd_ selector with labels scoped to the dashboard's stream.
func checkExpr(expr string) error {
	if strings.TrimSpace(expr) == "" {
		return errors.New("empty expression")
	}
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	quoted := false
	for _, r := range expr {
		switch {
		case r == '"':
			quoted = !quoted
		case quoted:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q in %s", r, expr)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if quoted || len(stack) > 0 {
		return fmt.Errorf("unclosed quote or bracket in %s", expr)
	}
	for rest := expr; ; {
		i := strings.Index(rest, "outboxd_")
		if i < 0 {
			return nil
		}
		rest = rest[i:]
		end := strings.IndexFunc(rest, func(r rune) bool { return !strings.ContainsRune(metricChars, r) })
		if end < 0 {
			return nil
		}
		if rest[end] == '{' && !strings.HasPrefix(rest[end:], `{stream="$stream"`) && !streamless(rest[:end]) {
			return fmt.Errorf("%s: a selector with labels names stream=\"$stream\" first", rest[:end])
		}
		rest = rest[end:]
	}
}

// metricChars are the characters of outboxd's metric names.
const metricChars = "abcdefghijklmnopqrstuvwxyz0123456789_:"

// streamless reports whether the metric family name has no stream
// label: the HTTP server's and the dead-letter webhook's are the
// process's, not a stream's.
func streamless(name string) bool {
	return strings.HasPrefix(name, "outboxd_http_") || strings.HasPrefix(name, "outboxd_dlq_hook_")
}

// TestGrafanaDashboard checks deploy/grafana/outboxd.json, and that each
// check fails on a dashboard broken for it.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkDashboard(raw); err != nil {
		t.Fatalf("%s:\n%v", dashboardPath, err)
	}

	// panels returns a fresh copy of the dashboard's panels to break.
	panels := func() (map[string]any, []any) {
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		return d, d["panels"].([]any)
	}
	chart := func(ps []any, i int) map[string]any { return ps[i].(map[string]any) }
	query := func(ps []any, i int) map[string]any {
		return chart(ps, i)["targets"].([]any)[0].(map[string]any)
	}
	for _, tc := range []struct {
		name  string
		spoil func(ps []any)
		says  string
	}{
		{"IDTaken", func(ps []any) { chart(ps, 3)["id"] = chart(ps, 2)["id"] }, "its id is taken"},
		{"TitleTaken", func(ps []any) { chart(ps, 3)["title"] = chart(ps, 2)["title"] }, "its title is taken"},
		{"OutsideTheGrid", func(ps []any) { chart(ps, 2)["gridPos"].(map[string]any)["w"] = 30 }, "outside the grid"},
		{"Overlap", func(ps []any) {
			chart(ps, 3)["gridPos"].(map[string]any)["x"] = chart(ps, 2)["gridPos"].(map[string]any)["x"]
		}, "overlaps panel"},
		{"OutOfOrder", func(ps []any) { ps[2], ps[3] = ps[3], ps[2] }, "out of reading order"},
		{"NoRowFirst", func(ps []any) { ps[0], ps[1] = ps[1], ps[0] }, "the first panel is a row"},
		{"OtherDatasource", func(ps []any) { chart(ps, 2)["datasource"] = map[string]any{"uid": "prom-1"} }, "its datasource is not"},
		{"NoQuery", func(ps []any) { chart(ps, 2)["targets"] = []any{} }, "has no query"},
		{"RefIDTaken", func(ps []any) {
			ts := chart(ps, 11)["targets"].([]any)
			ts[1].(map[string]any)["refId"] = ts[0].(map[string]any)["refId"]
		}, "is empty or taken"},
		{"EmptyExpr", func(ps []any) { query(ps, 2)["expr"] = " " }, "empty expression"},
		{"Unbalanced", func(ps []any) { query(ps, 2)["expr"] = "max(outboxd_events" }, "unclosed quote or bracket"},
		{"WrongBracket", func(ps []any) { query(ps, 2)["expr"] = "max(outboxd_events]" }, "unbalanced"},
		{"NoStream", func(ps []any) { query(ps, 2)["expr"] = `max(outboxd_events{state="pending"})` }, `names stream="$stream" first`},
	} {
		d, ps := panels()
		tc.spoil(ps)
		broken, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		err = checkDashboard(broken)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: want an error saying %q, got %v", tc.name, tc.says, err)
		}
	}
}
