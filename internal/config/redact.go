package config

import (
	"net/url"
	"strings"
)

// Redact replaces the password in a URI with "xxxxx", for logs and
// messages. Strings that do not parse as URLs have anything between "://"
// and "@" hidden.
func Redact(uri string) string {
	u, err := url.Parse(uri)
	if err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
		return uri
	}
	if err != nil {
		if i, j := strings.Index(uri, "://"), strings.LastIndex(uri, "@"); i >= 0 && j > i {
			return uri[:i+3] + "xxxxx" + uri[j:]
		}
	}
	return uri
}
