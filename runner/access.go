package runner

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
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
		b, err := readSecretFile(t.file)
		if err != nil {
			return config.Invalid(t.name+"-file", "%v", err)
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

// MaxSecretFile bounds a token file: a token is a line, and a path that
// names something else (/dev/zero, a FIFO, a log) must not hang or sink
// the start.
const MaxSecretFile = 4 << 10

// MinTokenLength is the shortest token outboxd takes without a warning.
const MinTokenLength = 16

// readSecretFile reads the secret in path: a regular file (a mounted
// secret's link to one included) of at most MaxSecretFile bytes. A FIFO,
// a device or a directory is refused before it is opened, so none can
// block the start.
func readSecretFile(path string) ([]byte, error) { return readSecretFileUpTo(path, MaxSecretFile) }

// readSecretFileUpTo is readSecretFile for a file of at most limit bytes.
func readSecretFileUpTo(path string, limit int64) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s): it must be a file holding the secret", path, info.Mode().Type())
	}
	if info.Size() > limit {
		return nil, fmt.Errorf("%s holds %d bytes, more than the %d a secret may: is it the right file?", path, info.Size(), limit)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", err)
	}
	defer f.Close()
	if opened, err := f.Stat(); err != nil || !os.SameFile(info, opened) {
		return nil, fmt.Errorf("%s changed while it was read", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("cannot be read: %w", err)
	case int64(len(b)) > limit:
		return nil, fmt.Errorf("%s holds more than the %d bytes a secret may", path, limit)
	}
	return b, nil
}

// accessWarnings are what the role logs at its start about its secrets and
// exposure, none of them fatal: token and TLS key files others may read,
// tokens shorter than MinTokenLength, profiles served without a token.
func (o *options) accessWarnings() []string {
	var out []string
	for _, t := range []*tokenFlag{&o.authToken, &o.operatorToken, &o.viewerToken, &o.ingestToken} {
		if t.value == "" {
			continue
		}
		if len(t.value) < MinTokenLength {
			out = append(out, fmt.Sprintf("--%s is shorter than %d bytes: use a long random token (openssl rand -hex 16)", t.flag(), MinTokenLength))
		}
		if t.fromFile {
			out = append(out, readableByOthers(t.name+"-file", t.file)...)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(o.clients.tokens)) {
		if len(o.clients.tokens[name]) < MinTokenLength {
			out = append(out, fmt.Sprintf("the token of ingest client %q is shorter than %d bytes: use a long random token (openssl rand -hex 16)", name, MinTokenLength))
		}
	}
	if o.clients.file != "" {
		out = append(out, readableByOthers("ingest-clients-file", o.clients.file)...)
	}
	if o.tlsKey != "" {
		out = append(out, readableByOthers("tls-key", o.tlsKey)...)
	}
	out = append(out, o.secretArgs()...)
	if o.pprof && o.allowNoAuth && o.operator() == "" {
		out = append(out, "--pprof with --allow-no-auth and no operator token serves the process's profiles to anyone who reaches --http-addr")
	}
	return out
}

// secretFlags are the flags whose value is a secret, and where else to
// give it.
var secretFlags = []struct{ name, instead string }{
	{"auth-token", "--auth-token-file or " + config.EnvName("auth-token")},
	{"operator-token", "--operator-token-file or " + config.EnvName("operator-token")},
	{"viewer-token", "--viewer-token-file or " + config.EnvName("viewer-token")},
	{"ingest-token", "--ingest-token-file or " + config.EnvName("ingest-token")},
	{"ingest-client", "--ingest-clients-file or " + config.EnvName("ingest-client")},
}

// urlFlags are the flags whose URL may hold a password.
var urlFlags = []string{"store", "postgres-url", "redis-url", "server"}

// secretArgs warns about the secrets given as arguments (o.args), which
// any process listing shows (ps, /proc/PID/cmdline): tokens, and URLs
// with a password.
func (o *options) secretArgs() []string {
	var out []string
	for _, f := range secretFlags {
		if o.args[f.name] {
			out = append(out, fmt.Sprintf("--%s is given on the command line, which any process listing shows: use %s", f.name, f.instead))
		}
	}
	values := map[string]string{"store": o.store, "postgres-url": o.postgresURL, "redis-url": o.redisURL, "server": o.server}
	for _, name := range urlFlags {
		if v := values[name]; o.args[name] && redact.DSN(v) != v {
			out = append(out, fmt.Sprintf("--%s holds a secret on the command line, which any process listing shows: use %s", name, config.EnvName(name)))
		}
	}
	return out
}

// argFlags returns the names of the flags of fs that args (a command
// line without the program and role) sets, read as flag.FlagSet.Parse
// reads them: not those an OUTBOXD_* variable sets.
func argFlags(fs *flag.FlagSet, args []string) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			break
		}
		out[name] = true
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && (!ok || !b.IsBoolFlag()) {
			i++ // the value
		}
	}
	return out
}

// readableByOthers warns when the file of flag may be read by its group or
// by anyone.
func readableByOthers(flag, path string) []string {
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm()&0o044 == 0 {
		return nil
	}
	return []string{fmt.Sprintf("--%s %s may be read by its group or by anyone (%s): chmod 600 it", flag, path, info.Mode().Perm())}
}

// tlsCipherSuites are the TLS 1.2 suites the HTTP server offers: AEAD with
// forward secrecy only (Go's defaults without the CBC-SHA suites). TLS 1.3
// suites are not configurable, and all are sound.
var tlsCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
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
	if err := o.validateClients(); err != nil {
		return err
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
	for _, name := range slices.Sorted(maps.Keys(o.clients.tokens)) {
		token := o.clients.tokens[name]
		if first, ok := seen[token]; ok {
			return config.Invalid("ingest-client", "the token of client %q is the same as --%s's: each scope and client needs a token of its own", name, first.flag())
		}
		seen[token] = &tokenFlag{name: "ingest-client " + name}
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
			o.tls = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, CipherSuites: tlsCipherSuites}
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
