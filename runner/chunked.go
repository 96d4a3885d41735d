package runner

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outboxd/outboxd/internal/config"
)

// replay and verify work through a window one chunk (one request) at a
// time. This file holds what they share: the progress they show, the JSON
// line of each chunk, and the token that resumes an interrupted run.
//
// Resumption: after every chunk the command knows a token, printed with
// the chunk's JSON line and, when the run is interrupted (an error, a
// signal), on stderr with the command to continue it. `--resume TOKEN`
// starts after the last chunk that was answered, so no finished chunk runs
// twice (a chunk whose answer was lost runs again, which is safe: both
// actions are idempotent). The token is the state itself, not a key to a
// file: nothing is written on the operator's machine (a read-only
// container runs the command as well as a laptop), and any instance of the
// same pipeline can take up the run (the token names the command and its
// window, not --server). It carries a fingerprint of the arguments that
// decide what the command touches, so a token is refused, with exit 2,
// for another command or other arguments.

// resumeToken is what --resume carries.
type resumeToken struct {
	// Command is "replay" or "verify", Args how it was called (for the
	// error that refuses another command), Fingerprint the hash of the
	// arguments that decide what it touches.
	Command     string `json:"c"`
	Args        string `json:"a"`
	Fingerprint string `json:"f"`
	// After is the cursor after the last finished chunk, Chunks how many
	// chunks were finished.
	After  string `json:"n"`
	Chunks int    `json:"k"`
	// Totals are the command's running totals (replayTotals or
	// verifyTotals without the drift list).
	Totals json.RawMessage `json:"t"`
}

// encode returns the token as one word.
func (r resumeToken) encode() string {
	b, _ := json.Marshal(r) // plain fields: cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeResume reads a --resume token and checks that it belongs to the
// command with this fingerprint.
func decodeResume(token, command, args, fingerprint string) (*resumeToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(token))
	var r resumeToken
	if err != nil || json.Unmarshal(b, &r) != nil || r.Command == "" || r.After == "" {
		return nil, config.Invalid("resume", "is not a token that replay or verify printed")
	}
	if r.Command != command || r.Fingerprint != fingerprint {
		return nil, config.Invalid("resume", "continues another command (`outboxd %s`), not `outboxd %s`: run that one with it, or this one without --resume", r.Args, args)
	}
	return &r, nil
}

// fingerprint hashes the arguments that decide what a command touches.
func fingerprint(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// progress follows a chunked run: how many of how many are done, the rate
// of this run and the time left at that rate. On a terminal it keeps one
// line on stderr up to date.
type progress struct {
	w     io.Writer // the terminal, or nil: no line
	verb  string
	total int64 // -1 while not known
	done  int64
	// base is what an earlier, resumed run did; the rate counts this
	// run's part only.
	base  int64
	start time.Time
	now   func() time.Time
	shown bool
}

// Progress is the progress part of a chunk's JSON line.
type Progress struct {
	Done  int64  `json:"done"`
	Total *int64 `json:"total,omitempty"`
	// RatePerSecond is this run's rate; ETASeconds the time left at it
	// (absent until both are known).
	RatePerSecond float64  `json:"ratePerSecond"`
	ETASeconds    *float64 `json:"etaSeconds,omitempty"`
}

func newProgress(a *app, verb string, done int64) *progress {
	p := &progress{verb: verb, total: -1, done: done, base: done, start: time.Now(), now: time.Now}
	if isTerminal(a.stderr) {
		p.w = a.stderr
	}
	return p
}

// add counts n more done and returns the figures, after updating the line.
func (p *progress) add(n int64) Progress {
	p.done += n
	out := Progress{Done: p.done}
	if p.total >= 0 {
		t := p.total
		out.Total = &t
	}
	if el := p.now().Sub(p.start).Seconds(); el > 0 {
		out.RatePerSecond = float64(p.done-p.base) / el
	}
	if out.Total != nil && out.RatePerSecond > 0 {
		eta := max(0, float64(*out.Total-p.done)/out.RatePerSecond)
		out.ETASeconds = &eta
	}
	if p.w != nil {
		line := fmt.Sprintf("%s: %s", p.verb, count(p.done))
		if out.Total != nil {
			line += " of " + count(*out.Total)
			if *out.Total > 0 {
				line += fmt.Sprintf(" (%d%%)", min(100, p.done*100 / *out.Total))
			}
		}
		line += fmt.Sprintf(", %s/s", count(int64(out.RatePerSecond)))
		if out.ETASeconds != nil {
			line += ", " + (time.Duration(*out.ETASeconds) * time.Second).String() + " left"
		}
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
	}
	return out
}

// end finishes the line, if one is shown.
func (p *progress) end() {
	if p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}

// count formats n with thousands separators.
func count(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}
