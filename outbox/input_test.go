package outbox_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
)

// TestParseTime follows RFC 3339 section 5.6 in both directions.
func TestParseTime(t *testing.T) {
	t.Parallel()
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return v.UTC()
	}
	for _, tc := range []struct {
		in   string
		want time.Time // zero: refused
	}{
		{"2026-11-01T10:00:00Z", utc("2026-11-01T10:00:00Z")},
		{"2026-11-01t10:00:00z", utc("2026-11-01T10:00:00Z")},
		{"2026-11-01T10:00:00.5+01:00", utc("2026-11-01T09:00:00.5Z")},
		{"2026-11-01T10:00:00.123456789123-00:00", utc("2026-11-01T10:00:00.123456789Z")},
		{"2026-11-01T10:00:00+23:59", utc("2026-10-31T10:01:00Z")},
		{"2024-02-29T00:00:00Z", utc("2024-02-29T00:00:00Z")},
		{"2016-12-31T23:59:60Z", utc("2016-12-31T23:59:59.999999999Z")},
		{"2017-01-01T00:59:60+01:00", utc("2016-12-31T23:59:59.999999999Z")},
		{"1990-12-31T15:59:60-08:00", utc("1990-12-31T23:59:59.999999999Z")},
		{"1985-04-12T23:20:50.52Z", utc("1985-04-12T23:20:50.52Z")},
		{"1937-01-01T12:00:27.87+00:20", utc("1937-01-01T11:40:27.87Z")},
		{"2000-02-29T00:00:00Z", utc("2000-02-29T00:00:00Z")},
		{"1900-02-29T00:00:00Z", time.Time{}},
		{"2026-11-01T10:00:00-24:00", time.Time{}},
		{"2026-11-01T10:00:00+1:00", time.Time{}},
		{"2026-11-01T10:00:00+01", time.Time{}},
		{"2026-11-01T10:00Z", time.Time{}},
		{"2026-11-01T10:00:00,5Z", time.Time{}},
		{"2026-11-01T10:00:00.5", time.Time{}},
		{"2026-11-01", time.Time{}},
		{"２０２６-11-01T10:00:00Z", time.Time{}},
		{"", time.Time{}},
		{"2026-11-01T10:00:00+24:00", time.Time{}},
		{"2026-11-01T10:00:00+01:60", time.Time{}},
		{"2026-11-01T10:00:60Z", time.Time{}},
		{"2026-11-01T24:00:00Z", time.Time{}},
		{"2026-13-01T10:00:00Z", time.Time{}},
		{"2026-02-29T10:00:00Z", time.Time{}},
		{"2026-04-31T10:00:00Z", time.Time{}},
		{"2026-11-01 10:00:00Z", time.Time{}},
		{"2026-11-01T10:00:00", time.Time{}},
		{"2026-11-01T10:00:00.Z", time.Time{}},
		{"2026-11-1T10:00:00Z", time.Time{}},
		{"2026-11-01T10:00:00Z ", time.Time{}},
		{"2026-11-01T10:00:00+0100", time.Time{}},
		{"+2026-11-01T10:00:00Z", time.Time{}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := outbox.ParseTime(tc.in)
			if tc.want.IsZero() {
				require.Error(t, err, "got %s", got)
				return
			}
			require.NoError(t, err)
			require.True(t, tc.want.Equal(got), "want %s, got %s", tc.want, got)
		})
	}
}

func TestKeyProblem(t *testing.T) {
	t.Parallel()
	for key, ok := range map[string]bool{
		"plant-a":                  true,
		"Gerät 7 / Halle ü":        true,
		"センサー":                     true,
		"a b":                      true,
		"":                         false,
		"   ":                      false,
		"\t":                       false,
		"a\u202Eb":                 false, // bidirectional override
		"a\u200Bb":                 false, // zero-width space
		"a\uE000":                  false, // private use
		"a\u00A0b":                 false, // no-break space
		"a\x01":                    false,
		"a\u2028b":                 false, // line separator
		"\ufeffkey":                false, // byte order mark
		"a\u200db":                 false, // zero-width joiner
		"a\u0378":                  false, // unassigned
		"a\uffff":                  false, // noncharacter
		"e\u0301":                  true,  // combining mark
		" a ":                      true,
		strings.Repeat("k", 200):   true,
		strings.Repeat("k", 201):   false,
		string([]byte{0xff, 0x61}): false,
	} {
		require.Equal(t, ok, outbox.KeyProblem(key) == "", "%q: %s", key, outbox.KeyProblem(key))
	}
}

// TestPayloadRules checks what ingest refuses in a payload, naming the
// field: what no store or the read model can hold.
func TestPayloadRules(t *testing.T) {
	t.Parallel()
	w := outbox.NewWriter(nil, &outbox.WriterConfig{Now: func() time.Time { return time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) }})
	nested := func(n int, leaf string) string {
		return strings.Repeat(`{"a":`, n-1) + leaf + strings.Repeat(`}`, n-1)
	}
	for _, tc := range []struct {
		name    string
		payload string
		field   string // "" accepted
	}{
		{"Plain", `{"t":21.5}`, ""},
		{"ThirtyTwoObjectsScalarLeaf", nested(32, `{"x":1}`), ""},
		{"ThirtyTwoObjectsStringLeaf", nested(32, `{"x":"s"}`), ""},
		{"ThirtyThreeObjects", nested(33, `{"x":1}`), "payload" + strings.Repeat(".a", 32)},
		{"NulInString", `{"note":"a\u0000b"}`, "payload.note"},
		{"NulInArrayString", `{"l":["ok","x\u0000"]}`, "payload.l[1]"},
		{"NulInKey", `{"a\u0000":1}`, "payload"},
		{"DollarKey", `{"$set":1}`, "payload"},
		{"HugeNumber", `{"n":1e400}`, "payload.n"},
		{"IntegerBeyond64Bits", `{"n":123456789012345678901234567890}`, "payload.n"},
		{"IntegerJustBeyondInt64", `{"a":[{"n":9223372036854775808}]}`, "payload.a[0].n"},
		{"IntegerJustBelowInt64", `{"n":-9223372036854775809}`, "payload.n"},
		{"LargestInt64", `{"n":9223372036854775807,"m":-9223372036854775808}`, ""},
		{"BigNumberWithAnExponentIsAFloat", `{"n":1.2345678901234568e29}`, ""},
		{"DecimalBeyondFloat64Digits", `{"n":123456789012345678.5}`, "payload.n"},
		{"LongFraction", `{"a":[0.12345678901234567890123]}`, "payload.a[0]"},
		{"DecimalsThatFit", `{"a":0.1,"b":1e-7,"c":-2.50,"d":1.7976931348623157e308}`, ""},
		{"NotObject", `[1]`, "payload"},
		// PostgreSQL's numeric (jsonb's numbers) holds 131072 digits before
		// the point and 16383 after: beyond, the read model refuses the event.
		{"TinyNumberBeyondNumericScale", `{"a":[1,{"n":1e-20000}]}`, "payload.a[1].n"},
		{"ZeroAtTheSmallestNumericScale", `{"z":0e-16383}`, ""},
		// Within numeric's scale but below a 64-bit float's range: MongoDB
		// would read it back as 0.
		{"SmallestNumericScaleUnderflowsAFloat", `{"n":1e-16383}`, "payload.n"},
		{"OneDigitBeyondNumericScale", `{"n":1.0e-16383}`, "payload.n"},
		{"ZeroBeyondNumericScale", `{"n":0.0e-16383}`, "payload.n"},
		{"ZeroWithHugeExponent", `{"n":0e9999999999999}`, "payload.n"},
		{"HugeExponent", `{"n":1e200000}`, "payload.n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := w.Validate([]outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z", Payload: json.RawMessage(tc.payload)}})
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var ve *outbox.ValidationError
			require.ErrorAs(t, err, &ve, fmt.Sprint(err))
			require.Equal(t, tc.field, ve.Fields[0].Field)
		})
	}
}

// TestDeriveKey: a derived key is the prefix, the time and a hash, sorts by
// occurredAt, and the form up to 0.1.0 is still made byte for byte as then.
func TestDeriveKey(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 1, 10, 0, 0, 123456789, time.FixedZone("x", 3600))

	t.Run("Form", func(t *testing.T) {
		t.Parallel()
		k := outbox.DeriveKey("src", "d1", at)
		require.Len(t, k, 54)
		require.Equal(t, "derived:t"+fmt.Sprintf("%012x", at.UnixMilli())+"-7d35e4794b197e333daf61cc61c17ce8", k,
			"the time in milliseconds, then the first half of the hash of the form up to 0.1.0")
		require.Equal(t, k, outbox.DeriveKey("src", "d1", at.UTC().Truncate(time.Millisecond)), "UTC, milliseconds")
		require.NotEqual(t, k, outbox.DeriveKey("src", "d2", at))
		require.NotEqual(t, k, outbox.DeriveKey("src", "d1", at.Add(time.Millisecond)))
		require.Equal(t, "", outbox.KeyProblem(k))
	})

	t.Run("SortsByOccurredAt", func(t *testing.T) {
		t.Parallel()
		times := []time.Time{time.Unix(0, 0), time.Unix(0, 1e6), time.Unix(1, 0), at, at.Add(24 * time.Hour * 365 * 30)}
		for i := 1; i < len(times); i++ {
			for _, a := range []string{"a", "z"} {
				for _, b := range []string{"a", "z"} {
					require.Less(t, outbox.DeriveKey(a, a, times[i-1]), outbox.DeriveKey(b, b, times[i]),
						"an earlier occurredAt sorts first, whatever the source and device")
				}
			}
		}
	})

	t.Run("HashedFormOfEarlierVersions", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "derived:7d35e4794b197e333daf61cc61c17ce846261bf29920d9db1cedfbb9ab5c91af",
			outbox.HashedDerivedKey("src", "d1", at))
	})
}
