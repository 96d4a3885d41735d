package stream

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ackScript acknowledges ARGV[2..] in group ARGV[1] of stream KEYS[1] and
// removes them from the delivery budgets KEYS[2], in one step, and returns
// how many XACK acknowledged. A script, not a MULTI/EXEC: Redis 7 refuses
// every transaction while it is over its maxmemory, but lets a script run
// commands that free memory (XACK, HDEL), so the workers go on
// acknowledging, trimming frees memory, and the pipeline drains by itself.
var ackScript = redis.NewScript(`
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
local n = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
return n`)

// ackScriptChunk is how many ids one run of ackScript takes at most (Lua's
// unpack has a limit of a few thousand values).
const ackScriptChunk = 1000

// ack is Finish for a batch with nothing to write but the XACK and the
// budgets' removal (ackScript).
func (g *Group) ack(ctx context.Context, ids []string) (acked int64, err error) {
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), ackScriptChunk)]
		ids = ids[len(chunk):]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, g.keys.Group())
		for _, id := range chunk {
			args = append(args, id)
		}
		n, err := ackScript.Run(ctx, g.c.rdb, []string{g.keys.Stream(), g.keys.Failures()}, args...).Int64()
		if err != nil {
			return acked, err
		}
		acked += n
	}
	return acked, nil
}
