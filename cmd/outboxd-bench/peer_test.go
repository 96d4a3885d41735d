package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPeerPrintRatiosPerRound(t *testing.T) {
	t.Parallel()
	stage := func(name string, rate, process float64) Stage {
		return Stage{Name: name, EventsPerSecond: rate, CPU: &CPUPerEvent{Process: process, Machine: 2 * process}}
	}
	res := &PeerResults{Events: 1000, Singles: 250, Rounds: []PeerRound{
		{System: systemOutboxd, Round: 1, Stages: []Stage{stage(stageEndToEnd, 7000, 100)}, StreamEntries: 1000},
		{System: systemPeer, Round: 1, Stages: []Stage{stage(stageEndToEnd, 1000, 500)}, StreamEntries: 1002},
		{System: systemPeer, Round: 2, Stages: []Stage{stage(stageEndToEnd, 2000, 700)}, StreamEntries: 1000},
		{System: systemOutboxd, Round: 2, Stages: []Stage{stage(stageEndToEnd, 10000, 120)}, StreamEntries: 1000},
	}}
	var out bytes.Buffer
	res.Print(&out, lightLoad{})
	// Ratios are taken within a round (7 and 5), then their median.
	require.Contains(t, out.String(), "6.00× (5.00–7.00)")
	require.Contains(t, out.String(), "110 / 0 / 0 / 220")
	require.Contains(t, out.String(), "round 1, peer: the end-to-end stream holds 1002 entries for 1000 events (2 relayed twice)")
}

func TestParseLight(t *testing.T) {
	t.Setenv("BENCH_LIGHT_RATES", "100, 500,2000")
	t.Setenv("BENCH_LIGHT_FOR", "3s")
	l, err := parseLight()
	require.NoError(t, err)
	require.Equal(t, []int{100, 500, 2000}, l.rates)
	t.Setenv("BENCH_LIGHT_RATES", "fast")
	_, err = parseLight()
	require.ErrorContains(t, err, "BENCH_LIGHT_RATES")
	t.Setenv("BENCH_LIGHT_RATES", "")
	t.Setenv("BENCH_LIGHT_FOR", "1ms")
	_, err = parseLight()
	require.ErrorContains(t, err, "BENCH_LIGHT_FOR")
}

func TestSinceNeverNegative(t *testing.T) {
	t.Parallel()
	then := map[int]time.Duration{1: time.Second, 2: 3 * time.Second}
	now := map[int]time.Duration{1: 2 * time.Second, 3: time.Second} // 2 exited, 3 is new
	require.Equal(t, 2*time.Second, since(then, now))
}
