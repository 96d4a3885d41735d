package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

func TestParseFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v, store string
		want     string // joined, or the error's text
		err      bool
	}{
		{"", soakStoreSQLite, strings.Join(allFaults, ","), false},
		{"all", soakStoreSQLite, strings.Join(allFaults, ","), false},
		{"all,-redis-oom", soakStoreSQLite, "kill,stop,redis-restart,redis-stop,pg-drop,pg-delay,pg-stall,sqlite-lock", false},
		{"pg-stall, kill", soakStoreSQLite, "kill,pg-stall", false},
		{"all", soakStoreLungo, "stop,redis-restart,redis-oom,redis-stop,pg-drop,pg-delay,pg-stall", false},
		{"all", soakStoreMongo, "kill,stop,redis-restart,redis-oom,redis-stop,pg-drop,pg-delay,pg-stall", false},
		{"kill", soakStoreLungo, "SOAK_FAULTS: kill does not apply to SOAK_STORE=lungo", true},
		{"nap", soakStoreSQLite, `SOAK_FAULTS: unknown fault "nap"`, true},
		{"kill,-kill", soakStoreSQLite, "leaves no fault", true},
	} {
		got, err := parseFaults(tc.v, tc.store)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseFaults(%q, %s): want an error with %q, got %v", tc.v, tc.store, tc.want, err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("parseFaults(%q, %s) = %v, %v; want %s", tc.v, tc.store, got, err, tc.want)
		}
	}
}

// TestOccurredAt: however long a soak runs, its events occurred within the
// window before it started (ingest refuses an occurredAt more than a day
// ahead), over many days.
func TestOccurredAt(t *testing.T) {
	t.Parallel()
	started := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	base := started.Truncate(24*time.Hour).AddDate(0, 0, -soakDays-1)
	days := map[string]bool{}
	for _, seq := range []int{0, 1, 100, 10_000, 1_000_000, 50_000_000} {
		for c := range soakClients {
			at, err := time.Parse(time.RFC3339, occurredAt(base, c, seq))
			if err != nil {
				t.Fatal(err)
			}
			if at.Before(base) || !at.Before(started) {
				t.Errorf("event %d of client %d occurred at %s, outside [%s, %s)", seq, c, at, base, started)
			}
			days[at.Format(time.DateOnly)] = true
		}
	}
	if len(days) < 4 {
		t.Errorf("events of %d days only", len(days))
	}
}

// TestPendingDetail: a soak that does not converge names the entries left
// pending, with their consumer.
func TestPendingDetail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testkit.NewRedis(t)
	keys := stream.NewKeys(prefix+":stream", "g")
	require.Empty(t, pendingDetail(ctx, rdb, keys), "no group: nothing to say")
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(), Values: map[string]any{"k": "v"}}).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.XGroupCreate(ctx, keys.Stream(), keys.Group(), "0").Err())
	require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group(), Consumer: "c7", Streams: []string{keys.Stream(), ">"}, Block: -1}).Err())
	got := pendingDetail(ctx, rdb, keys)
	require.Contains(t, got, "pending "+keys.Stream()+" "+id+" to c7")
	require.Contains(t, got, "delivered 1 times")
}
