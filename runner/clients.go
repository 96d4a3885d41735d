package runner

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/outbox"
)

// MaxClientsFile bounds the file of --ingest-clients-file: a line per
// client.
const MaxClientsFile = 64 << 10

// clientList is the named ingest clients: the repeatable --ingest-client
// NAME=TOKEN and the lines "NAME TOKEN" of --ingest-clients-file (a
// mounted secret), merged by validateClients.
type clientList struct {
	tokens map[string]string
	file   string
	// given are the values of --ingest-client, checked by validateClients
	// (the flag package would print a refused value, the token with it).
	given []string
}

func (l *clientList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(slices.Sorted(maps.Keys(l.tokens)), ",") // names only: never a token
}

// Set records one --ingest-client NAME=TOKEN.
func (l *clientList) Set(v string) error {
	l.given = append(l.given, v)
	return nil
}

// add records client name's token, checking both.
func (l *clientList) add(name, token string) error {
	if reason := outbox.ClientNameProblem(name); reason != "" {
		return fmt.Errorf("the client name %q %s", name, reason)
	}
	if name == outbox.ClientDefault {
		return fmt.Errorf("the client name %q is --ingest-token's", name)
	}
	if _, dup := l.tokens[name]; dup {
		return fmt.Errorf("the client %q is given twice", name)
	}
	if err := httpapi.CheckToken(token); err != nil {
		return fmt.Errorf("the token of client %q %w", name, err)
	}
	if l.tokens == nil {
		l.tokens = map[string]string{}
	}
	l.tokens[name] = token
	return nil
}

// clientFlags registers --ingest-client and --ingest-clients-file.
func (o *options) clientFlags(fs *flag.FlagSet) {
	fs.Var(&o.clients, "ingest-client", "NAME=TOKEN (repeatable): a named ingest client, an --ingest-token of its own whose events are recorded with NAME and whose idempotency keys are its own "+
		"(--ingest-token is the client \"default\"); give the tokens in --ingest-clients-file rather than as arguments")
	fs.StringVar(&o.clients.file, "ingest-clients-file", "", "read named ingest clients from this file (a mounted secret): a line \"NAME TOKEN\" per client; empty lines and lines starting with # are skipped")
}

// validateClients checks --ingest-client and reads --ingest-clients-file
// into the clients. No error shows a token.
func (o *options) validateClients() error {
	l := &o.clients
	for i, v := range l.given {
		name, token, ok := strings.Cut(v, "=")
		if !ok {
			return config.Invalid("ingest-client", "must be NAME=TOKEN (value %d has no =)", i+1)
		}
		if err := l.add(name, token); err != nil {
			return config.Invalid("ingest-client", "%v", err)
		}
	}
	if l.file == "" {
		return nil
	}
	b, err := readSecretFileUpTo(l.file, MaxClientsFile)
	if err != nil {
		return config.Invalid("ingest-clients-file", "%v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return config.Invalid("ingest-clients-file", "%s line %d must be NAME TOKEN (got %d fields)", l.file, n, len(fields))
		}
		if err := l.add(fields[0], fields[1]); err != nil {
			return config.Invalid("ingest-clients-file", "%s line %d: %v", l.file, n, err)
		}
	}
	if len(l.tokens) == 0 {
		return config.Invalid("ingest-clients-file", "%s names no client", l.file)
	}
	return nil
}
