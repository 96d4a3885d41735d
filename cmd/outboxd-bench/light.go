package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The light-load stage: single events paced at a few hundred a second into
// `outboxd dev`, the load most deployments see most of the time, where what
// counts is the CPU each event costs, not the rate.
const (
	stageLight = "light"
	// lightRateDefault is the offered rate (BENCH_LIGHT_RATES lists others).
	lightRateDefault = 500
	// lightForDefault is how long the events are offered (BENCH_LIGHT_FOR).
	lightForDefault = 10 * time.Second
	// lightSenders keeps the pace while some requests wait.
	lightSenders = 16
)

// lightLoad is the light stage's settings, from the environment.
type lightLoad struct {
	rates []int
	dur   time.Duration
}

// parseLight reads BENCH_LIGHT_RATES ("100,500,2000"; default 500) and
// BENCH_LIGHT_FOR (default 10s).
func parseLight() (lightLoad, error) {
	l := lightLoad{dur: lightForDefault}
	for f := range strings.SplitSeq(os.Getenv("BENCH_LIGHT_RATES"), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 20_000 {
			return l, fmt.Errorf("BENCH_LIGHT_RATES must list rates between 1 and 20000 events/s, like 100,500,2000 (got %q)", os.Getenv("BENCH_LIGHT_RATES"))
		}
		l.rates = append(l.rates, n)
	}
	if len(l.rates) == 0 {
		l.rates = []int{lightRateDefault}
	}
	if v := os.Getenv("BENCH_LIGHT_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return l, fmt.Errorf("BENCH_LIGHT_FOR must be a duration of at least 1s (got %q)", v)
		}
		l.dur = d
	}
	return l, nil
}

// lightName is the stage's name at rate: light-500.
func lightName(rate int) string { return stageLight + "-" + strconv.Itoa(rate) }

// pacedSingles offers single events of source at rate for dur.
func pacedSingles(c *client, source string, rate int, dur time.Duration) (drive, int) {
	n := max(1, int(float64(rate)*dur.Seconds()))
	return drive{clients: lightSenders, calls: n, pace: time.Second / time.Duration(rate), do: func(ctx context.Context, i int) (int, error) {
		_, err := c.postEvent(ctx, source, i)
		return 1, err
	}}, n
}

// light runs the light stage at each rate: `outboxd dev` on a fresh file,
// single events paced at the rate, timed from the first request until every
// one is synced; the figure is the CPU per event (the process's above all).
func (b *bench) light(ctx context.Context) error {
	ll, err := parseLight()
	if err != nil {
		return err
	}
	for _, rate := range ll.rates {
		name := lightName(rate)
		p, path, stream, group, err := b.startDev(ctx, name, strings.Fields(os.Getenv("BENCH_LIGHT_FLAGS"))...)
		if err != nil {
			return err
		}
		d, n := pacedSingles(newClient(p.url(""), "", lightSenders), name, rate, ll.dur)
		err = b.driveStage(ctx, p, Stage{Name: name, Events: n}, d,
			func(ctx context.Context) error { return b.waitSynced(ctx, name, path, stream, group, n, p) }, nil)
		if err != nil {
			return err
		}
	}
	return nil
}
