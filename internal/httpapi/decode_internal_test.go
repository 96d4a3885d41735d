package httpapi

import (
	"errors"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/raceflag"
	"github.com/outboxd/outboxd/outbox"
)

// TestDecodeRequest classifies bodies the way the handler answers them: nil
// (accepted), 400 (*requestError) or 422 (*validationError) naming fields.
func TestDecodeRequest(t *testing.T) {
	t.Parallel()
	w := outbox.NewWriter(nil, &outbox.WriterConfig{Now: func() time.Time { return time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) }})
	const ok = `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`
	tests := []struct {
		name   string
		body   string
		key    string
		batch  bool
		status int // 0: accepted
		fields []string
	}{
		{name: "Valid", body: ok},
		{name: "ValidWithHeaderKey", body: ok, key: "k"},
		{name: "NullPayload", body: `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":null}`},
		{name: "WhitespaceAround", body: " \n" + ok + "\r\n\t"},
		{name: "BOM", body: "\ufeff" + ok, status: 400},
		{name: "Null", body: `null`, status: 400},
		{name: "Truncated", body: ok[:20], status: 400},
		{name: "TwoObjects", body: ok + ok, status: 400},
		{name: "UnknownField", body: `{"x":1}`, status: 400},
		{name: "InvalidUTF8InString", body: "{\"sourceKey\":\"\xc3\"}", status: 400},
		{name: "HeaderKeyInvalid", body: ok, key: "k\x01", status: 422, fields: []string{IdempotencyKeyHeader}},
		{name: "AllMissing", body: `{}`, status: 422, fields: []string{"sourceKey", "deviceKey", "occurredAt"}},
		{name: "FutureOccurredAt", body: `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-04T00:00:00Z"}`, status: 422, fields: []string{"occurredAt"}},
		{name: "BatchValid", body: `{"events":[` + ok + `,` + ok + `]}`, batch: true},
		{name: "BatchItemsNamed", body: `{"events":[` + ok + `,{"sourceKey":"s","deviceKey":"d"}]}`, batch: true, status: 422, fields: []string{"events[1].occurredAt"}},
		{name: "BatchNullItem", body: `{"events":[null]}`, batch: true, status: 422, fields: []string{"events[0]"}},
		{name: "BatchTooMany", body: `{"events":[` + ok + `,` + ok + `,` + ok + `,` + ok + `,` + ok + `]}`, batch: true, status: 422, fields: []string{"events"}},
		{name: "BatchNotObject", body: `[` + ok + `]`, batch: true, status: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inputs, err := decodeRequest(w, []byte(tt.body), tt.key, tt.batch)
			var (
				re *requestError
				ve *validationError
			)
			switch tt.status {
			case 0:
				require.NoError(t, err)
				require.NotEmpty(t, inputs)
				if tt.key != "" {
					require.Equal(t, tt.key, inputs[0].IdempotencyKey)
				}
			case 400:
				require.True(t, errors.As(err, &re), "got %v", err)
			case 422:
				require.True(t, errors.As(err, &ve), "got %v", err)
				var got []string
				for _, f := range ve.Fields {
					got = append(got, f.Field)
				}
				require.Equal(t, tt.fields, got)
			}
		})
	}
}

// TestReadAll: a body is read into one buffer of its declared size, and a
// failed read returns nothing (io.ReadAll copies what it read first).
func TestReadAll(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		name   string
		body   string
		length int64
	}{
		{"Empty", "", 0},
		{"Small", "{}", 2},
		{"FirstReadSize", strings.Repeat("x", 511), 511},
		{"Large", big, int64(len(big))},
		{"LargeWithoutLength", big, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(iotest.HalfReader(strings.NewReader(tc.body)), tc.length)
			require.NoError(t, err)
			require.Equal(t, tc.body, string(got))
			if tc.length >= 0 {
				// Rounded up to the allocator's size class (pages above 32 KiB).
				require.LessOrEqual(t, cap(got), max(512, len(tc.body)+1+8<<10), "one buffer of the declared size")
			}
		})
	}
	_, err := readAll(iotest.TimeoutReader(strings.NewReader(big)), int64(len(big)))
	require.ErrorIs(t, err, iotest.ErrTimeout)
}

// TestReadAllAllocations: a body of known length costs the first read's
// buffer and its own.
func TestReadAllAllocations(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("the race detector allocates too")
	}
	big := strings.Repeat("x", 100<<10)
	r := strings.NewReader(big)
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(big)
		_, _ = readAll(r, int64(len(big)))
	})
	require.LessOrEqual(t, allocs, 2.0)
}
