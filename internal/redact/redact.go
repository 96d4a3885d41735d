// Package redact hides the secrets of connection strings in what outboxd
// prints (logs, error messages, usage errors): DSN is the tree's one
// redaction function. It is a leaf (the standard library only), so the
// stores, the command and the benchmark harness share it without importing
// the flag parsing of internal/config.
//
// DSN hides, each in a function of its own below:
//   - the password of a URI's userinfo (mongodb://user:secret@host,
//     redis://:secret@host, postgres://user:secret@host, the --server URL
//     of the operator commands);
//   - the values of the query parameters that carry a secret
//     (postgres://u@h/db?password=secret, sslpassword=, sslkey=,
//     tlsCertificateKeyFilePassword=, MongoDB's authMechanismProperties=
//     and sslClientCertificateKeyPassword=), names matched without regard
//     to case;
//   - the same keys of a key/value DSN (libpq's "host=h password=secret",
//     quoted values included).
//
// Error and Message mask the secrets of a connection string in the text of
// an error about it (a driver's parse error may quote it whole).
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask is what replaces a secret.
const Mask = "xxxxx"

// secretKeys are the parameters, of a URI's query or a key/value DSN, whose
// value is a secret (lower case).
var secretKeys = map[string]bool{
	"password":                      true,
	"sslpassword":                   true,
	"sslkey":                        true,
	"tlscertificatekeyfilepassword": true,
	// MongoDB's: the AWS session token rides in authMechanismProperties
	// (AWS_SESSION_TOKEN:…), and the key file's password has a legacy
	// name.
	"authmechanismproperties":         true,
	"sslclientcertificatekeypassword": true,
}

// DSN returns s with its secrets replaced by Mask, for logs and messages.
// A URI keeps everything but the password of its userinfo and the values
// of its secret query parameters; a key/value DSN keeps everything but the
// values of its secret keys; a string that does not parse as a URI has
// anything between "://" and the last "@" hidden, and its secret
// parameters too. Strings without a secret come back unchanged.
func DSN(s string) string {
	if isKeyValue(s) {
		return keyValue(s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return rawQuery(unparsed(s))
	}
	changed := userinfo(u)
	if q, ok := query(u.RawQuery); ok {
		u.RawQuery, changed = q, true
	}
	if !changed {
		return s
	}
	return u.String()
}

// userinfo replaces the password of u's userinfo; it reports whether u had
// one.
func userinfo(u *url.URL) bool {
	if u.User == nil {
		return false
	}
	if _, ok := u.User.Password(); !ok {
		return false
	}
	u.User = url.UserPassword(u.User.Username(), Mask)
	return true
}

// query replaces the values of the secret parameters of a raw query,
// keeping the rest as it was written; ok is false when it has none.
func query(raw string) (string, bool) {
	if raw == "" {
		return raw, false
	}
	parts := strings.Split(raw, "&")
	found := false
	for i, p := range parts {
		k, _, hasValue := strings.Cut(p, "=")
		if key, err := url.QueryUnescape(k); err == nil && hasValue && secretKeys[strings.ToLower(key)] {
			parts[i], found = k+"="+Mask, true
		}
	}
	return strings.Join(parts, "&"), found
}

// unparsed hides what could be userinfo in a string net/url refuses (a
// bad escape in a password, for example): everything between "://" and the
// last "@".
func unparsed(s string) string {
	if i, j := strings.Index(s, "://"), strings.LastIndex(s, "@"); i >= 0 && j > i {
		return s[:i+3] + Mask + s[j:]
	}
	return s
}

// secretParam matches a secret query parameter and its value in a string
// net/url refuses.
var secretParam = regexp.MustCompile(`(?i)([?&;](?:password|sslpassword|sslkey|tlscertificatekeyfilepassword|authmechanismproperties|sslclientcertificatekeypassword)=)[^&;#]*`)

// rawQuery hides the values of secret parameters in a string net/url
// refuses.
func rawQuery(s string) string { return secretParam.ReplaceAllString(s, "${1}"+Mask) }

// kvStart matches the start of a key/value DSN: a keyword, then "=".
var kvStart = regexp.MustCompile(`^\s*[A-Za-z_][A-Za-z0-9_]*\s*=`)

// isKeyValue tells a key/value DSN ("host=h dbname=d") from a URI.
func isKeyValue(s string) bool { return !strings.Contains(s, "://") && kvStart.MatchString(s) }

// keyValue hides the values of the secret keys of a key/value DSN, as
// libpq reads one: keyword = value, a value either single-quoted (with \'
// and \\ inside) or running to the next space (with backslash escapes).
// What cannot be read from a secret key on is hidden to the end.
func keyValue(s string) string {
	var out strings.Builder
	i := 0
	for i < len(s) {
		// The keyword.
		start := i
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		k := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := strings.ToLower(s[k:i])
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) || s[i] != '=' {
			out.WriteString(s[start:]) // not key/value from here: nothing more to read
			return out.String()
		}
		i++ // '='
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		out.WriteString(s[start:i])
		// The value.
		v := i
		closed := true
		if i < len(s) && s[i] == '\'' {
			i++
			closed = false
			for i < len(s) {
				if s[i] == '\\' && i+1 < len(s) {
					i += 2
					continue
				}
				if s[i] == '\'' {
					i++
					closed = true
					break
				}
				i++
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				i++
			}
		}
		switch {
		case secretKeys[key] && !closed:
			out.WriteString(Mask)
			return out.String()
		case secretKeys[key]:
			out.WriteString(Mask)
		default:
			out.WriteString(s[v:i])
		}
	}
	return out.String()
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// Error returns err with its text redacted for the connection string
// dsn (Message), its chain kept for errors.Is and errors.As: a driver's
// parse error may quote the string or one of its options whole.
func Error(err error, dsn string) error {
	if err == nil {
		return nil
	}
	msg := Message(err.Error(), dsn)
	if msg == err.Error() {
		return err
	}
	return &redacted{err: err, msg: msg}
}

type redacted struct {
	err error
	msg string
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// Message returns msg with every secret of the connection string dsn that
// it quotes replaced by Mask: dsn itself (by DSN), its password and the
// values of its secret parameters (as written and unescaped), and any
// secret parameter written out in msg.
func Message(msg, dsn string) string {
	if dsn != "" {
		msg = strings.ReplaceAll(msg, dsn, DSN(dsn))
	}
	for _, v := range secrets(dsn) {
		if len(v) >= 3 { // shorter would mask ordinary words
			msg = strings.ReplaceAll(msg, v, Mask)
		}
	}
	return rawQuery(msg)
}

// secrets returns the secret values of dsn, as written and unescaped.
func secrets(dsn string) []string {
	var out []string
	add := func(v string) {
		out = append(out, v)
		if u, err := url.QueryUnescape(v); err == nil && u != v {
			out = append(out, u)
		}
	}
	i, j := strings.Index(dsn, "://"), strings.LastIndex(dsn, "@")
	if i >= 0 && j > i {
		if _, pw, ok := strings.Cut(dsn[i+3:j], ":"); ok {
			add(pw)
		}
	}
	_, raw, _ := strings.Cut(dsn, "?")
	for p := range strings.SplitSeq(raw, "&") {
		k, v, ok := strings.Cut(p, "=")
		if key, err := url.QueryUnescape(k); ok && err == nil && secretKeys[strings.ToLower(key)] {
			add(v)
			// authMechanismProperties holds pairs: each value is a secret.
			for pair := range strings.SplitSeq(v, ",") {
				if _, pv, ok := strings.Cut(pair, ":"); ok {
					add(pv)
				}
			}
		}
	}
	return out
}
