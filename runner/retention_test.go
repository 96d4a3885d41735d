package runner

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEventRetentionByKeyFlags: --event-retention-type and
// --event-retention-source take KEY=DURATION pairs, repeated or separated
// by commas; a pair without a key or a duration, a duration Go cannot
// read, a negative one or a key given twice is a usage error at start.
func TestEventRetentionByKeyFlags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		args  []string
		wants []string
	}{
		{"NoDuration", nil, []string{"dispatch", "--store", "mongodb://h", "--event-retention-type", "audit"}, []string{"event-retention-type", "KEY=DURATION"}},
		{"NoKey", nil, []string{"migrate", "--store", "mongodb://h", "--event-retention-source", "=1h"}, []string{"event-retention-source", "KEY=DURATION"}},
		{"BadDuration", nil, []string{"dispatch", "--store", "mongodb://h", "--event-retention-type", "audit=soon"}, []string{"event-retention-type", "audit", "soon"}},
		{"Negative", nil, []string{"dev", "--event-retention-type", "audit=-1h"}, []string{"event-retention-type", "audit", "must not be negative"}},
		{"TypeTwice", nil, []string{"dispatch", "--store", "mongodb://h", "--event-retention-type", "audit=1h", "--event-retention-type", "audit=2h"}, []string{"event-retention-type", "audit is given twice"}},
		{"SourceTwiceFromEnv", map[string]string{"OUTBOXD_EVENT_RETENTION_SOURCE": "plant-a=2h,plant-a=3h"}, []string{"dispatch", "--store", "mongodb://h"}, []string{"event-retention-source", "plant-a is given twice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCLI(t, tc.env, tc.args...)
			require.Equal(t, ExitUsage, code, out)
			for _, w := range tc.wants {
				require.Contains(t, out, w)
			}
		})
	}

	r, _, ok := lookupRole([]string{"dispatch"})
	require.True(t, ok)
	fs, o := newFlagSet(r)
	require.NoError(t, fs.Parse([]string{"--event-retention-type", "audit=720h, reading=24h", "--event-retention-type", "alarm=0", "--event-retention-source", "plant-a=48h"}))
	require.Equal(t, retentions{"audit": 720 * time.Hour, "reading": 24 * time.Hour, "alarm": 0}, o.eventRetentionTypes)
	require.Equal(t, retentions{"plant-a": 48 * time.Hour}, o.eventRetentionSources)
	require.Equal(t, "alarm=0s,audit=720h0m0s,reading=24h0m0s", o.eventRetentionTypes.String())
}

// TestTTLEventRetention: migrate's TTL index of synced originals is
// --event-retention's alone, the longest of all retentions with ones by
// type or source, and none when any of them keeps originals forever.
func TestTTLEventRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		global         time.Duration
		types, sources retentions
		want           time.Duration
	}{
		{global: 24 * time.Hour, want: 24 * time.Hour},
		{global: 24 * time.Hour, types: retentions{"audit": 720 * time.Hour, "short": time.Hour}, want: 720 * time.Hour},
		{global: 24 * time.Hour, sources: retentions{"a": 48 * time.Hour}, want: 48 * time.Hour},
		{global: 24 * time.Hour, types: retentions{"audit": 0}, want: 0},
		{global: 0, types: retentions{"short": time.Hour}, want: 0},
		{global: 0, want: 0},
	} {
		o := &options{eventRetention: tc.global, eventRetentionTypes: tc.types, eventRetentionSources: tc.sources}
		require.Equal(t, tc.want, o.ttlEventRetention(), "%s %v %v", tc.global, tc.types, tc.sources)
	}
}
