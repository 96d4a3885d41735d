package runner

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/redact"
)

// tokenFlag is a bearer token given as --NAME (or OUTBOXD_NAME) or read
// from the file of --NAME-file (a mounted Kubernetes secret): never in the
// arguments, which any process listing shows.
type tokenFlag struct {
	name, value, file string
	// fromFile: value was read from file.
	fromFile bool
}

// register adds --name and, withFile, --name-file to fs.
func (t *tokenFlag) register(fs *flag.FlagSet, name, usage string, withFile bool) {
	t.name = name
	fs.StringVar(&t.value, name, "", usage+"; give it in "+config.EnvName(name)+" or a file, not as an argument")
	if withFile {
		fs.StringVar(&t.file, name+"-file", "", "read --"+name+" from this file (a mounted secret): its content without a final newline")
	}
}

// flag names the flag the token came from, for messages.
func (t *tokenFlag) flag() string {
	if t.fromFile {
		return t.name + "-file"
	}
	return t.name
}

// resolve reads the token's file, when given, and checks the token: not
// given twice, not empty when read from a file, no spaces or control
// characters.
func (t *tokenFlag) resolve() error {
	if t.file != "" {
		if t.value != "" {
			return config.Invalid(t.name+"-file", "cannot be combined with --%s: give the token one way", t.name)
		}
		b, err := os.ReadFile(t.file)
		if err != nil {
			return config.Invalid(t.name+"-file", "cannot be read: %v", err)
		}
		t.value, t.fromFile = strings.TrimRight(string(b), "\r\n"), true
		if t.value == "" {
			return config.Invalid(t.name+"-file", "%s is empty: it must hold the token", t.file)
		}
	}
	if t.value == "" {
		return nil
	}
	if err := httpapi.CheckToken(t.value); err != nil {
		return config.Invalid(t.flag(), "%v", err)
	}
	return nil
}

// operator is the operator token (--operator-token or --auth-token).
func (o *options) operator() string { return cmp.Or(o.operatorToken.value, o.authToken.value) }

// serves tells whether the role listens on --http-addr: a long-running
// role with an address (reconcile only with --every).
func (o *options) serves() bool {
	r := o.role
	return r.serve && o.httpAddr != "" && (r.onceWhen == nil || !r.onceWhen(o))
}

// validateAccess reads and checks the tokens (README.md, "Access"): one
// token per scope, no token for two, and no serving role open to more than
// loopback without one unless --allow-no-auth.
func (o *options) validateAccess() error {
	has := o.registered
	for _, t := range []*tokenFlag{&o.authToken, &o.operatorToken, &o.viewerToken, &o.ingestToken} {
		if has[t.name] {
			if err := t.resolve(); err != nil {
				return err
			}
		}
	}
	if !has["operator-token"] { // an operator command: it sends --auth-token
		return nil
	}
	if o.authToken.value != "" && o.operatorToken.value != "" {
		return config.Invalid("auth-token", "is the operator token: give --auth-token or --operator-token, not both")
	}
	operator := &o.operatorToken
	if operator.value == "" {
		operator = &o.authToken
	}
	seen := map[string]*tokenFlag{}
	for _, t := range []*tokenFlag{&o.ingestToken, &o.viewerToken, operator} {
		if t.value == "" {
			continue
		}
		if first, ok := seen[t.value]; ok {
			return config.Invalid(t.flag(), "is the same token as --%s: each scope needs a token of its own", first.flag())
		}
		seen[t.value] = t
	}
	if len(seen) == 0 && !o.allowNoAuth && o.serves() {
		if host, _, err := net.SplitHostPort(o.httpAddr); err == nil && (host == "" || !httpapi.LoopbackHost(host)) {
			return config.Invalid("http-addr", "%s is not a loopback address, and no token is set: set --operator-token (and --viewer-token, --ingest-token as needed; "+
				"each also from OUTBOXD_…_TOKEN or --…-token-file), or give --allow-no-auth to serve the API to anyone who reaches the address", o.httpAddr)
		}
	}
	return nil
}

// validateTLS loads --tls-cert and --tls-key, and --redis-ca-file.
func (o *options) validateTLS() error {
	has := o.registered
	if has["tls-cert"] {
		switch {
		case o.tlsCert != "" && o.tlsKey == "":
			return config.Invalid("tls-key", "is required with --tls-cert")
		case o.tlsCert == "" && o.tlsKey != "":
			return config.Invalid("tls-cert", "is required with --tls-key")
		case o.tlsCert != "":
			pair, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
			if err != nil {
				return config.Invalid("tls-cert", "and --tls-key cannot be loaded: %v", err)
			}
			o.tls = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
		}
	}
	if has["redis-ca-file"] && o.redisCAFile != "" {
		if u, err := url.Parse(o.redisURL); err != nil || u.Scheme != "rediss" {
			return config.Invalid("redis-ca-file", "is for a rediss:// --redis-url (got %q)", redact.DSN(o.redisURL))
		}
		pem, err := os.ReadFile(o.redisCAFile)
		if err != nil {
			return config.Invalid("redis-ca-file", "cannot be read: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return config.Invalid("redis-ca-file", "%s holds no PEM certificate", o.redisCAFile)
		}
		o.redisCAs = pool
	}
	return nil
}
