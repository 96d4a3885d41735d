package redisproc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ErrNoCLI is returned by a Cluster's methods when redis-cli, which
// creates and reshards a cluster, is not installed.
var ErrNoCLI = errors.New("redis-cli is not installed (it creates and reshards a Redis Cluster)")

// Cluster is a local Redis Cluster of masters without replicas, one
// Server each (Cluster set), created with `redis-cli --cluster create`.
// Not safe for concurrent use.
type Cluster struct {
	Servers []*Server
}

// Start starts the servers, joins them into a cluster that splits the
// 16384 slots evenly, and waits up to timeout until every node says
// cluster_state:ok. It returns ErrNoCLI without redis-cli.
func (c *Cluster) Start(timeout time.Duration) error {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return ErrNoCLI
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	for _, s := range c.Servers {
		s.Cluster = true
		if err := s.Start(timeout); err != nil {
			return err
		}
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if _, err := cli(ctx, args...); err != nil {
		return err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok := true
		for _, s := range c.Servers {
			info, err := cli(ctx, "-p", strconv.Itoa(s.Port), "cluster", "info")
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster's state was not ok within %s", timeout)
		case <-tick.C:
		}
	}
}

// Kill kills every server.
func (c *Cluster) Kill() {
	for _, s := range c.Servers {
		s.Kill()
	}
}

// Seeds returns the cluster's seed list in go-redis's ParseClusterURL form:
// redis://h1:p1?addr=h2:p2&addr=h3:p3.
func (c *Cluster) Seeds() string {
	var b strings.Builder
	b.WriteString("redis://")
	for i, s := range c.Servers {
		switch i {
		case 0:
			b.WriteString(s.Addr())
		case 1:
			b.WriteString("?addr=" + s.Addr())
		default:
			b.WriteString("&addr=" + s.Addr())
		}
	}
	return b.String()
}

// Slot is a slot's owner in a Cluster: the server that serves it, and the
// first slot of that server's range that holds it.
type Slot struct {
	Slot, RangeStart int
	Owner            *Server
}

// KeySlot returns the slot of key and its owner now (CLUSTER KEYSLOT and
// CLUSTER SLOTS).
func (c *Cluster) KeySlot(ctx context.Context, key string) (Slot, error) {
	first := strconv.Itoa(c.Servers[0].Port)
	out, err := cli(ctx, "-p", first, "cluster", "keyslot", key)
	if err != nil {
		return Slot{}, err
	}
	slot, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return Slot{}, fmt.Errorf("CLUSTER KEYSLOT answered %q", out)
	}
	// CLUSTER SLOTS, as redis-cli prints it: start, end, then the master's
	// host, port and id, one value a line (and the replicas', none here).
	out, err = cli(ctx, "-p", first, "cluster", "slots")
	if err != nil {
		return Slot{}, err
	}
	f := strings.Fields(out)
	for i := 0; i+3 < len(f); i++ {
		start, err1 := strconv.Atoi(f[i])
		end, err2 := strconv.Atoi(f[i+1])
		port, err3 := strconv.Atoi(f[i+3])
		if err1 != nil || err2 != nil || err3 != nil || f[i+2] != "127.0.0.1" || slot < start || slot > end {
			continue
		}
		for _, s := range c.Servers {
			if s.Port == port {
				return Slot{Slot: slot, RangeStart: start, Owner: s}, nil
			}
		}
	}
	return Slot{}, fmt.Errorf("no node serves slot %d: %s", slot, out)
}

// Reshard moves the slots of from's range up to and including slot (the
// first slot-RangeStart+1 of them: redis-cli takes a source's slots in
// order) to the server to, with `redis-cli --cluster reshard`: keys move
// one MIGRATE at a time while clients are sent MOVED and ASK.
func (c *Cluster) Reshard(ctx context.Context, s Slot, to *Server) error {
	fromID, err := cli(ctx, "-p", strconv.Itoa(s.Owner.Port), "cluster", "myid")
	if err != nil {
		return err
	}
	toID, err := cli(ctx, "-p", strconv.Itoa(to.Port), "cluster", "myid")
	if err != nil {
		return err
	}
	_, err = cli(ctx, "--cluster", "reshard", s.Owner.Addr(),
		"--cluster-from", strings.TrimSpace(fromID), "--cluster-to", strings.TrimSpace(toID),
		"--cluster-slots", strconv.Itoa(s.Slot-s.RangeStart+1), "--cluster-yes", "--cluster-pipeline", "100")
	return err
}

// cli runs redis-cli with args and returns its output.
func cli(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("redis-cli %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
