package httpapi

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/raceflag"
)

// TestCheckNames: nil for a body whose member names are exact and unique,
// the offending member for one that is not, errSyntax for what is not
// JSON.
func TestCheckNames(t *testing.T) {
	t.Parallel()
	const ev = `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`
	tests := []struct {
		name  string
		body  string
		shape shape
		want  string // "": nil; "syntax": errSyntax; else the field named
	}{
		{"Event", ev, shapeEvent, ""},
		{"EveryField", `{"idempotencyKey":"k","sourceKey":"s","deviceKey":"d","occurredAt":"t","type":"x","payload":{"a":[1,-2.5e+3,true,false,null,"\"\\\/\b\f\n\r\t\u00e9"]}}`, shapeEvent, ""},
		{"EmptyObject", `{}`, shapeEvent, ""},
		{"WhitespaceEverywhere", " {\n\t\"sourceKey\" : \"s\" ,\r\n \"payload\" : { \"a\" : [ 1 , 2 ] } } ", shapeEvent, ""},
		{"AnyValueTypeIsTheDecodersBusiness", `{"sourceKey":{"SOURCEKEY":1,"x":1,"x":2},"payload":7}`, shapeEvent, ""},
		{"Unknown", `{"colour":1}`, shapeEvent, "colour"},
		{"CaseVariant", `{"occurredat":1}`, shapeEvent, "occurredat"},
		{"Duplicate", `{"type":"a","type":"b"}`, shapeEvent, "type"},
		{"EscapedDuplicate", `{"type":"a","\u0074ype":"b"}`, shapeEvent, "type"},
		{"PayloadDuplicate", `{"payload":{"a":1,"b":{"c":[{"d":1,"d":2}]}}}`, shapeEvent, "payload.b.c[0].d"},
		{"PayloadEscapedDuplicate", `{"payload":{"\u00e9":1,"é":2}}`, shapeEvent, "payload.é"},
		{"PayloadEmptyNameTwice", `{"payload":{"":1,"":2}}`, shapeEvent, "payload."},
		{"Batch", `{"events":[` + ev + `,` + ev + `]}`, shapeBatch, ""},
		{"BatchItemsNotObjects", `{"events":[1,"x",null,[{"x":1,"x":1}]]}`, shapeBatch, ""},
		{"BatchEventsNotArray", `{"events":{"x":1,"x":2}}`, shapeBatch, ""},
		{"BatchUnknown", `{"events":[],"more":1}`, shapeBatch, "more"},
		{"BatchItemUnknown", `{"events":[` + ev + `,{"sourcekey":"s"}]}`, shapeBatch, "events[1].sourcekey"},
		{"BatchItemPayloadDuplicate", `{"events":[{},{},{"payload":{"a":{"b":1,"b":1}}}]}`, shapeBatch, "events[2].payload.a.b"},
		{"ItemIndexResetAfterTheArray", `{"events":[{}],"events":[]}`, shapeBatch, "events"},
		{"Truncated", `{"sourceKey":"s"`, shapeEvent, "syntax"},
		{"TruncatedString", `{"sourceKey":"s`, shapeEvent, "syntax"},
		{"BadEscape", `{"sourceKey":"\x"}`, shapeEvent, "syntax"},
		{"ShortUnicodeEscape", `{"sourceKey":"\u12"}`, shapeEvent, "syntax"},
		{"ControlInString", "{\"sourceKey\":\"a\x01\"}", shapeEvent, "syntax"},
		{"LeadingZero", `{"payload":{"n":01}}`, shapeEvent, "syntax"},
		{"BareDot", `{"payload":{"n":1.}}`, shapeEvent, "syntax"},
		{"BareExponent", `{"payload":{"n":1e}}`, shapeEvent, "syntax"},
		{"Plus", `{"payload":{"n":+1}}`, shapeEvent, "syntax"},
		{"BadLiteral", `{"payload":{"n":nul}}`, shapeEvent, "syntax"},
		{"TrailingComma", `{"sourceKey":"s",}`, shapeEvent, "syntax"},
		{"MissingColon", `{"sourceKey" "s"}`, shapeEvent, "syntax"},
		{"UnquotedName", `{sourceKey:"s"}`, shapeEvent, "syntax"},
		{"TooDeep", `{"payload":` + strings.Repeat("[", maxNesting) + strings.Repeat("]", maxNesting) + `}`, shapeEvent, "syntax"},
		{"DeepButNotTooDeep", `{"payload":` + strings.Repeat("[", maxNesting-1) + strings.Repeat("]", maxNesting-1) + `}`, shapeEvent, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkNames([]byte(tt.body), tt.shape)
			var raw json.RawMessage
			jsonErr := json.Unmarshal([]byte(tt.body), &raw)
			switch tt.want {
			case "":
				require.NoError(t, err)
			case "syntax":
				require.ErrorIs(t, err, errSyntax)
				require.Error(t, jsonErr, "encoding/json must refuse it too")
			default:
				var re *requestError
				require.True(t, errors.As(err, &re), "got %v", err)
				require.Equal(t, tt.want, re.field)
				require.NotEmpty(t, re.reason)
				require.Contains(t, re.detail, tt.want)
			}
			if tt.want != "syntax" {
				require.NoError(t, jsonErr, "the case must be JSON")
			}
		})
	}
}

// TestCheckNamesAllocations: the check allocates nothing for the bodies of
// the hot path.
func TestCheckNamesAllocations(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("the race detector makes sync.Pool drop items, so the count is not the program's")
	}
	const ev = `{"idempotencyKey":"k-1","sourceKey":"plant-a","deviceKey":"sensor-17","occurredAt":"2026-11-01T10:00:00.123Z","type":"temp","payload":{"t":21.5,"n":3,"tags":["a","b"],"loc":{"lat":47.1,"lon":8.5}}}`
	batch := `{"events":[` + strings.Repeat(ev+",", 99) + ev + `]}`
	for _, tc := range []struct {
		body  string
		shape shape
	}{{ev, shapeEvent}, {batch, shapeBatch}} {
		body := []byte(tc.body)
		require.NoError(t, checkNames(body, tc.shape))
		allocs := testing.AllocsPerRun(100, func() { _ = checkNames(body, tc.shape) })
		require.Zero(t, allocs, "%s…", tc.body[:20])
	}
}

func BenchmarkDecodeBody(b *testing.B) {
	const ev = `{"idempotencyKey":"k-1","sourceKey":"plant-a","deviceKey":"sensor-17","occurredAt":"2026-11-01T10:00:00.123Z","type":"temp","payload":{"t":21.5,"n":3,"tags":["a","b"],"loc":{"lat":47.1,"lon":8.5}}}`
	body := []byte(ev)
	b.Run("CheckNames", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			_ = checkNames(body, shapeEvent)
		}
	})
	b.Run("DecodeBody", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			_, _ = decodeBody(body, shapeEvent, 1, 0)
		}
	})
}
