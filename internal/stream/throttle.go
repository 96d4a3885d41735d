package stream

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// throttleScript is a generic cell rate algorithm over Redis's clock: the
// key KEYS[1] holds the theoretical arrival time (ms) of the next event at
// ARGV[1] events a second; ARGV[3] events are taken at once, and the script
// returns how long (ms) the caller waits so that no more than ARGV[2]
// events (the burst) go ahead of the rate.
var throttleScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = 1000 / tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local after = tat + tonumber(ARGV[3]) * interval
local wait = after - tonumber(ARGV[2]) * interval - now
if wait < 0 then wait = 0 end
redis.call('SET', KEYS[1], string.format('%.3f', after), 'PX', math.ceil(after - now) + 1000)
return string.format('%.3f', wait)`)

// Throttle takes n events from the rate of keys' group (keys.ProjectionRate:
// one for every process and partition) of perSecond events a second with a
// burst of burst events, and returns how long the caller waits before its
// next batch so that the group keeps to the rate.
func (c *Client) Throttle(ctx context.Context, keys Keys, perSecond float64, burst, n int) (time.Duration, error) {
	s, err := throttleScript.Run(ctx, c.rdb, []string{keys.ProjectionRate()}, perSecond, burst, n).Text()
	if err != nil {
		return 0, fmt.Errorf("error taking %d events from the projection rate: %w", n, err)
	}
	ms, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("error reading the projection rate's wait %q: %w", s, err)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}
