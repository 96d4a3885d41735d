package httpapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFraming: framing finds the request whose head has both
// Content-Length and Transfer-Encoding among the requests of a connection,
// however the bytes arrive, and only that one.
func TestFraming(t *testing.T) {
	t.Parallel()
	const (
		get      = "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n"
		post     = "POST /v1/events HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
		chunked  = "POST /v1/events HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"
		both     = "POST /v1/events HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
		bothCase = "POST /v1/events HTTP/1.1\r\ntransfer-encoding: chunked\r\nhost: h\r\ncontent-length: 4\r\n\r\n0\r\n\r\n"
		// A body that looks like a head with both headers is a body.
		lookalike = "POST /v1/events HTTP/1.1\r\nHost: h\r\nContent-Length: 65\r\n\r\n" +
			"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
		chunkedLookalike = "POST /v1/events HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"41\r\nGET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n0\r\n\r\n"
	)
	require.Len(t, "GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 65)
	for _, tc := range []struct {
		name     string
		stream   string
		smuggled int // the request that had both (0: none)
		heads    int
	}{
		{"Get", get + get, 0, 2},
		{"ContentLength", post + get, 0, 2},
		{"Chunked", chunked + get, 0, 2},
		{"Both", both, 1, 1},
		{"BothAnyCase", bothCase, 1, 1},
		{"BothAfterOthers", get + post + chunked + both + get, 4, 4},
		{"LeadingEmptyLines", "\r\n\r\n" + post + both, 2, 2},
		{"BareLF", "GET / HTTP/1.1\nHost: h\n\n" + strings.ReplaceAll(both, "\r\n", "\n"), 2, 2},
		{"LookalikeInABody", lookalike + get, 0, 2},
		{"LookalikeInAChunk", chunkedLookalike + get, 0, 2},
		{"LongHeader", "GET / HTTP/1.1\r\nX-Long: " + strings.Repeat("x", 5000) + "\r\nContent-Length: 2\r\n\r\nab" + both, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{1, 2, 3, 7, 64, len(tc.stream)} {
				f := &framing{}
				for s := tc.stream; len(s) > 0; {
					n := min(size, len(s))
					f.feed([]byte(s[:n]))
					s = s[n:]
				}
				require.Equal(t, tc.heads, f.heads, "heads, read %d bytes at a time", size)
				for n := 1; n <= tc.heads; n++ {
					require.Equal(t, tc.smuggled != 0 && n >= tc.smuggled, f.smuggled(n), "request %d, read %d bytes at a time", n, size)
				}
			}
		})
	}
}
