package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// eventBase is the occurredAt of event 0; event i occurred i seconds later.
var eventBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Batch is the events of one batch request, the largest outboxd accepts by
// default (--max-batch).
const batchEvents = 500

// appendEvent appends the JSON of event i of source: 100 devices, a small
// payload, the key derived from source, device and occurredAt (unique).
func appendEvent(b []byte, source string, i int) []byte {
	b = append(b, `{"sourceKey":"`...)
	b = append(b, source...)
	b = append(b, `","deviceKey":"d`...)
	b = strconv.AppendInt(b, int64(i%100), 10)
	b = append(b, `","occurredAt":"`...)
	b = eventBase.Add(time.Duration(i)*time.Second).AppendFormat(b, time.RFC3339)
	b = append(b, `","payload":{"t":21.5,"n":`...)
	b = strconv.AppendInt(b, int64(i%10), 10)
	return append(b, `}}`...)
}

// input returns event i of source as the writer takes it (the same event
// as appendEvent's).
func input(source string, i int) outbox.Input {
	return outbox.Input{
		SourceKey: source, DeviceKey: "d" + strconv.Itoa(i%100),
		OccurredAt: eventBase.Add(time.Duration(i) * time.Second).Format(time.RFC3339),
		Payload:    json.RawMessage(`{"t":21.5,"n":` + strconv.Itoa(i%10) + `}`),
	}
}

// batchBody returns the body of a batch request of events from…from+n-1.
func batchBody(source string, from, n int) []byte {
	b := append(make([]byte, 0, n*128), `{"events":[`...)
	for i := from; i < from+n; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = appendEvent(b, source, i)
	}
	return append(b, "]}"...)
}

// client posts to one outboxd.
type client struct {
	http  *http.Client
	base  string
	token string
}

func newClient(base, token string, conns int) *client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	return &client{http: &http.Client{Transport: tr, Timeout: time.Minute}, base: base, token: token}
}

// request sends a request (body nil: none) and returns the response body
// of a 2xx answer.
func (c *client) request(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(out))
	}
	return out, nil
}

// postBatch posts events from…from+n-1 of source as one batch.
func (c *client) postBatch(ctx context.Context, source string, from, n int) error {
	_, err := c.request(ctx, http.MethodPost, "/v1/events:batch", batchBody(source, from, n))
	return err
}

// postEvent posts event i of source alone and returns its id.
func (c *client) postEvent(ctx context.Context, source string, i int) (string, error) {
	out, err := c.request(ctx, http.MethodPost, "/v1/events", appendEvent(nil, source, i))
	if err != nil {
		return "", err
	}
	var res outbox.Result
	if err := json.Unmarshal(out, &res); err != nil {
		return "", fmt.Errorf("error decoding the answer to POST /v1/events: %w", err)
	}
	return res.ID, nil
}

// refused is singleClients posting, for d, single events the API refuses
// with 422 (no deviceKey): the whole request path (HTTP, decoding,
// validation, the answer) without the store.
func (c *client) refused(d time.Duration) drive {
	return drive{clients: singleClients, duration: d, do: func(ctx context.Context, i int) (int, error) {
		body := []byte(`{"sourceKey":"refused","occurredAt":"2026-01-01T00:00:00Z","payload":{"n":` + strconv.Itoa(i) + `}}`)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/events", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusUnprocessableEntity {
			return 0, fmt.Errorf("POST /v1/events without deviceKey: %s, not 422", resp.Status)
		}
		return 1, nil
	}}
}

// batches is batchClients posting n events of source in batches of
// batchEvents (n = 0: until the drive's duration passes).
func (c *client) batches(source string, n int) drive {
	return drive{clients: batchClients, calls: (n + batchEvents - 1) / batchEvents, do: func(ctx context.Context, i int) (int, error) {
		k := batchEvents
		if n > 0 {
			k = min(batchEvents, n-i*batchEvents)
		}
		return k, c.postBatch(ctx, source, i*batchEvents, k)
	}}
}

// singles is singleClients posting n events of source one by one (n = 0:
// until the drive's duration passes).
func (c *client) singles(source string, n int) drive {
	return drive{clients: singleClients, calls: n, do: func(ctx context.Context, i int) (int, error) {
		_, err := c.postEvent(ctx, source, i)
		return 1, err
	}}
}

// drive is a closed-loop load: clients goroutines call do for i = 0, 1, …
// (each i once), each call after the last one of its goroutine returns.
type drive struct {
	clients int
	// calls is how many calls to make; 0: until the duration passes.
	calls    int
	duration time.Duration
	// pace, when set, starts call i no earlier than start + i·pace (an
	// open-loop offered rate, as long as enough clients are free).
	pace time.Duration
	// window, when set, counts the events accepted per window of time.
	window time.Duration
	// do makes call i and returns how many events it got accepted.
	do func(ctx context.Context, i int) (int, error)
}

// driven is what a drive measured.
type driven struct {
	elapsed time.Duration
	events  int
	// latencies holds the duration of every call.
	latencies []time.Duration
	// windows holds the events accepted in each window.
	windows []int
}

// run drives the load and stops at the first error.
func (d *drive) run(ctx context.Context) (driven, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var events atomic.Int64
	var windows sync.Map // window index → *atomic.Int64
	var (
		mu       sync.Mutex
		firstErr error
		lat      []time.Duration
	)
	start := time.Now()
	deadline := start.Add(d.duration)
	var wg sync.WaitGroup
	for range d.clients {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if d.calls > 0 && i >= d.calls {
					return
				}
				if d.pace > 0 {
					if !sleepUntil(ctx, start.Add(time.Duration(i)*d.pace)) {
						return
					}
				}
				if d.calls == 0 && time.Now().After(deadline) {
					return
				}
				began := time.Now()
				n, err := d.do(ctx, i)
				if err != nil {
					mu.Lock()
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				done := time.Now()
				mine = append(mine, done.Sub(began))
				events.Add(int64(n))
				if d.window > 0 {
					c, _ := windows.LoadOrStore(int(done.Sub(start)/d.window), new(atomic.Int64))
					c.(*atomic.Int64).Add(int64(n))
				}
			}
		})
	}
	wg.Wait()
	out := driven{elapsed: time.Since(start), events: int(events.Load()), latencies: lat}
	if d.window > 0 {
		out.windows = make([]int, int(out.elapsed/d.window)+1)
		windows.Range(func(k, v any) bool {
			if i := k.(int); i < len(out.windows) {
				out.windows[i] = int(v.(*atomic.Int64).Load())
			}
			return true
		})
	}
	return out, firstErr
}

// sleepUntil waits until t (pacing, not synchronisation) and reports false
// when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
