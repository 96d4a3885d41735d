package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

// dlqScanMax bounds the dead letters one filtered listing or --all action
// reads; the result's Next continues from there.
const dlqScanMax = 10000

// idsMax bounds the ids of one DLQ action.
const idsMax = 1000

// The states of a dead letter's original, beside outbox.StatePending,
// StateSynced and StateFailed.
const (
	// OriginalMissing: the entry names no original, or one the store does
	// not hold (it cannot be replayed; drop it).
	OriginalMissing = "missing"
	// OriginalUnreadable: the store holds the original but cannot decode
	// it.
	OriginalUnreadable = "unreadable"
)

// DeadLetter is one entry of the dead-letter stream.
type DeadLetter struct {
	// ID is the entry's id in the dead-letter stream.
	ID string `json:"id"`
	// EventID names the original ("" when the stream message named none).
	EventID  string `json:"eventId"`
	Category string `json:"category"`
	// Code is the failure's code (stream.DeadLetter.Code); Reason repeats
	// it, for the clients of earlier versions, where it was the worker's
	// reason.
	Code   string `json:"code"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
	// EntryID is the id of the stream entry that failed; Stream, Group and
	// Consumer where it was consumed.
	EntryID    string `json:"entryId"`
	Stream     string `json:"stream"`
	Group      string `json:"group"`
	Consumer   string `json:"consumer"`
	Deliveries int64  `json:"deliveries"`
	// Redrives counts how often the redrive policy redrove this event's
	// dead letters (stream.Keys.Redrives); an operator's replay or drop of
	// it starts the count again.
	Redrives int64 `json:"redrives"`
	// At is when it was dead-lettered, AgeSeconds how long ago.
	At         time.Time `json:"at"`
	AgeSeconds float64   `json:"ageSeconds"`
	// Original is the original's state now: pending, synced, failed,
	// missing or unreadable.
	Original string `json:"original"`
	// Payload is the stream message that failed, as it was.
	Payload string `json:"payload"`
	// Event is the original itself (Operator.DeadLetter only).
	Event *Event `json:"event,omitempty"`

	// dlq are the keys of the partition whose dead-letter stream holds it.
	dlq stream.Keys
}

// DLQQuery selects dead letters.
type DLQQuery struct {
	// Category and Code keep the entries with this category and code (""
	// keeps all).
	Category, Code string
	// Error keeps the entries whose error contains it (case-insensitive).
	Error string
	// SourceKey and DeviceKey keep the entries of this source and device
	// (as the failed stream message names them); Type those whose
	// original has this type.
	SourceKey, DeviceKey, Type string
	// Since and Until keep the entries dead-lettered in [Since, Until) (a
	// zero bound is open).
	Since, Until time.Time
	// Payload keeps the entries whose original's payload has a field of
	// this value: "path=value", the path's keys joined with dots
	// ("reading.unit=C"), the value as JSON writes it (a string without
	// its quotes).
	Payload string
	// After continues a listing after this entry id ("" from the oldest).
	After string
	// Limit is the most entries returned. Defaults to ChunkDefault.
	Limit int
}

// DLQPage is what ListDLQ returns (GET /v1/admin/dlq).
type DLQPage struct {
	// Stream is the dead-letter stream, Length its entries (unfiltered).
	// With partitions Stream names the first partition's and their number
	// ("{s:0}:dlq (4 partitions)"), and Length sums every partition's.
	Stream  string       `json:"stream"`
	Length  int64        `json:"length"`
	Entries []DeadLetter `json:"entries"`
	// Next, when set, is the After of the next page: more entries may
	// follow.
	Next string `json:"next,omitempty"`
}

// DLQAction names the dead letters a replay or drop acts on: IDs, or All
// the entries (of Category and Code when set), one chunk per call. It is
// also the body of POST /v1/admin/dlq:replay and dlq:drop.
type DLQAction struct {
	IDs      []string `json:"ids,omitempty"`
	All      bool     `json:"all,omitempty"`
	Category string   `json:"category,omitempty"`
	Code     string   `json:"code,omitempty"`
	// After and Limit page an All action: pass the result's Next as After
	// until Done. Limit defaults to ChunkDefault.
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// DLQResult is what a replay or drop did to one dead letter.
type DLQResult struct {
	ID      string `json:"id"`
	EventID string `json:"eventId,omitempty"`
	// Outcome is "replayed", "dropped", "original_missing" (kept: drop
	// it), "not_found" (no such entry) or "failed" (kept: try again).
	Outcome string `json:"outcome"`
}

// Outcomes of DLQResult.
const (
	OutcomeReplayed        = "replayed"
	OutcomeDropped         = "dropped"
	OutcomeOriginalMissing = "original_missing"
	OutcomeNotFound        = "not_found"
	OutcomeFailed          = "failed"
)

// DLQActionResult is what ReplayDLQ or DropDLQ did (POST
// /v1/admin/dlq:replay, /v1/admin/dlq:drop).
type DLQActionResult struct {
	Replayed        int         `json:"replayed"`
	Dropped         int         `json:"dropped"`
	OriginalMissing int         `json:"originalMissing"`
	NotFound        int         `json:"notFound"`
	Failed          int         `json:"failed"`
	Results         []DLQResult `json:"results"`
	// Next and Done page an All action.
	Next string `json:"next,omitempty"`
	Done bool   `json:"done"`
}

func (r *DLQActionResult) add(res DLQResult) {
	switch res.Outcome {
	case OutcomeReplayed:
		r.Replayed++
	case OutcomeDropped:
		r.Dropped++
	case OutcomeOriginalMissing:
		r.OriginalMissing++
	case OutcomeNotFound:
		r.NotFound++
	case OutcomeFailed:
		r.Failed++
	}
	r.Results = append(r.Results, res)
}

// deadLetterOf is the view of a dead letter read now.
func deadLetterOf(d stream.DeadLetter, now time.Time) DeadLetter {
	return DeadLetter{ID: d.ID, EventID: d.EventID, Category: d.Category, Code: d.Code, Reason: d.Code,
		Error: d.Error, EntryID: d.EntryID, Stream: d.Stream, Group: d.Group, Consumer: d.Consumer,
		Deliveries: d.Deliveries, At: d.At, AgeSeconds: max(0, now.Sub(d.At).Seconds()),
		Original: OriginalMissing, Payload: d.Payload}
}

// matches reports whether q keeps dl, by what the dead letter itself
// holds (not its original's type and payload: matchesOriginal).
func (q DLQQuery) matches(dl DeadLetter) bool {
	if (q.Category != "" && dl.Category != q.Category) || (q.Code != "" && dl.Code != q.Code) ||
		(q.Error != "" && !strings.Contains(strings.ToLower(dl.Error), strings.ToLower(q.Error))) ||
		(!q.Since.IsZero() && dl.At.Before(q.Since)) || (!q.Until.IsZero() && !dl.At.Before(q.Until)) {
		return false
	}
	if q.SourceKey == "" && q.DeviceKey == "" {
		return true
	}
	msg, err := outbox.DecodeMessage(map[string]any{outbox.PayloadField: dl.Payload})
	return err == nil && (q.SourceKey == "" || msg.SourceKey == q.SourceKey) && (q.DeviceKey == "" || msg.DeviceKey == q.DeviceKey)
}

// needsOriginals reports whether q filters by the original (Type,
// Payload).
func (q DLQQuery) needsOriginals() bool { return q.Type != "" || q.Payload != "" }

// matchesOriginal reports whether the original ev (nil: none) has q's type
// and payload field.
func (q DLQQuery) matchesOriginal(ev *outbox.Event) bool {
	if !q.needsOriginals() {
		return true
	}
	if ev == nil || (q.Type != "" && ev.Type != q.Type) {
		return false
	}
	if q.Payload == "" {
		return true
	}
	path, want, _ := strings.Cut(q.Payload, "=")
	var v any
	if err := json.Unmarshal(ev.Payload, &v); err != nil {
		return false
	}
	for _, key := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = m[key]; !ok {
			return false
		}
	}
	if s, ok := v.(string); ok {
		return s == want
	}
	got, err := json.Marshal(v)
	return err == nil && string(got) == want
}

// check checks q's filters.
func (q DLQQuery) check() error {
	switch {
	case q.Payload != "" && !strings.Contains(q.Payload, "="):
		return Invalid("payload", "must be path=value (reading.unit=C)")
	case !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until):
		return Invalid("until", "must be after since")
	}
	return nil
}

// dlqs are the keys of every partition's dead-letter stream
// (stream.Keys.AllPartitions: the stream's own with one partition).
func (o *Operator) dlqs() []stream.Keys { return o.keys.Split(o.cfg.Partitions).AllPartitions() }

// deadLetters reads at most n dead letters after after (exclusive; ""
// from the oldest) across every partition, in id order: each partition's
// next n, merged, the first n kept. Ids are times, so the order is the
// order of dead-lettering across partitions; two partitions' entries with
// the same id both come (a page ending on such an id may repeat one).
func (o *Operator) deadLetters(ctx context.Context, after string, n int) ([]stream.DeadLetter, []stream.Keys, error) {
	type found struct {
		d    stream.DeadLetter
		keys stream.Keys
	}
	var all []found
	for _, keys := range o.dlqs() {
		msgs, err := o.cfg.Redis.DeadLetters(ctx, keys, after, n)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range msgs {
			all = append(all, found{m, keys})
		}
	}
	slices.SortStableFunc(all, func(a, b found) int { return stream.CompareIDs(a.d.ID, b.d.ID) })
	// Entries of two partitions may share an id (the same millisecond and
	// sequence): a page never ends between them, since the next one starts
	// after that id.
	keep := min(len(all), n)
	for keep > 0 && keep < len(all) && all[keep].d.ID == all[keep-1].d.ID {
		keep++
	}
	all = all[:keep]
	out, keys := make([]stream.DeadLetter, len(all)), make([]stream.Keys, len(all))
	for i, f := range all {
		out[i], keys[i] = f.d, f.keys
	}
	return out, keys, nil
}

// deleteDeadLetters removes dls from their partitions' dead-letter
// streams.
func (o *Operator) deleteDeadLetters(ctx context.Context, dls []DeadLetter) error {
	ids := map[stream.Keys][]string{}
	for _, dl := range dls {
		ids[dl.dlq] = append(ids[dl.dlq], dl.ID)
	}
	for keys, ids := range ids {
		if err := o.cfg.Redis.DeleteDeadLetters(ctx, keys, ids); err != nil {
			return err
		}
	}
	return nil
}

// scan reads the dead letters after after, oldest first, and returns at
// most limit of those q matches, having read at most dlqScanMax; next is
// the last id read when more may follow. With partitions it reads every
// partition's dead-letter stream, merged in id order.
func (o *Operator) scan(ctx context.Context, q DLQQuery, limit int) (out []DeadLetter, next string, err error) {
	defer func() {
		if err == nil {
			if rerr := o.redriveCounts(ctx, out); rerr != nil {
				out, next, err = nil, "", redisErr("reading the redrive counts", rerr)
			}
		}
	}()
	out = []DeadLetter{}
	if q.After != "" {
		if err := checkEntryID("after", q.After); err != nil {
			return nil, "", err
		}
	}
	now := o.cfg.Now()
	after := q.After
	scanned := 0
	for len(out) < limit && scanned < dlqScanMax {
		n := min(max(limit-len(out), 100), dlqScanMax-scanned)
		msgs, keys, err := o.deadLetters(ctx, after, n)
		if err != nil {
			return nil, "", redisErr("reading the dead-letter stream", err)
		}
		var events map[string]*outbox.Event
		if q.needsOriginals() {
			dls := make([]DeadLetter, len(msgs))
			for i, m := range msgs {
				dls[i] = deadLetterOf(m, now)
			}
			if events, err = o.originals(ctx, dls); err != nil {
				return nil, "", err
			}
		}
		for i, m := range msgs {
			scanned++
			dl := deadLetterOf(m, now)
			dl.dlq = keys[i]
			if q.matches(dl) && q.matchesOriginal(events[dl.EventID]) {
				out = append(out, dl)
			}
			if len(out) == limit {
				// The entries of other partitions with the same id go on
				// this page: the next one starts after the id.
				for i+1 < len(msgs) && msgs[i+1].ID == m.ID {
					i++
					scanned++
					dl := deadLetterOf(msgs[i], now)
					dl.dlq = keys[i]
					if q.matches(dl) && q.matchesOriginal(events[dl.EventID]) {
						out = append(out, dl)
					}
				}
				if i < len(msgs)-1 || len(msgs) >= n {
					next = m.ID
				}
				return out, next, nil
			}
		}
		if len(msgs) < n {
			return out, "", nil
		}
		after = msgs[len(msgs)-1].ID
		next = after
	}
	return out, next, nil
}

// originals fills the Original state of dls with one read of the store.
func (o *Operator) originals(ctx context.Context, dls []DeadLetter) (map[string]*outbox.Event, error) {
	var ids []string
	for _, dl := range dls {
		if outbox.IsEventID(dl.EventID) {
			ids = append(ids, dl.EventID)
		}
	}
	loaded, err := o.cfg.Store.LoadEvents(ctx, ids)
	if err != nil {
		return nil, storeErr(fmt.Sprintf("reading the originals of %d dead letters", len(dls)), err)
	}
	events := make(map[string]*outbox.Event, len(loaded))
	for i := range dls {
		l, ok := loaded[dls[i].EventID]
		switch {
		case !ok:
			dls[i].Original = OriginalMissing
		case l.Err != nil:
			dls[i].Original = OriginalUnreadable
		default:
			dls[i].Original = l.Event.State()
			events[dls[i].EventID] = l.Event
		}
	}
	return events, nil
}

// ListDLQ returns the dead letters q selects, oldest first, with the state
// of their originals.
func (o *Operator) ListDLQ(ctx context.Context, q DLQQuery) (*DLQPage, error) {
	if err := o.needRedis(); err != nil {
		return nil, err
	}
	limit := cmp.Or(q.Limit, ChunkDefault)
	if err := ValidateLimit(limit); err != nil {
		return nil, err
	}
	if err := q.check(); err != nil {
		return nil, err
	}
	var length int64
	parts := o.dlqs()
	for _, keys := range parts {
		n, err := o.cfg.Redis.Len(ctx, keys.DLQ())
		if err != nil {
			return nil, redisErr("reading the dead-letter stream", err)
		}
		length += n
	}
	dlq := parts[0].DLQ()
	if len(parts) > 1 { // named as /v1/status names the sums
		dlq = fmt.Sprintf("%s (%d partitions)", dlq, len(parts))
	}
	entries, next, err := o.scan(ctx, q, limit)
	if err != nil {
		return nil, err
	}
	if _, err := o.originals(ctx, entries); err != nil {
		return nil, err
	}
	return &DLQPage{Stream: dlq, Length: length, Entries: entries, Next: next}, nil
}

// DeadLetter returns the dead letter id with its original (nil when
// missing), or an error that is ErrNotFound.
func (o *Operator) DeadLetter(ctx context.Context, id string) (*DeadLetter, error) {
	if err := o.needRedis(); err != nil {
		return nil, err
	}
	dls, err := o.byIDs(ctx, "id", []string{id})
	if err != nil {
		return nil, err
	}
	if dls[0] == nil {
		return nil, notFound("no dead letter has this id")
	}
	dl := *dls[0]
	got, err := o.cfg.Store.LoadEvents(ctx, []string{dl.EventID})
	if err != nil {
		return nil, storeErr(fmt.Sprintf("reading the original of dead letter %s", id), err)
	}
	if l, ok := got[dl.EventID]; ok && l.Err == nil {
		v := EventOf(l.Event)
		dl.Event, dl.Original = &v, l.Event.State()
	} else if ok {
		dl.Original = OriginalUnreadable
	}
	return &dl, nil
}

// byIDs reads the dead letters of ids (the client's field) in one round
// trip; an id with no entry is nil.
func (o *Operator) byIDs(ctx context.Context, field string, ids []string) ([]*DeadLetter, error) {
	out := make([]*DeadLetter, len(ids))
	for _, id := range ids {
		if err := checkEntryID(field, id); err != nil {
			return nil, err
		}
	}
	now := o.cfg.Now()
	for _, keys := range o.dlqs() { // the first partition holding an id has it
		found, err := o.cfg.Redis.DeadLettersByID(ctx, keys, ids)
		if err != nil {
			return nil, redisErr("reading dead letters", err)
		}
		for i, d := range found {
			if d != nil && out[i] == nil {
				dl := deadLetterOf(*d, now)
				dl.dlq = keys
				out[i] = &dl
			}
		}
	}
	return out, nil
}

// selection returns the dead letters an action names, act.IDs or a chunk
// of All, and its result so far: the ids without an entry are not_found,
// and Next and Done are set.
func (o *Operator) selection(ctx context.Context, act DLQAction) (*DLQActionResult, []DeadLetter, error) {
	if err := o.needRedis(); err != nil {
		return nil, nil, err
	}
	res := &DLQActionResult{Results: []DLQResult{}}
	dls, err := o.named(ctx, act, res)
	return res, dls, err
}

// named checks act and reads the dead letters it names.
func (o *Operator) named(ctx context.Context, act DLQAction, res *DLQActionResult) ([]DeadLetter, error) {
	switch {
	case len(act.IDs) > 0 && act.All:
		return nil, Invalid("all", "cannot be combined with ids")
	case len(act.IDs) == 0 && !act.All:
		return nil, Invalid("ids", "name the dead letters, or set all")
	case len(act.IDs) > idsMax:
		return nil, Invalid("ids", "at most %d per request", idsMax)
	case len(act.IDs) > 0 && (act.Category != "" || act.Code != "" || act.After != ""):
		return nil, Invalid("ids", "cannot be combined with category, code or after")
	}
	if act.All {
		limit := cmp.Or(act.Limit, ChunkDefault)
		if err := ValidateLimit(limit); err != nil {
			return nil, err
		}
		dls, next, err := o.scan(ctx, DLQQuery{Category: act.Category, Code: act.Code, After: act.After}, limit)
		res.Next, res.Done = next, next == ""
		return dls, err
	}
	found, err := o.byIDs(ctx, "ids", act.IDs)
	if err != nil {
		return nil, err
	}
	var dls []DeadLetter
	for i, dl := range found {
		if dl == nil {
			res.add(DLQResult{ID: act.IDs[i], Outcome: OutcomeNotFound})
			continue
		}
		dls = append(dls, *dl)
	}
	res.Done = true
	return dls, nil
}

// ReplayDLQ replays dead letters: for each, the original's syncFailure is
// cleared (store.Store.Redrive: it is pending again, so the reconciler
// takes it up should what follows be lost), its message is added to the
// stream with origin dlq-replay, and only once that succeeded is the entry
// removed from the dead-letter stream. A crash between the publish and the
// removal leaves the entry, and replaying it again delivers the event
// twice: the worker's idempotent projection absorbs the duplicate. An entry
// whose original does not exist is kept, reported original_missing: drop
// it.
func (o *Operator) ReplayDLQ(ctx context.Context, act DLQAction) (*DLQActionResult, error) {
	res, dls, err := o.selection(ctx, act)
	if err != nil {
		return nil, err
	}
	done, err := o.replayLetters(ctx, dls, res, nil)
	if ferr := o.forgetRedrives(ctx, done); ferr != nil && err == nil {
		err = redisErr("removing the redrive counts of replayed dead letters", ferr)
	}
	o.logger.Info("dead letters replayed", zap.Int("replayed", res.Replayed), zap.Int("original_missing", res.OriginalMissing),
		zap.Int("not_found", res.NotFound), zap.Int("failed", res.Failed))
	if err != nil {
		return nil, err
	}
	return res, nil
}

// replayLetters replays dls (ReplayDLQ), adding each one's outcome to res,
// and returns those replayed and removed. Before anything is published,
// before(ctx, replayable) is called when not nil (the redrive policy
// counts the redrives there): an error of it stops the replay.
func (o *Operator) replayLetters(ctx context.Context, dls []DeadLetter, res *DLQActionResult,
	before func(context.Context, []DeadLetter) error) ([]DeadLetter, error) {
	events, err := o.originals(ctx, dls)
	if err != nil {
		return nil, err
	}
	var replay []DeadLetter
	var originals []*outbox.Event
	var parked []string
	for _, dl := range dls {
		ev := events[dl.EventID]
		if ev == nil {
			res.add(DLQResult{ID: dl.ID, EventID: dl.EventID, Outcome: OutcomeOriginalMissing})
			continue
		}
		replay = append(replay, dl)
		originals = append(originals, ev)
		if ev.State() == outbox.StateFailed {
			parked = append(parked, ev.ID)
		}
	}
	if before != nil && len(replay) > 0 {
		if err := before(ctx, replay); err != nil {
			return nil, err
		}
	}
	if len(parked) > 0 {
		if _, err := o.cfg.Store.Redrive(ctx, parked); err != nil {
			return nil, storeErr(fmt.Sprintf("clearing the syncFailure of %d originals", len(parked)), err)
		}
	}
	ok, perr := o.publish(ctx, originals, outbox.OriginDLQReplay)
	var done []DeadLetter
	for i, dl := range replay {
		if !ok[i] {
			res.add(DLQResult{ID: dl.ID, EventID: dl.EventID, Outcome: OutcomeFailed})
			continue
		}
		done = append(done, dl)
		res.add(DLQResult{ID: dl.ID, EventID: dl.EventID, Outcome: OutcomeReplayed})
	}
	if len(done) > 0 {
		if err := o.deleteDeadLetters(ctx, done); err != nil {
			// Published but still listed: a replay again only delivers
			// them twice, which the worker absorbs.
			return nil, redisErr(fmt.Sprintf("removing %d replayed dead letters (they were re-published)", len(done)), err)
		}
	}
	return done, perr
}

// DropDLQ removes dead letters without replaying them (their originals stay
// as they are: parked ones stay parked).
func (o *Operator) DropDLQ(ctx context.Context, act DLQAction) (*DLQActionResult, error) {
	res, dls, err := o.selection(ctx, act)
	if err != nil {
		return nil, err
	}
	if len(dls) == 0 {
		return res, nil
	}
	if err := o.deleteDeadLetters(ctx, dls); err != nil {
		return nil, redisErr(fmt.Sprintf("removing %d dead letters", len(dls)), err)
	}
	if err := o.forgetRedrives(ctx, dls); err != nil {
		return nil, redisErr("removing the redrive counts of dropped dead letters", err)
	}
	for _, dl := range dls {
		res.add(DLQResult{ID: dl.ID, EventID: dl.EventID, Outcome: OutcomeDropped})
	}
	o.logger.Info("dead letters dropped", zap.Int("dropped", res.Dropped), zap.Int("not_found", res.NotFound))
	return res, nil
}

// checkEntryID refuses an id a client sent (field names it) that is not a
// stream entry id, <milliseconds>-<sequence> in decimal: Redis would
// answer it with an error that reads as an outage.
func checkEntryID(field, id string) error {
	ms, seq, ok := strings.Cut(id, "-")
	if ok {
		_, err1 := strconv.ParseUint(ms, 10, 64)
		_, err2 := strconv.ParseUint(seq, 10, 64)
		ok = err1 == nil && err2 == nil
	}
	if !ok {
		return Invalid(field, "%q is not a stream entry id (<milliseconds>-<sequence>, the id or the next of a previous answer)", id)
	}
	return nil
}

// eachPartition calls fn with the event ids of dls of each partition
// (the partition whose dead-letter stream holds them).
func (o *Operator) eachPartition(ctx context.Context, dls []DeadLetter,
	fn func(context.Context, stream.Keys, []string) error) error {
	ids := map[stream.Keys][]string{}
	for _, dl := range dls {
		if dl.EventID != "" {
			ids[dl.dlq] = append(ids[dl.dlq], dl.EventID)
		}
	}
	for keys, ids := range ids {
		if err := fn(ctx, keys, ids); err != nil {
			return err
		}
	}
	return nil
}

// redriveCounts fills the Redrives of dls, one read per partition.
func (o *Operator) redriveCounts(ctx context.Context, dls []DeadLetter) error {
	got := map[string]int64{}
	err := o.eachPartition(ctx, dls, func(ctx context.Context, keys stream.Keys, ids []string) error {
		counts, err := o.cfg.Redis.Redrives(ctx, keys, ids)
		for i := range counts {
			got[ids[i]] = counts[i]
		}
		return err
	})
	for i := range dls {
		dls[i].Redrives = got[dls[i].EventID]
	}
	return err
}

// forgetRedrives removes the redrive counts of dls' events: an operator
// replayed or dropped them, so the policy counts from 0 again.
func (o *Operator) forgetRedrives(ctx context.Context, dls []DeadLetter) error {
	return o.eachPartition(ctx, dls, o.cfg.Redis.ForgetRedrives)
}
