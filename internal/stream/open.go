package stream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Topology is how outboxd reaches Redis (--redis-cluster,
// --redis-sentinel-master): one node, a Sentinel set or a Cluster.
type Topology struct {
	// Cluster makes the URL a Redis Cluster seed list in go-redis's
	// ParseClusterURL form: redis://h1:p1?addr=h2:p2&addr=h3:p3 (no
	// database number: a Cluster has only database 0).
	Cluster bool
	// SentinelMaster, when set, names the master the Sentinels watch: the
	// URL's hosts (redis://s1:26379?addr=s2:26379, go-redis's
	// ParseFailoverURL form) are the Sentinels, its user and password
	// authenticate to them and to the master, its path is the database.
	SentinelMaster string
}

// Validate reports a topology that asks for two at once.
func (t Topology) Validate() error {
	if t.Cluster && t.SentinelMaster != "" {
		return errors.New("a Redis Cluster has no Sentinel: use one of --redis-cluster and --redis-sentinel-master")
	}
	return nil
}

// OpenRedis returns the go-redis universal client of url in topology t:
// a single-node client (redis.ParseURL), a cluster client
// (redis.ParseClusterURL) or a Sentinel failover client
// (redis.ParseFailoverURL). Commands heed their context's deadline, not
// only the client's fixed timeouts; rootCAs, when set, replace the system's
// authorities of a rediss:// URL. The caller closes the client.
//
// On a Cluster every command path of this package stays in one slot: the
// keys of one partition share a hash tag (Keys.Partition), the scripts and
// the worker's MULTI/EXEC name only keys of one partition and pass them as
// KEYS, a pipeline over several partitions is split by node by go-redis,
// and INFO (Memory, the server version) is read on every master.
func OpenRedis(url string, t Topology, rootCAs *x509.CertPool) (redis.UniversalClient, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	switch {
	case t.Cluster:
		opt, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("not a cluster seed list (redis://h1:p1?addr=h2:p2): %w", err)
		}
		opt.ContextTimeoutEnabled = true
		trust(opt.TLSConfig, rootCAs)
		return redis.NewClusterClient(opt), nil
	case t.SentinelMaster != "":
		opt, err := redis.ParseFailoverURL(url)
		if err != nil {
			return nil, fmt.Errorf("not a Sentinel URL (redis://s1:26379?addr=s2:26379): %w", err)
		}
		opt.MasterName = t.SentinelMaster
		if opt.Username == "" && opt.Password == "" {
			opt.Username, opt.Password = opt.SentinelUsername, opt.SentinelPassword
		}
		opt.ContextTimeoutEnabled = true
		trust(opt.TLSConfig, rootCAs)
		return redis.NewFailoverClient(opt), nil
	default:
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, err
		}
		opt.ContextTimeoutEnabled = true
		trust(opt.TLSConfig, rootCAs)
		return redis.NewClient(opt), nil
	}
}

// trust makes cfg (a rediss:// URL's; nil for redis://) trust rootCAs
// instead of the system's authorities, when they are set.
func trust(cfg *tls.Config, rootCAs *x509.CertPool) {
	if cfg != nil && rootCAs != nil {
		cfg.RootCAs = rootCAs
	}
}

// infos returns the text of INFO section from the server, or on a Cluster
// from every master (each holds its own slots' keys and its own memory).
func (c *Client) infos(ctx context.Context, section string) ([]string, error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		info, err := c.rdb.Info(ctx, section).Result()
		if err != nil {
			return nil, err
		}
		return []string{info}, nil
	}
	var mu sync.Mutex
	var out []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, section).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, info)
		return nil
	})
	return out, err
}
