// Package redact hides the secrets of connection strings in what outboxd
// prints (logs, error messages, usage errors): DSN is the tree's one
// redaction function. It is a leaf (the standard library only), so the
// stores, the command and the benchmark harness share it without importing
// the flag parsing of internal/config.
//
// Today DSN hides the password of a URI's userinfo
// (mongodb://user:secret@host, redis://:secret@host,
// postgres://user:secret@host). Other places a secret can sit in a
// connection string (query parameters such as password= or sslpassword=,
// and key/value DSNs such as "host=h password=secret") are further cases
// of DSN, each a function of its own beside userinfo below, so every
// caller gains them at once.
package redact

import (
	"net/url"
	"strings"
)

// Mask is what replaces a secret.
const Mask = "xxxxx"

// DSN returns s with its secrets replaced by Mask, for logs and messages.
// A URI keeps everything but the password of its userinfo; a string that
// does not parse as a URI has anything between "://" and the last "@"
// hidden. Strings without a secret come back unchanged.
func DSN(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return unparsed(s)
	}
	if out, ok := userinfo(u); ok {
		return out
	}
	return s
}

// userinfo replaces the password of u's userinfo; ok is false when u has
// none.
func userinfo(u *url.URL) (string, bool) {
	if u.User == nil {
		return "", false
	}
	if _, ok := u.User.Password(); !ok {
		return "", false
	}
	c := *u
	c.User = url.UserPassword(u.User.Username(), Mask)
	return c.String(), true
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
