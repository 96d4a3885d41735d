package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// soakDays is how many days back a client's events occurred: event n of a
// client occurred n × 17 minutes after the start of that window, modulo
// it, so the statistics of many days grow at once and no occurredAt lies
// in the future however long the soak runs (ingest refuses one more than a
// day ahead).
const soakDays = 120

// occurredAt returns the occurredAt of event seq of client c.
func occurredAt(base time.Time, c, seq int) string {
	minutes := (int64(seq) * 17) % (soakDays * 24 * 60)
	return base.Add(time.Duration(minutes)*time.Minute + time.Duration(c)*time.Second).Format(time.RFC3339)
}

// soakEvent is one event a soak client sends, with its key.
type soakEvent struct {
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	SourceKey      string          `json:"sourceKey"`
	DeviceKey      string          `json:"deviceKey"`
	OccurredAt     string          `json:"occurredAt"`
	Payload        json.RawMessage `json:"payload"`
}

// client posts events until deadline, single events and batches of 2 to
// 20, each request retried with the same keys and content (to either
// ingest) until it is answered 2xx or retryUntil passes.
func (s *soak) client(ctx context.Context, c int, deadline, retryUntil time.Time) {
	rng := rand.New(rand.NewPCG(s.seed, uint64(c)+1))
	hc := &http.Client{Timeout: 10 * time.Second}
	ids := map[string]string{}
	base := s.started.UTC().Truncate(24*time.Hour).AddDate(0, 0, -soakDays-1)
	for seq := 0; time.Now().Before(deadline) && ctx.Err() == nil; {
		n := 1
		if rng.IntN(10) < 3 {
			n = 2 + rng.IntN(19)
		}
		events := make([]soakEvent, n)
		for i := range events {
			events[i] = soakEvent{
				IdempotencyKey: fmt.Sprintf("soak-%d-%d", c, seq),
				SourceKey:      fmt.Sprintf("src-%d", c%2),
				DeviceKey:      fmt.Sprintf("dev-%d", rng.IntN(8)),
				OccurredAt:     occurredAt(base, c, seq),
				Payload:        json.RawMessage(fmt.Sprintf(`{"c":%d,"n":%d}`, c, seq)),
			}
			seq++
		}
		s.post(ctx, hc, rng, c, events, ids, retryUntil)
		pause := time.NewTimer(time.Duration(10+rng.IntN(30)) * time.Millisecond)
		select {
		case <-ctx.Done():
			pause.Stop()
			return
		case <-pause.C:
		}
	}
}

// post sends events (one: POST /v1/events with the Idempotency-Key header;
// more: a batch) until an answer is 2xx, and checks that every key is
// always answered with the same id.
func (s *soak) post(ctx context.Context, hc *http.Client, rng *rand.Rand, c int, events []soakEvent, ids map[string]string, retryUntil time.Time) {
	keys := make([]string, len(events))
	for i, ev := range events {
		keys[i] = ev.IdempotencyKey
		s.sent.Store(ev.IdempotencyKey, true)
	}
	path, body := "/v1/events", []byte(nil)
	if len(events) == 1 {
		single := events[0]
		single.IdempotencyKey = ""
		body, _ = json.Marshal(single)
	} else {
		path = "/v1/events:batch"
		body, _ = json.Marshal(map[string]any{"events": events})
	}
	backoff := 50 * time.Millisecond
	for attempt := 1; ctx.Err() == nil && time.Now().Before(retryUntil); attempt++ {
		urls := s.ingestURLs()
		if len(urls) > 0 {
			target := urls[rng.IntN(len(urls))]
			began := time.Now()
			status, answer, err := send(ctx, hc, target+path, keys[0], len(events) == 1, body)
			rec := map[string]any{"op": "request", "client": c, "attempt": attempt, "target": target, "keys": keys,
				"ms": time.Since(began).Milliseconds(), "status": status}
			if err != nil {
				rec["err"] = err.Error()
			} else {
				rec["answer"] = json.RawMessage(bytes.TrimSpace(answer))
			}
			s.hist.record(rec)
			switch {
			case err == nil && status/100 == 2:
				s.acknowledge(c, keys, answer, len(events) == 1, ids)
				return
			case err == nil && status/100 == 4 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
				s.reject(fmt.Sprintf("client %d: %s %s answered %d: %s", c, "POST", path, status, bytes.TrimSpace(answer)))
				return
			}
		}
		wait := time.NewTimer(backoff/2 + time.Duration(rng.Int64N(int64(backoff))))
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// send posts body and returns the status and the answer's body.
func send(ctx context.Context, hc *http.Client, url, key string, single bool, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if single {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out, err
}

// acknowledge records the keys of a 2xx answer as accepted, and a
// violation when a key is answered with another id than before.
func (s *soak) acknowledge(c int, keys []string, answer []byte, single bool, ids map[string]string) {
	var results []outbox.Result
	if single {
		var r outbox.Result
		if err := json.Unmarshal(answer, &r); err == nil {
			results = []outbox.Result{r}
		}
	} else {
		var b struct {
			Results []outbox.Result `json:"results"`
		}
		if err := json.Unmarshal(answer, &b); err == nil {
			results = b.Results
		}
	}
	if len(results) != len(keys) {
		s.reject(fmt.Sprintf("client %d: a 2xx answer with %d results for %d keys: %s", c, len(results), len(keys), answer))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range results {
		k := keys[i]
		if r.IdempotencyKey != k {
			s.rejectLocked(fmt.Sprintf("client %d: key %s answered for key %s", c, r.IdempotencyKey, k))
			continue
		}
		if prev, ok := ids[k]; ok && prev != r.ID {
			s.rejectLocked(fmt.Sprintf("client %d: key %s answered with id %s, earlier with %s", c, k, r.ID, prev))
		}
		ids[k] = r.ID
		if _, loaded := s.acked.LoadOrStore(k, true); !loaded {
			s.nAcked++
		}
	}
}

// rejectedKept is how many rejected answers a run reports in full (it
// counts them all).
const rejectedKept = 5

// reject records an answer no retry can change.
func (s *soak) reject(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectLocked(what)
}

// rejectLocked is reject with s.mu held.
func (s *soak) rejectLocked(what string) {
	s.nRejected++
	if len(s.rejected) < rejectedKept {
		s.rejected = append(s.rejected, what)
	}
}

// history is the run's record of every request, answer and fault, one
// JSON object per line, each with t: the seconds since the run began.
type history struct {
	mu      sync.Mutex
	f       *os.File
	w       *bufio.Writer
	started time.Time
}

func newHistory(path string, started time.Time) (*history, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &history{f: f, w: bufio.NewWriterSize(f, 64<<10), started: started}, nil
}

func (h *history) record(rec map[string]any) {
	rec["t"] = json.Number(strconv.FormatFloat(time.Since(h.started).Seconds(), 'f', 3, 64))
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, _ = h.w.Write(b)
	_ = h.w.WriteByte('\n')
}

func (h *history) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.w.Flush(); err != nil {
		return err
	}
	return h.f.Close()
}
