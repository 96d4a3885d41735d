package httpapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// batchBody is a POST /v1/events:batch body of n typical events.
func batchBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"events":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"idempotencyKey":"k-%d","sourceKey":"plant-a","deviceKey":"sensor-%d","occurredAt":"2026-11-01T10:00:00.123Z","type":"temp","payload":{"t":21.5,"n":%d,"tags":["a","b"],"loc":{"lat":47.1,"lon":8.5},"note":"ok \u00e9"}}`, i, i%17, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkDecodeBatch is the CPU and memory the batch endpoint spends on
// decoding and validating a body of 100 events (per body; divide by 100 for
// per event).
func BenchmarkDecodeBatch(b *testing.B) {
	w := outbox.NewWriter(nil, &outbox.WriterConfig{Now: func() time.Time { return time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) }})
	body := batchBody(100)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := decodeBatch(w, body, MaxBatchDefault, decodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeNumbers is one event whose payload is an array of many
// small numbers, the worst case for memory per byte.
func BenchmarkDecodeNumbers(b *testing.B) {
	w := outbox.NewWriter(nil, &outbox.WriterConfig{Now: func() time.Time { return time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) }})
	body := numbersBody(1 << 20)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := decodeEvent(w, body, "", decodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeFloats is one event whose payload is an array of many
// short decimals (1.5), the worst case for the CPU of the number rules.
func BenchmarkDecodeFloats(b *testing.B) {
	w := outbox.NewWriter(nil, &outbox.WriterConfig{Now: func() time.Time { return time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) }})
	body := numbersBody(1<<20, ",1.5")
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := decodeEvent(w, body, "", decodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// numbersBody is an event of about size bytes whose payload is an array of
// numbers: 0 followed by each (",1" by default).
func numbersBody(size int, each ...string) []byte {
	next := ",1"
	if len(each) > 0 {
		next = each[0]
	}
	var b strings.Builder
	b.WriteString(`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"v":[0`)
	for b.Len() < size-len(next)-3 {
		b.WriteString(next)
	}
	b.WriteString(`]}}`)
	return []byte(b.String())
}
