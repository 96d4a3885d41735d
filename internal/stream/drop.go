package stream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// dropUndeliveredScript deletes up to ARGV[2] entries of the stream
// KEYS[1] that its group ARGV[1] has not been delivered yet (after the
// group's last-delivered id; every entry when the group does not exist
// yet), in one script, so that no read of the group runs between the
// listing and the XDEL. It returns how many it deleted.
var dropUndeliveredScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local last = '0-0'
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
	local name, l
	for i = 1, #g, 2 do
		if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then l = g[i + 1] end
	end
	if name == ARGV[1] then last = l end
end
local entries = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', tonumber(ARGV[2]))
if #entries == 0 then return 0 end
local ids = {}
for i, e in ipairs(entries) do ids[i] = e[1] end
return redis.call('XDEL', KEYS[1], unpack(ids))`)

// dropChunk bounds the entries one run of dropUndeliveredScript deletes,
// so that a long lane does not hold Redis up in one script.
const dropChunk = 1000

// DropUndelivered deletes the entries of the stream of keys (a replay
// lane, say) that keys' group has not been delivered yet, and returns how
// many it deleted. Entries delivered and pending (a batch a worker is
// projecting) stay, as do the entries of other streams.
func (c *Client) DropUndelivered(ctx context.Context, keys Keys) (int64, error) {
	var total int64
	for {
		n, err := dropUndeliveredScript.Run(ctx, c.rdb, []string{keys.Stream()}, keys.Group(), dropChunk).Int64()
		if err != nil {
			return total, fmt.Errorf("error deleting the undelivered entries of %s: %w", keys.Stream(), err)
		}
		total += n
		if n == 0 {
			return total, nil
		}
	}
}
