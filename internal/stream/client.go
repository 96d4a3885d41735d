package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/outbox"
)

// Config configures a Client. A nil config means all defaults.
type Config struct {
	// MaxLen is the stream's length policy: when positive, every XADD to a
	// stream trims it approximately (MAXLEN ~) to about this many entries.
	// Defaults to 0, no trimming: trimming can delete entries that a
	// consumer group has not acknowledged yet (the worker dead-letters such
	// an entry as trimmed and the reconciler re-publishes its original), so
	// a length is an operator's decision, well above the worst backlog. The
	// dead-letter stream is never trimmed.
	MaxLen int64
}

func (c *Config) validate() error {
	if c.MaxLen < 0 {
		return fmt.Errorf("MaxLen must be 0 (no trimming) or positive (got %d)", c.MaxLen)
	}
	return nil
}

// Client is the pipeline's Redis: every command outboxd sends to Redis for
// the stream goes through a Client, its Publishers and its Groups. It is a
// thin layer over a go-redis universal client (a single node, a Sentinel
// set or a Cluster) that the caller opens and closes, and it is safe for
// concurrent use.
type Client struct {
	rdb    redis.UniversalClient
	maxLen int64
	// version is the server's, read once (Trim's choice of XTRIM … ACKED).
	version serverVersion
}

// NewClient returns a Client over rdb. A nil cfg means all defaults; an
// invalid one is an error naming the field.
func NewClient(rdb redis.UniversalClient, cfg *Config) (*Client, error) {
	if rdb == nil {
		return nil, errors.New("stream: a Redis client is required")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid stream config: %w", err)
	}
	return &Client{rdb: rdb, maxLen: c.MaxLen}, nil
}

// Ping checks that Redis answers.
func (c *Client) Ping(ctx context.Context) error { return c.rdb.Ping(ctx).Err() }

// Entry is a stream entry as read.
type Entry struct {
	// ID is the entry's id, "<milliseconds>-<sequence>".
	ID string
	// Values are its fields; nil when its data is gone (the stream was
	// trimmed, or the entry deleted, while it was pending).
	Values map[string]any
}

// Payload returns the entry's payload field (outbox.PayloadField), or "".
func (e Entry) Payload() string {
	s, _ := e.Values[outbox.PayloadField].(string)
	return s
}

// Message decodes the outbox message the entry carries (outbox.DecodeMessage).
func (e Entry) Message() (outbox.Message, error) { return outbox.DecodeMessage(e.Values) }

func entries(msgs []redis.XMessage) []Entry {
	out := make([]Entry, len(msgs))
	for i, m := range msgs {
		out[i] = Entry{ID: m.ID, Values: m.Values}
	}
	return out
}

// byID reads the entries ids of the stream key in one round trip (an
// XRANGE of each id), in the order of ids; an id without an entry (never
// added, trimmed or deleted) gives an Entry with that id and nil Values.
func (c *Client) byID(ctx context.Context, key string, ids []string) ([]Entry, error) {
	cmds := make([]*redis.XMessageSliceCmd, len(ids))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.XRangeN(ctx, key, id, id, 1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(ids))
	for i, id := range ids {
		out[i] = Entry{ID: id}
		if msgs := cmds[i].Val(); len(msgs) == 1 {
			out[i].Values = msgs[0].Values
		}
	}
	return out, nil
}

// IDTime returns the time in a stream entry id ("<milliseconds>-<sequence>"):
// when Redis added the entry.
func IDTime(id string) (time.Time, bool) {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n).UTC(), true
}

// compareIDs orders two stream entry ids.
func compareIDs(a, b string) int {
	split := func(id string) (int64, int64) {
		ms, seq, _ := strings.Cut(id, "-")
		m, _ := strconv.ParseInt(ms, 10, 64)
		s, _ := strconv.ParseInt(seq, 10, 64)
		return m, s
	}
	am, as := split(a)
	bm, bs := split(b)
	return cmp.Or(cmp.Compare(am, bm), cmp.Compare(as, bs))
}

// Len returns the number of entries of the stream key (0 when it does not
// exist).
func (c *Client) Len(ctx context.Context, key string) (int64, error) {
	return c.rdb.XLen(ctx, key).Result()
}

// scanPage is how many entries ScanBack reads per round trip.
const scanPage = 1000

// ScanBack reads the stream key from its newest entry back to the first
// entry added at since, at most limit entries, and returns those match
// keeps, oldest first, with how many it read; partial is set when it
// stopped at limit before reaching since.
func (c *Client) ScanBack(ctx context.Context, key string, since time.Time, limit int, match func(Entry) bool) (found []Entry, scanned int, partial bool, err error) {
	end, start := "+", strconv.FormatInt(max(since.UnixMilli(), 0), 10)
	for scanned < limit {
		n := min(scanPage, limit-scanned)
		msgs, err := c.rdb.XRevRangeN(ctx, key, end, start, int64(n)).Result()
		if err != nil {
			return nil, scanned, false, err
		}
		scanned += len(msgs)
		for _, e := range entries(msgs) {
			if match(e) {
				found = append(found, e)
			}
		}
		if len(msgs) < n {
			slices.Reverse(found)
			return found, scanned, false, nil
		}
		end = "(" + msgs[len(msgs)-1].ID
	}
	slices.Reverse(found)
	return found, scanned, true, nil
}

// Figures are what the status shows of a stream: each part carries the
// error that kept it from being read, or nil.
type Figures struct {
	// Length and Pending are the stream's entries and those delivered to
	// the group and not acknowledged (its pending entries list; 0 when the
	// group does not exist yet).
	Length, Pending int64
	StreamErr       error
	// Replay are the figures of the stream's replay lane (Keys.Replay).
	Replay LaneFigures
	// Halts are the halted retries of the error-streak rule of the
	// group's workers and of the stream's dispatchers (Streak), HaltsErr
	// what kept them from being read.
	Halts    []Halt
	HaltsErr error
	// DLQLength is the dead-letter stream's entries, DLQOldest when its
	// oldest was added (nil when it is empty).
	DLQLength int64
	DLQOldest *time.Time
	DLQErr    error
}

// Halt is a class of failures whose automatic retries a component halted
// (the error-streak rule), with the code and source of the run that halted
// them.
type Halt struct {
	Component, Class, Code, Source string
}

// LaneFigures are the figures of the replay lane for the group.
type LaneFigures struct {
	// Length and Pending are as the stream's. Lag counts the entries the
	// group has not read yet (nil when Redis cannot tell, after a trim or
	// a deletion). Read counts the entries the group has read from the
	// lane since it was created (XINFO GROUPS' entries-read): the counter
	// of the lane's rate.
	Length, Pending int64
	Lag             *int64
	Read            int64
	Err             error
}

// Figures reads the stream's length and pending count, the replay lane's
// figures, the halted retries of the group's workers and of the stream's
// dispatchers, and the dead-letter stream's length and oldest entry, in
// one round trip.
func (c *Client) Figures(ctx context.Context, keys Keys) Figures {
	keys = keys.Live()
	lane := keys.ReplayLane()
	var xlen, dlen, rlen *redis.IntCmd
	var pend *redis.XPendingCmd
	var rgroups *redis.XInfoGroupsCmd
	var first *redis.XMessageSliceCmd
	streaks := map[string]*redis.MapStringStringCmd{}
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, component := range []string{ComponentWorker, ComponentDispatcher} {
			streaks[component] = p.HGetAll(ctx, keys.Streak(component))
		}
		xlen = p.XLen(ctx, keys.Stream())
		pend = p.XPending(ctx, keys.Stream(), keys.Group())
		rlen = p.XLen(ctx, lane.Stream())
		rgroups = p.XInfoGroups(ctx, lane.Stream())
		dlen = p.XLen(ctx, keys.DLQ())
		first = p.XRangeN(ctx, keys.DLQ(), "-", "+", 1)
		return nil
	})
	f := Figures{Length: xlen.Val(), StreamErr: xlen.Err(), DLQLength: dlen.Val(), DLQErr: dlen.Err()}
	if f.StreamErr == nil {
		switch err := pend.Err(); {
		case err == nil:
			f.Pending = pend.Val().Count
		case IsNoGroup(err):
			// No group yet: nothing is pending.
		default:
			f.StreamErr = err
		}
	}
	f.Replay = laneFigures(keys.Group(), rlen, rgroups)
	for _, component := range []string{ComponentWorker, ComponentDispatcher} {
		m, err := streaks[component].Result()
		if err != nil {
			f.HaltsErr = err
			continue
		}
		st := stateOf(m)
		for _, class := range slices.Sorted(maps.Keys(st.Halts)) {
			h := st.Halts[class]
			f.Halts = append(f.Halts, Halt{Component: component, Class: class, Code: h.Code, Source: h.Source})
		}
	}
	if msgs := first.Val(); f.DLQErr == nil && first.Err() == nil && len(msgs) == 1 {
		if at, ok := IDTime(msgs[0].ID); ok {
			f.DLQOldest = &at
		}
	}
	return f
}

// laneFigures reads the lane's figures from its XLEN and XINFO GROUPS.
func laneFigures(group string, xlen *redis.IntCmd, groups *redis.XInfoGroupsCmd) LaneFigures {
	lf := LaneFigures{Length: xlen.Val(), Err: xlen.Err()}
	if lf.Err != nil {
		return lf
	}
	switch err := groups.Err(); {
	case err == nil:
	case isNoKey(err):
		// No lane yet: nothing to read.
		zero := int64(0)
		lf.Lag = &zero
		return lf
	default:
		lf.Err = err
		return lf
	}
	found := false
	for _, g := range groups.Val() {
		if g.Name != group {
			continue
		}
		found = true
		lf.Pending, lf.Read = g.Pending, g.EntriesRead
		if g.Lag >= 0 {
			lag := g.Lag
			lf.Lag = &lag
		}
	}
	if !found { // no group on the lane yet: every entry is still to read
		n := lf.Length
		lf.Lag = &n
	}
	return lf
}

// GroupPending returns how many entries are delivered to the group and not
// acknowledged, on the stream and on its replay lane together, of every
// partition of keys' stream (0 where the group does not exist): the
// checker's leftover of the consumer group.
func (c *Client) GroupPending(ctx context.Context, keys Keys) (int64, error) {
	var n int64
	for _, k := range keys.Live().AllPartitions() {
		for _, key := range []string{k.Stream(), k.ReplayLane().Stream()} {
			p, err := c.rdb.XPending(ctx, key, k.Group()).Result()
			switch {
			case err == nil:
				n += p.Count
			case IsNoGroup(err):
			default:
				return 0, err
			}
		}
	}
	return n, nil
}
