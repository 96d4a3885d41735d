package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/redact"
	ostatus "github.com/outboxd/outboxd/internal/status"
)

// dlqListDefault is how many dead letters dlq list shows unless told.
const dlqListDefault = 100

// The operator commands: each calls the admin API of the instance at
// --server (GET /v1/status for status), prints a table, or the API's JSON
// with --json, and returns errDrift (exit 1) when it found a problem.

// printJSON writes v as one line of JSON.
func (a *app) printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("error encoding the output: %w", err)
	}
	_, err = fmt.Fprintln(a.stdout, string(b))
	return err
}

// ago formats a number of seconds for people.
func ago(seconds float64) string {
	return (time.Duration(seconds * float64(time.Second))).Round(time.Second).String()
}

// printStatus prints the pipeline at a glance from GET /v1/status.
func (a *app) printStatus(ctx context.Context) error {
	var raw []byte
	var s ostatus.Snapshot
	if err := a.client().do(ctx, http.MethodGet, "/v1/status", nil, &s, &raw); err != nil {
		return err
	}
	if a.o.jsonOut {
		if _, err := a.stdout.Write(raw); err != nil {
			return err
		}
		if len(s.Stalled) > 0 {
			return errDrift
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	row := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	row("SERVER", "%s (store %s, read %s)", redact.DSN(a.o.server), s.Store, s.ReadAt.Format(time.RFC3339))
	if e := s.Events; e != nil {
		failed := ""
		if len(e.FailedByCategory) > 0 {
			var parts []string
			for _, cat := range slices.Sorted(maps.Keys(e.FailedByCategory)) {
				if n := e.FailedByCategory[cat]; n > 0 {
					parts = append(parts, fmt.Sprintf("%s %d", cat, n))
				}
			}
			if len(parts) > 0 {
				failed = " (" + strings.Join(parts, ", ") + ")"
			}
		}
		estimated := ""
		if e.Estimated {
			estimated = " (estimated)"
		}
		row("EVENTS", "total %d%s, synced %d, pending %d, failed %d%s", e.Total, estimated, e.Synced, e.Pending, e.Failed, failed)
	}
	if s.OldestPendingAgeSeconds != nil {
		if *s.OldestPendingAgeSeconds > 0 {
			row("OLDEST UNSYNCED", "%s", ago(*s.OldestPendingAgeSeconds))
		} else {
			row("OLDEST UNSYNCED", "none pending")
		}
	}
	if s.Outbox != nil {
		row("OUTBOX", "undispatched %d", s.Outbox.Undispatched)
	}
	if st := s.Stream; st != nil {
		row("STREAM", "%s: length %d, pending %d", st.Name, st.Length, st.Pending)
		for _, g := range st.Groups {
			lag := "unknown"
			if g.Lag != nil {
				lag = strconv.FormatInt(*g.Lag, 10)
			}
			row("  GROUP", "%s: lag %s unread, pending %d, read %d", g.Name, lag, g.Pending, g.EntriesRead)
		}
	}
	if r := s.Redis; r != nil {
		limit := "no maxmemory"
		if r.MaxMemoryBytes > 0 {
			limit = fmt.Sprintf("%.0f%% of maxmemory %d", 100*float64(r.UsedMemoryBytes)/float64(r.MaxMemoryBytes), r.MaxMemoryBytes)
		}
		row("REDIS", "used_memory %d (%s), policy %s", r.UsedMemoryBytes, limit, r.MaxMemoryPolicy)
		if r.EvictionMisconfigured {
			row("", "ERROR: maxmemory-policy %s can evict outboxd's keys; set noeviction (docs/operations.md, \"Redis memory\")", r.MaxMemoryPolicy)
		}
	}
	if r := s.Replay; r != nil {
		lag := "unknown"
		if r.Lag != nil {
			lag = strconv.FormatInt(*r.Lag, 10)
		}
		rate := ""
		if r.RatePerSecond != nil {
			rate = fmt.Sprintf(", %.0f/s", *r.RatePerSecond)
		}
		row("REPLAY LANE", "%s: length %d, lag %s unread, pending %d, read %d%s", r.Name, r.Length, lag, r.Pending, r.Read, rate)
	}
	if d := s.DLQ; d != nil {
		oldest := ""
		if d.OldestAgeSeconds != nil {
			oldest = ", oldest " + ago(*d.OldestAgeSeconds)
		}
		row("DLQ", "%s: length %d%s", d.Name, d.Length, oldest)
	}
	now := s.ReadAt
	if now.IsZero() {
		now = time.Now()
	}
	if d := s.Dispatcher; d != nil && len(d.Partitions) > 0 {
		for _, p := range d.Partitions {
			leader := "none (lease expired or never taken)"
			if p.LeaderAlive {
				leader = fmt.Sprintf("%s, term %d", p.Leader, p.Term)
			}
			checkpoint := "never"
			if p.CheckpointAgeSeconds != nil {
				checkpoint = ago(*p.CheckpointAgeSeconds) + " ago"
			}
			row(fmt.Sprintf("DISPATCHER %d", p.Partition), "leader %s; checkpoint %s", leader, checkpoint)
		}
	} else if d != nil {
		leader := "none (lease expired " + ago(now.Sub(d.LeaseExpiresAt).Seconds()) + " ago)"
		if d.LeaderAlive {
			leader = fmt.Sprintf("%s, term %d", d.Leader, d.Term)
		}
		checkpoint := "never"
		if d.CheckpointAgeSeconds != nil {
			checkpoint = ago(*d.CheckpointAgeSeconds) + " ago"
		}
		row("DISPATCHER", "leader %s; checkpoint %s", leader, checkpoint)
	} else {
		row("DISPATCHER", "never ran on this stream")
	}
	if r := s.Reconciler; r != nil {
		leader := "none (every replica sweeps, or none runs)"
		if r.LeaderAlive {
			leader = r.Leader
		}
		sweep := "never recorded"
		if r.LastSweepAgeSeconds != nil {
			sweep = ago(*r.LastSweepAgeSeconds) + " ago"
		}
		if rep := r.LastReport; rep != nil {
			sweep += fmt.Sprintf(" (scanned %d, published %d, exhausted %d)", rep.Scanned, rep.Published, rep.Exhausted)
		}
		row("RECONCILER", "leader %s; last sweep %s", leader, sweep)
	} else {
		row("RECONCILER", "never swept this stream")
	}
	if au := s.Audit; au != nil {
		row("AUDIT", "%s", auditSummary(au, now))
		for _, f := range au.Findings {
			row("", "%s %s", f.Kind, findingText(f))
		}
		for _, c := range au.Repair {
			row("  REPAIR", "%s", c)
		}
	}
	if len(s.Breakers) > 0 {
		var parts []string
		for _, b := range s.Breakers {
			parts = append(parts, fmt.Sprintf("%s/%s %s", b.Component, b.Name, b.State))
		}
		row("BREAKERS", "%s", strings.Join(parts, ", "))
	}
	if len(s.RetriesHalted) > 0 {
		var parts []string
		for _, h := range s.RetriesHalted {
			part := h.Component + "/" + h.Class
			if h.Code != "" {
				part += " (" + h.Code + ")"
			}
			parts = append(parts, part)
		}
		row("RETRIES HALTED", "%s (the same error code 50 times in a row; outboxd retries resume --class C, or see docs/operations.md)", strings.Join(parts, ", "))
	}
	if len(s.Paused) > 0 {
		var parts []string
		for _, p := range s.Paused {
			parts = append(parts, fmt.Sprintf("%s (by %s since %s)", p.Stage, p.By, p.Since.Format(time.RFC3339)))
		}
		row("PAUSED", "%s (outboxd resume --stage S)", strings.Join(parts, ", "))
	}
	if len(s.Unavailable) > 0 {
		row("UNAVAILABLE", "%s (could not be read)", strings.Join(s.Unavailable, ", "))
	}
	if len(s.Stalled) > 0 {
		row("STALLED", "%s", strings.Join(s.Stalled, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Stalled) > 0 {
		return errDrift // exit 1: the pipeline cannot make progress now
	}
	return nil
}

// auditSummary is the AUDIT line of status: the last run's age, what it
// compared and the drift it found.
func auditSummary(au *operator.AuditReport, now time.Time) string {
	line := fmt.Sprintf("last run %s ago: %d originals, %d statistics rows compared; ", ago(now.Sub(au.StartedAt).Seconds()), au.Checked, au.StatsChecked)
	if au.DriftTotal() == 0 {
		return line + "no drift"
	}
	var parts []string
	for _, k := range operator.AuditKinds {
		if n := au.Drift[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	return line + fmt.Sprintf("DRIFT %s (ratio %.4f%%; see the runbook OutboxdReadModelDrift)", strings.Join(parts, ", "), 100*au.DriftRatio)
}

// findingText describes one finding of the audit.
func findingText(f operator.AuditFinding) string {
	out := f.SourceKey + "/" + f.DeviceKey + " " + f.Day
	if f.EventID != "" {
		out = f.EventID + " (" + out + ")"
	}
	if f.Detail != "" {
		out += ": " + f.Detail
	}
	return out
}

// dlqList prints GET /v1/admin/dlq.
func (a *app) dlqList(ctx context.Context) error {
	q := url.Values{}
	q.Set("limit", strconv.Itoa(a.o.limit))
	if a.o.category != "" {
		q.Set("category", a.o.category)
	}
	if a.o.code != "" {
		q.Set("code", a.o.code)
	}
	for name, v := range map[string]string{"error": a.o.dlqError, "sourceKey": a.o.source, "deviceKey": a.o.device,
		"type": a.o.eventType, "since": a.o.since, "until": a.o.until, "payload": a.o.payloadField} {
		if v != "" {
			q.Set(name, v)
		}
	}
	var raw []byte
	var page operator.DLQPage
	if err := a.client().do(ctx, http.MethodGet, "/v1/admin/dlq?"+q.Encode(), nil, &page, &raw); err != nil {
		return err
	}
	if a.o.jsonOut {
		_, err := a.stdout.Write(raw)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEVENT\tCATEGORY\tCODE\tDELIVERIES\tAGE\tORIGINAL")
	for _, dl := range page.Entries {
		event := dl.EventID
		if event == "" {
			event = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", dl.ID, event, dl.Category, dl.Code, dl.Deliveries, ago(dl.AgeSeconds), dl.Original)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	more := ""
	if page.Next != "" {
		more = "; more follow (raise --limit)"
	}
	fmt.Fprintf(a.stdout, "%d shown of %d in %s%s\n", len(page.Entries), page.Length, page.Stream, more)
	return nil
}

// dlqAction is replay or drop.
type dlqAction string

const (
	dlqReplay dlqAction = "replay"
	dlqDrop   dlqAction = "drop"
)

// dlqAct replays or drops the dead letters --id names, or all of them
// (chunk by chunk), and prints what happened to each.
func (a *app) dlqAct(ctx context.Context, action dlqAction) error {
	c := a.client()
	total := operator.DLQActionResult{Results: []operator.DLQResult{}}
	req := operator.DLQAction{IDs: a.o.ids, All: a.o.all, Category: a.o.category, Code: a.o.code}
	for {
		var res operator.DLQActionResult
		if err := c.do(ctx, http.MethodPost, "/v1/admin/dlq:"+string(action), req, &res, nil); err != nil {
			return err
		}
		total.Replayed += res.Replayed
		total.Dropped += res.Dropped
		total.OriginalMissing += res.OriginalMissing
		total.NotFound += res.NotFound
		total.Failed += res.Failed
		total.Results = append(total.Results, res.Results...)
		if res.Done || res.Next == "" {
			break
		}
		req.After = res.Next
	}
	total.Done = true
	if a.o.jsonOut {
		if err := a.printJSON(total); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tEVENT\tOUTCOME")
		for _, r := range total.Results {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, r.EventID, r.Outcome)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if action == dlqReplay {
			fmt.Fprintf(a.stdout, "replayed %d (re-published into the replay lane with origin dlq-replay, entries removed)", total.Replayed)
		} else {
			fmt.Fprintf(a.stdout, "dropped %d", total.Dropped)
		}
		fmt.Fprintf(a.stdout, "; original missing %d, not found %d, failed %d\n", total.OriginalMissing, total.NotFound, total.Failed)
		if total.OriginalMissing > 0 {
			fmt.Fprintln(a.stdout, "entries whose original does not exist cannot be replayed: drop them with outboxd dlq drop --id … --yes")
		}
	}
	if total.OriginalMissing > 0 || total.NotFound > 0 || total.Failed > 0 {
		return errDrift
	}
	return nil
}

// replayRequest is the request of the replay command's flags.
func (a *app) replayRequest() httpapi.ReplayRequest {
	return httpapi.ReplayRequest{From: a.o.from, To: a.o.to, By: a.o.by, SourceKey: a.o.source, DeviceKey: a.o.device,
		State: a.o.state, Rebuild: a.o.rebuild, Limit: a.o.chunk, Entities: a.o.entities,
		EntityRanges: a.o.ranges, Type: a.o.eventType}
}

// replayTotals is the last JSON line of the replay command (kind total).
type replayTotals struct {
	Kind        string `json:"kind"`
	DryRun      bool   `json:"dryRun"`
	Count       int64  `json:"count"`
	Matched     int    `json:"matched"`
	Published   int    `json:"published"`
	Redriven    int64  `json:"redriven"`
	RemovedRows int64  `json:"removedRows"`
	Rebuild     bool   `json:"rebuild"`
	Chunks      int    `json:"chunks"`
}

// replayChunk is the JSON line of one chunk (kind chunk): the chunk's
// result, the progress, and the token that resumes after it.
type replayChunk struct {
	Kind  string `json:"kind"`
	Chunk int    `json:"chunk"`
	operator.ReplayResult
	Progress Progress `json:"progress"`
	Resume   string   `json:"resume,omitempty"`
}

// Kinds of the JSON lines of replay and verify.
const (
	lineChunk = "chunk"
	lineTotal = "total"
)

// replay counts the window (a dry run), then, unless --dry-run, replays
// it chunk by chunk, with a progress line on a terminal and a JSON line
// per chunk with --json, and prints the totals. --rebuild needs --yes:
// without it the command prints what it would remove and exits 2.
func (a *app) replay(ctx context.Context) error {
	c := a.client()
	req := a.replayRequest()
	req.DryRun = true
	var counted operator.ReplayResult
	if err := c.do(ctx, http.MethodPost, "/v1/admin/replay", req, &counted, nil); err != nil {
		return err
	}
	tot := replayTotals{Kind: lineTotal, DryRun: a.o.dryRun, Rebuild: a.o.rebuild}
	if r := a.o.resumed; r != nil {
		if err := json.Unmarshal(r.Totals, &tot); err != nil {
			return config.Invalid("resume", "is not a token that replay printed")
		}
		req.After = r.After
	}
	if counted.Count != nil {
		tot.Count = *counted.Count
	}
	if a.o.dryRun || (a.o.rebuild && !a.o.yes) {
		tot.DryRun = true
		if a.o.jsonOut {
			if err := a.printJSON(tot); err != nil {
				return err
			}
		} else if a.o.rebuild {
			fmt.Fprintf(a.stdout, "replay --rebuild: %s originals in the window; their rows and counts would be removed from the read model, then they would be re-published; nothing changed\n", count(tot.Count))
		} else {
			fmt.Fprintf(a.stdout, "replay --dry-run: %s originals in the window; nothing changed\n", count(tot.Count))
		}
		if a.o.dryRun || tot.Count == 0 {
			return nil
		}
		return config.Invalid("yes", "is required with --rebuild: it removes the read-model rows and counts of %s originals before re-publishing them; run the same command with --yes", count(tot.Count))
	}
	p := newProgress(a, "replay", int64(tot.Matched))
	p.total = tot.Count
	token := ""
	req.DryRun = false
	for {
		var res operator.ReplayResult
		if err := c.do(ctx, http.MethodPost, "/v1/admin/replay", req, &res, nil); err != nil {
			p.end()
			a.interrupted("replay", fmt.Sprintf("%s of the window's %s re-published", count(int64(tot.Published)), count(tot.Count)), token)
			return err
		}
		tot.Chunks++
		tot.Matched += res.Matched
		tot.Published += res.Published
		tot.Redriven += res.Redriven
		tot.RemovedRows += res.RemovedRows
		if res.Started != nil && req.Started == "" {
			req.Started = res.Started.Format(time.RFC3339Nano) // a cancel stops the replay
		}
		done := res.Done || res.Next == ""
		var err error
		token, err = a.finishChunk(p, int64(res.Matched), "replay", res.Next, done, tot.Chunks, tot, func(pr Progress, resume string) any {
			return replayChunk{Kind: lineChunk, Chunk: tot.Chunks, ReplayResult: res, Progress: pr, Resume: resume}
		})
		if err != nil {
			return err
		}
		if done {
			break
		}
		req.After = res.Next
	}
	p.end()
	if a.o.jsonOut {
		return a.printJSON(tot)
	}
	fmt.Fprintf(a.stdout, "replay: %d of the window's %d originals re-published into the replay lane with origin replay, %d parked ones redriven", tot.Published, tot.Count, tot.Redriven)
	if a.o.rebuild {
		fmt.Fprintf(a.stdout, ", %d rows removed from the read model first", tot.RemovedRows)
	}
	_, err := fmt.Fprintln(a.stdout)
	return err
}

// finishChunk records a finished chunk of n originals or rows: its
// progress, the token that resumes after it (none after the last: done),
// and with --json its line, which line builds. It returns the token.
func (a *app) finishChunk(p *progress, n int64, command, next string, done bool, chunks int, totals any,
	line func(pr Progress, resume string) any) (string, error) {
	token := ""
	if !done {
		token = a.resumeToken(command, next, chunks, totals)
	}
	pr := p.add(n)
	if a.o.jsonOut {
		return token, a.printJSON(line(pr, token))
	}
	return token, nil
}

// resumeToken returns the token that resumes the running command after
// the chunk whose next cursor is after.
func (a *app) resumeToken(command, after string, chunks int, totals any) string {
	b, _ := json.Marshal(totals) // plain fields: cannot fail
	return resumeToken{Command: command, Args: a.o.summary(), Fingerprint: a.o.fingerprint(), After: after, Chunks: chunks, Totals: b}.encode()
}

// interrupted says on stderr how far an interrupted run got and how to
// continue it (with the token of its last finished chunk, when there is
// one).
func (a *app) interrupted(command, sofar, token string) {
	if token == "" {
		fmt.Fprintf(a.stderr, "%s stopped after %s, before a chunk was finished: run the same command again\n", command, sofar)
		return
	}
	fmt.Fprintf(a.stderr, "%s stopped after %s; continue after the last finished chunk with the same --server and --auth-token:\n  outboxd %s --resume %s\n",
		command, sofar, a.o.summary(), token)
}

// verifyTotals is the last JSON line of the verify command (kind total).
type verifyTotals struct {
	Kind            string           `json:"kind"`
	Checked         map[string]int   `json:"checked"`
	DriftByKind     map[string]int   `json:"driftByKind"`
	Drift           []operator.Drift `json:"drift"`
	Republished     int              `json:"republished"`
	StatsRecomputed int              `json:"statsRecomputed"`
	Expired         int              `json:"expired"`
	Repair          bool             `json:"repair"`
	// DryRun is set for --repair without --yes: it checked and repaired
	// nothing.
	DryRun bool `json:"dryRun,omitempty"`
	Chunks int  `json:"chunks"`
}

// verifyChunk is the JSON line of one chunk of verify (kind chunk).
type verifyChunk struct {
	Kind  string `json:"kind"`
	Chunk int    `json:"chunk"`
	operator.VerifyResult
	Progress Progress `json:"progress"`
	Resume   string   `json:"resume,omitempty"`
}

// verifyShown bounds the drift lines verify prints (JSON has them all).
const verifyShown = 50

// verify runs every chunk of every phase and prints the drift found;
// exit 1 when there is any (also with --repair: run verify again once the
// worker caught up to see it gone). --repair needs --yes: without it,
// verify checks, prints what it would repair and exits 2.
func (a *app) verify(ctx context.Context) error {
	c := a.client()
	repair := a.o.repair && a.o.yes
	req := httpapi.VerifyRequest{From: a.o.from, To: a.o.to, Repair: repair, Limit: a.o.chunk}
	tot := verifyTotals{Kind: lineTotal, Repair: repair, DryRun: a.o.repair && !repair}
	if r := a.o.resumed; r != nil {
		if err := json.Unmarshal(r.Totals, &tot); err != nil {
			return config.Invalid("resume", "is not a token that verify printed")
		}
		req.After = r.After
	}
	tot.Drift = []operator.Drift{}
	if tot.Checked == nil {
		tot.Checked = map[string]int{}
	}
	if tot.DriftByKind == nil {
		tot.DriftByKind = map[string]int{}
	}
	var p *progress
	phase, token := "", ""
	for {
		var res operator.VerifyResult
		if err := c.do(ctx, http.MethodPost, "/v1/admin/verify", req, &res, nil); err != nil {
			if p != nil {
				p.end()
			}
			a.interrupted("verify", fmt.Sprintf("%s synced originals and %s rows checked", count(int64(tot.Checked[operator.PhaseOriginals])),
				count(int64(tot.Checked[operator.PhaseRows]))), token)
			return err
		}
		if res.Phase != phase {
			if p != nil {
				p.end()
			}
			phase, p = res.Phase, newProgress(a, "verify "+res.Phase, int64(tot.Checked[res.Phase]))
		}
		if res.Total != nil {
			p.total = *res.Total
		}
		tot.Chunks++
		tot.Checked[res.Phase] += res.Checked
		for _, d := range res.Drift {
			tot.DriftByKind[d.Kind]++
		}
		tot.Drift = append(tot.Drift, res.Drift...)
		tot.Republished += res.Republished
		tot.StatsRecomputed += res.StatsRecomputed
		tot.Expired += res.Expired
		done := res.Done || res.Next == ""
		saved := tot
		saved.Drift = nil // the drift found so far was printed; the counts carry on
		var err error
		token, err = a.finishChunk(p, int64(res.Checked), "verify", res.Next, done, tot.Chunks, saved, func(pr Progress, resume string) any {
			return verifyChunk{Kind: lineChunk, Chunk: tot.Chunks, VerifyResult: res, Progress: pr, Resume: resume}
		})
		if err != nil {
			return err
		}
		if done {
			break
		}
		req.After = res.Next
	}
	p.end()
	if a.o.jsonOut {
		if err := a.printJSON(tot); err != nil {
			return err
		}
	} else if err := a.printVerify(a.stdout, tot); err != nil {
		return err
	}
	if repairable := tot.DriftByKind[operator.DriftMissingRow] + tot.DriftByKind[operator.DriftStats]; tot.DryRun && repairable > 0 {
		return config.Invalid("yes", "is required with --repair: it would re-publish %d synced originals without a row and recompute %d statistics rows (their days' counts); nothing changed; run the same command with --yes",
			tot.DriftByKind[operator.DriftMissingRow], tot.DriftByKind[operator.DriftStats])
	}
	if anyDrift(tot) {
		return errDrift
	}
	return nil
}

func (a *app) printVerify(w io.Writer, tot verifyTotals) error {
	if len(tot.Drift) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tEVENT OR DAY\tSOURCE\tDEVICE\tDETAIL\tREPAIRED")
		for i, d := range tot.Drift {
			if i == verifyShown {
				fmt.Fprintf(tw, "…\t%d more (--json lists them all)\t\t\t\t\n", len(tot.Drift)-verifyShown)
				break
			}
			what, detail := d.EventID, ""
			switch {
			case d.Kind == operator.DriftStats && d.Counted != nil && d.Rows != nil:
				what, detail = d.Day, fmt.Sprintf("counted %d, rows %d", *d.Counted, *d.Rows)
			case d.OccurredAt != nil:
				detail = "occurred " + d.OccurredAt.Format(time.RFC3339)
			}
			repaired := "no"
			if d.Repaired {
				repaired = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Kind, what, d.SourceKey, d.DeviceKey, detail, repaired)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "verify: checked %d synced originals, %d rows, found %d statistics rows differing from their rows",
		tot.Checked[operator.PhaseOriginals], tot.Checked[operator.PhaseRows], tot.DriftByKind[operator.DriftStats])
	if tot.Expired > 0 {
		fmt.Fprintf(w, "; %d rows older than --event-retention have no original (expired, not drift)", tot.Expired)
	}
	if len(tot.Drift) == 0 && !anyDrift(tot) {
		_, err := fmt.Fprintln(w, "; no drift")
		return err
	}
	fmt.Fprintf(w, "; drift: %d synced without a row, %d rows without an original, %d statistics rows",
		tot.DriftByKind[operator.DriftMissingRow], tot.DriftByKind[operator.DriftOrphanRow], tot.DriftByKind[operator.DriftStats])
	if tot.Repair {
		fmt.Fprintf(w, "; repaired: %d re-published, %d statistics rows recomputed (rows without an original are left to you); run verify again once the worker caught up",
			tot.Republished, tot.StatsRecomputed)
	}
	if tot.DryRun {
		fmt.Fprintf(w, "; --repair would re-publish %d and recompute %d statistics rows: nothing changed without --yes",
			tot.DriftByKind[operator.DriftMissingRow], tot.DriftByKind[operator.DriftStats])
	}
	_, err := fmt.Fprintln(w)
	return err
}

// anyDrift reports whether the totals count drift (a resumed run counts
// the drift of its earlier part without listing it).
func anyDrift(tot verifyTotals) bool {
	for _, n := range tot.DriftByKind {
		if n > 0 {
			return true
		}
	}
	return false
}

// resumeRetries resumes the halted retries of --class through the admin
// API and prints which halts it cleared.
func (a *app) resumeRetries(ctx context.Context) error {
	var raw []byte
	var res operator.RetriesResult
	if err := a.client().do(ctx, http.MethodPost, "/v1/admin/retries:resume", httpapi.RetriesRequest{Class: a.o.class}, &res, &raw); err != nil {
		return err
	}
	if a.o.jsonOut {
		_, err := a.stdout.Write(raw)
		return err
	}
	if len(res.Resumed) == 0 {
		fmt.Fprintf(a.stdout, "retries resume: no worker or dispatcher had its retries of class %s halted; nothing changed\n", res.Class)
		return nil
	}
	var parts []string
	for _, h := range res.Resumed {
		parts = append(parts, fmt.Sprintf("%s (halted by %s)", h.Component, h.Code))
	}
	fmt.Fprintf(a.stdout, "retries resume: automatic retries of class %s resumed for %s; every process sees it within a second\n",
		res.Class, strings.Join(parts, ", "))
	return nil
}

// pauseStage pauses (pause) or resumes --stage through the admin API and
// prints the stage's state.
func (a *app) pauseStage(ctx context.Context, pause bool) error {
	path := "/v1/admin/resume"
	if pause {
		path = "/v1/admin/pause"
	}
	var raw []byte
	var res operator.PauseResult
	if err := a.client().do(ctx, http.MethodPost, path, httpapi.PauseRequest{Stage: a.o.stage, By: a.o.pausedBy}, &res, &raw); err != nil {
		return err
	}
	if a.o.jsonOut {
		_, err := a.stdout.Write(raw)
		return err
	}
	switch {
	case pause && res.Changed:
		fmt.Fprintf(a.stdout, "pause: %s paused by %s; every replica stops it within a second (outboxd resume --stage %s)\n", res.Stage, res.By, res.Stage)
	case pause:
		fmt.Fprintf(a.stdout, "pause: %s was already paused by %s since %s; nothing changed\n", res.Stage, res.By, res.Since.Format(time.RFC3339))
	case res.Changed:
		fmt.Fprintf(a.stdout, "resume: %s resumed; every replica takes it up within a second\n", res.Stage)
	default:
		fmt.Fprintf(a.stdout, "resume: %s was not paused; nothing changed\n", res.Stage)
	}
	return nil
}

// cancelReplay cancels the running replays through the admin API.
func (a *app) cancelReplay(ctx context.Context) error {
	var raw []byte
	var res operator.CancelResult
	if err := a.client().do(ctx, http.MethodPost, "/v1/admin/replay:cancel", httpapi.CancelRequest{}, &res, &raw); err != nil {
		return err
	}
	if a.o.jsonOut {
		_, err := a.stdout.Write(raw)
		return err
	}
	fmt.Fprintf(a.stdout, "replay cancel: replays begun before %s publish nothing more; %d entries removed unprojected from the replay lane\n",
		res.CancelledAt.Format(time.RFC3339), res.Removed)
	return nil
}
