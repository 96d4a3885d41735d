package stream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// StreamRetentionDefault is how long an acknowledged entry stays in the
// stream before Trim removes it (--stream-retention), so that a journey
// can still show it.
const StreamRetentionDefault = time.Minute

// trimScript trims stream KEYS[1] below the lowest id that any of its
// consumer groups still needs, and whose millisecond is at most now
// (Redis's clock) minus the retention ARGV[1] (ms): with 0, an entry added
// in the current millisecond goes too. A group needs its oldest pending entry (XPENDING
// summary) or, with nothing pending, every entry after its last-delivered
// id. A stream without a group is left alone: the group that will read it
// may not exist yet. With ARGV[2] = "acked" (Redis 8.2 and later) it trims
// below the retention with XTRIM … ACKED, which keeps every entry some
// group has not acknowledged, instead of computing the minimum. Reading
// the groups and trimming run in one script, so no group can be created,
// or move back, in between. It returns {entries trimmed, the MINID}.
//
// Ids compare as two numbers (milliseconds, sequence); both stay well
// within a double's 2^53.
var trimScript = redis.NewScript(`
local function parse(id)
	local ms, seq = string.match(id, '^(%d+)-(%d+)$')
	return tonumber(ms), tonumber(seq)
end
local function less(ams, aseq, bms, bseq)
	return ams < bms or (ams == bms and aseq < bseq)
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, ''} end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then return {0, ''} end
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1]) + 1
local seq = 0
if ARGV[2] == 'acked' then
	local minid = string.format('%.0f-0', ms)
	return {redis.call('XTRIM', KEYS[1], 'MINID', minid, 'ACKED'), minid}
end
for _, g in ipairs(groups) do
	local name, last
	for i = 1, #g, 2 do
		if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
	end
	local nms, nseq
	local summary = redis.call('XPENDING', KEYS[1], name)
	if tonumber(summary[1]) > 0 then
		nms, nseq = parse(summary[2])
	else
		nms, nseq = parse(last)
		nseq = nseq + 1
	end
	if less(nms, nseq, ms, seq) then ms, seq = nms, nseq end
end
local minid = string.format('%.0f-%.0f', ms, seq)
return {redis.call('XTRIM', KEYS[1], 'MINID', minid), minid}`)

// Trimmed is what one Trim of a stream did.
type Trimmed struct {
	// Key is the stream trimmed.
	Key string
	// Entries counts the entries removed.
	Entries int64
	// MinID is the lowest id kept ("" when the stream or its groups do not
	// exist, and nothing was trimmed).
	MinID string
}

// Trim removes from the stream of keys and from its replay lane every
// entry that all their consumer groups have acknowledged and that is older
// than retention (0: every acknowledged entry): for each group, its
// oldest pending entry, or everything after its last-delivered id when
// nothing is pending, is kept; the minimum over all groups (a user's own
// group included) is the MINID of an XTRIM. On Redis 8.2 and later it uses
// XTRIM … ACKED instead. A stream without a consumer group is not trimmed.
// The dead-letter stream is never trimmed (it is a work queue). Trim frees
// memory even when Redis is over its maxmemory (XTRIM is allowed then).
func (c *Client) Trim(ctx context.Context, keys Keys, retention time.Duration) ([]Trimmed, error) {
	retention = max(retention, 0)
	mode := ""
	if c.version.atLeast(ctx, c, 8, 2) {
		mode = "acked"
	}
	keys = keys.Live()
	var out []Trimmed
	for _, key := range []string{keys.Stream(), keys.ReplayLane().Stream()} {
		res, err := trimScript.Run(ctx, c.rdb, []string{key}, retention.Milliseconds(), mode).Slice()
		if err != nil {
			return out, fmt.Errorf("error trimming stream %q: %w", key, err)
		}
		t := Trimmed{Key: key}
		if len(res) == 2 {
			t.Entries, _ = res[0].(int64)
			t.MinID, _ = res[1].(string)
		}
		out = append(out, t)
	}
	return out, nil
}

// serverVersion caches the version of the Redis server (INFO server's
// redis_version), read once it answers.
type serverVersion struct {
	mu           sync.Mutex
	known        bool
	major, minor int
}

// atLeast reports whether the server's version is major.minor or later
// (false while it cannot be read); on a Cluster, whether every master's is
// (c.infos reads each).
func (v *serverVersion) atLeast(ctx context.Context, c *Client, major, minor int) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.known {
		infos, err := c.infos(ctx, "server")
		if err != nil || len(infos) == 0 {
			return false
		}
		v.major, v.minor = -1, 0
		for _, info := range infos {
			ma, mi := parseVersion(infoField(info, "redis_version"))
			if v.major < 0 || ma < v.major || (ma == v.major && mi < v.minor) {
				v.major, v.minor = ma, mi
			}
		}
		v.known = true
	}
	return v.major > major || (v.major == major && v.minor >= minor)
}

// parseVersion reads the major and minor numbers of a version "7.0.15".
func parseVersion(s string) (major, minor int) {
	parts := strings.SplitN(s, ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

// infoField returns the value of field in the text of an INFO reply ("" when
// it is missing).
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
