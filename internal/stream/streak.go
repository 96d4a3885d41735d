package stream

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/failpolicy"
)

// Streak keeps the error-streak rule of a component for all its processes
// (failpolicy.SharedStreak) in the hash Keys.Streak: the current run
// (fields code, class, source, n), the halted classes (halt:<class> =
// "<code>|<source>") and the operator's resumes (resumes). Each operation
// is one script, so that concurrent workers count into one run. It is safe
// for concurrent use.
type Streak struct {
	c   *Client
	key string
}

var _ failpolicy.SharedStreak = (*Streak)(nil)

// Streak returns the shared streak of component (ComponentWorker for the
// group's workers, "dispatcher") of keys' stream.
func (c *Client) Streak(keys Keys, component string) *Streak {
	return &Streak{c: c, key: keys.Streak(component)}
}

// streakFailScript counts a failure into the run and halts its class at
// the limit. KEYS[1] the hash; ARGV code, class, source, limit.
var streakFailScript = redis.NewScript(`
local k = KEYS[1]
local n
if redis.call('HGET', k, 'code') == ARGV[1] then
	n = redis.call('HINCRBY', k, 'n', 1)
else
	redis.call('HSET', k, 'code', ARGV[1], 'class', ARGV[2], 'source', ARGV[3], 'n', 1)
	n = 1
end
if n >= tonumber(ARGV[4]) then
	redis.call('HSETNX', k, 'halt:' .. ARGV[2], ARGV[1] .. '|' .. ARGV[3])
end
return redis.call('HGETALL', k)`)

// streakSucceedScript ends a run and clears halts after a success.
// KEYS[1] the hash; ARGV source ("" for a record that went through), the
// record class, then the classes a source's success clears.
var streakSucceedScript = redis.NewScript(`
local k = KEYS[1]
local class, n = redis.call('HGET', k, 'class'), tonumber(redis.call('HGET', k, 'n') or '0')
if ARGV[1] == '' then
	if n > 0 and class == ARGV[2] then redis.call('HDEL', k, 'code', 'class', 'source', 'n') end
	redis.call('HDEL', k, 'halt:' .. ARGV[2])
else
	if n > 0 and class ~= ARGV[2] and redis.call('HGET', k, 'source') == ARGV[1] then
		redis.call('HDEL', k, 'code', 'class', 'source', 'n')
	end
	local suffix = '|' .. ARGV[1]
	for i = 3, #ARGV do
		local h = redis.call('HGET', k, 'halt:' .. ARGV[i])
		if h and string.sub(h, -#suffix) == suffix then redis.call('HDEL', k, 'halt:' .. ARGV[i]) end
	end
end
return redis.call('HGETALL', k)`)

// streakResumeScript clears the halt of a class (every halt for ""), ends
// a run of that class and counts a resume. KEYS[1] the hash; ARGV class.
// It returns the cleared halts (class, value pairs) and the hash.
var streakResumeScript = redis.NewScript(`
local k = KEYS[1]
local cleared = {}
local all = redis.call('HGETALL', k)
for i = 1, #all, 2 do
	local f = all[i]
	if string.sub(f, 1, 5) == 'halt:' and (ARGV[1] == '' or f == 'halt:' .. ARGV[1]) then
		cleared[#cleared + 1] = string.sub(f, 6)
		cleared[#cleared + 1] = all[i + 1]
		redis.call('HDEL', k, f)
	end
end
if ARGV[1] == '' or redis.call('HGET', k, 'class') == ARGV[1] then
	redis.call('HDEL', k, 'code', 'class', 'source', 'n')
end
redis.call('HINCRBY', k, 'resumes', 1)
return {cleared, redis.call('HGETALL', k)}`)

// Fail implements failpolicy.SharedStreak.
func (s *Streak) Fail(ctx context.Context, f failpolicy.Failure, limit int) (failpolicy.SharedState, error) {
	v, err := streakFailScript.Run(ctx, s.c.rdb, []string{s.key}, f.Code, f.Class, f.Source, limit).Result()
	if err != nil {
		return failpolicy.SharedState{}, err
	}
	return sharedState(v)
}

// Succeed implements failpolicy.SharedStreak.
func (s *Streak) Succeed(ctx context.Context, source string) (failpolicy.SharedState, error) {
	v, err := streakSucceedScript.Run(ctx, s.c.rdb, []string{s.key}, source, failpolicy.ClassRecord,
		failpolicy.ClassInfrastructure, failpolicy.ClassUnknown).Result()
	if err != nil {
		return failpolicy.SharedState{}, err
	}
	return sharedState(v)
}

// Resume implements failpolicy.SharedStreak.
func (s *Streak) Resume(ctx context.Context, class string) ([]failpolicy.Failure, failpolicy.SharedState, error) {
	v, err := streakResumeScript.Run(ctx, s.c.rdb, []string{s.key}, class).Slice()
	if err != nil {
		return nil, failpolicy.SharedState{}, err
	}
	if len(v) != 2 {
		return nil, failpolicy.SharedState{}, fmt.Errorf("unexpected reply of the streak's resume: %v", v)
	}
	pairs, _ := v[0].([]any)
	var cleared []failpolicy.Failure
	for i := 0; i+1 < len(pairs); i += 2 {
		class, _ := pairs[i].(string)
		value, _ := pairs[i+1].(string)
		cleared = append(cleared, haltOf(class, value))
	}
	st, err := sharedState(v[1])
	return cleared, st, err
}

// Load implements failpolicy.SharedStreak.
func (s *Streak) Load(ctx context.Context) (failpolicy.SharedState, error) {
	m, err := s.c.rdb.HGetAll(ctx, s.key).Result()
	if err != nil {
		return failpolicy.SharedState{}, err
	}
	return stateOf(m), nil
}

// sharedState decodes the reply of HGETALL inside a script (a flat list of
// fields and values).
func sharedState(v any) (failpolicy.SharedState, error) {
	flat, ok := v.([]any)
	if !ok || len(flat)%2 != 0 {
		return failpolicy.SharedState{}, fmt.Errorf("unexpected reply of a streak script: %v", v)
	}
	m := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		k, _ := flat[i].(string)
		val, _ := flat[i+1].(string)
		m[k] = val
	}
	return stateOf(m), nil
}

// stateOf decodes the streak's hash.
func stateOf(m map[string]string) failpolicy.SharedState {
	st := failpolicy.SharedState{Halts: map[string]failpolicy.Failure{}}
	if code := m["code"]; code != "" {
		st.Run = failpolicy.Failure{Code: code, Class: m["class"], Source: m["source"]}
		st.N, _ = strconv.Atoi(m["n"])
	}
	st.Resumes, _ = strconv.ParseInt(m["resumes"], 10, 64)
	for k, v := range m {
		if class, ok := strings.CutPrefix(k, "halt:"); ok {
			st.Halts[class] = haltOf(class, v)
		}
	}
	return st
}

// haltOf decodes a halt's value, "<code>|<source>".
func haltOf(class, value string) failpolicy.Failure {
	code, source, _ := strings.Cut(value, "|")
	return failpolicy.Failure{Code: code, Class: class, Source: source}
}
