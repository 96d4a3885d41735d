package httpapi_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestStatusShowsTheAudit: the snapshot carries the last audit run as read;
// a failed or frozen read leaves the part out, named in unavailable, within
// ReadTimeout; the metrics' collector does not read it.
func TestStatusShowsTheAudit(t *testing.T) {
	t.Parallel()
	st := testkit.NewStore(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	report := &operator.AuditReport{Stream: "s", Checked: 10, Drift: map[string]int{operator.AuditMissing: 1},
		Findings: []operator.AuditFinding{{Kind: operator.AuditMissing, EventID: "e1", Day: "2026-11-01"}},
		Repair:   []string{"outboxd verify --from 2026-11-01T00:00:00Z --to 2026-11-02T00:00:00Z --repair --yes"}}
	for _, tc := range []struct {
		name        string
		read        func(context.Context) (*operator.AuditReport, error)
		want        *operator.AuditReport
		unavailable bool
	}{
		{"Read", func(context.Context) (*operator.AuditReport, error) { return report, nil }, report, false},
		{"NeverRan", func(context.Context) (*operator.AuditReport, error) { return nil, nil }, nil, false},
		{"Failed", func(context.Context) (*operator.AuditReport, error) { return nil, errors.New("down") }, nil, true},
		{"Frozen", func(context.Context) (*operator.AuditReport, error) {
			<-release // heeds no deadline, as a stalled client does not
			return report, nil
		}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A read timeout that a loaded machine still meets for the store's
			// part; the frozen audit waits it out.
			s := &ostatus.Status{Store: st, Stream: "s", Audit: tc.read, ReadTimeout: 2 * time.Second}
			began := time.Now()
			snap := s.Snapshot(context.Background())
			require.Less(t, time.Since(began), 5*time.Second)
			require.Equal(t, tc.want, snap.Audit)
			require.Equal(t, tc.unavailable, slices.Contains(snap.Unavailable, "audit"), "%v", snap.Unavailable)
			require.NotNil(t, snap.Events, "the store's part is read all the same")
		})
	}
}
