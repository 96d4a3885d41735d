package redact_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/internal/redact"
)

// TestMongoSecrets: every option of a MongoDB URI the driver knows as a
// secret is hidden by DSN (the start line, error messages), and so is each
// secret in the text of the driver's own errors about the URI (Error).
func TestMongoSecrets(t *testing.T) {
	t.Parallel()
	const secret = "S3cr3tV4lue"
	for _, tc := range []struct{ name, uri string }{
		{"UserinfoPassword", "mongodb://app:" + secret + "@db1:27017/?replicaSet=rs0"},
		{"AWSSessionToken", "mongodb://AKIDEXAMPLE:" + secret + "@db1/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:" + secret},
		{"TLSKeyPassword", "mongodb://db1/?tls=true&tlsCertificateKeyFile=/k.pem&tlsCertificateKeyFilePassword=" + secret},
		{"LegacyKeyPassword", "mongodb://db1/?ssl=true&sslClientCertificateKeyFile=/k.pem&sslClientCertificateKeyPassword=" + secret},
		{"UnparsablePassword", "mongodb://app:" + secret + "%zz@db1/"},
		{"UnparsablePort", "mongodb://app:" + secret + "@db1:99999x/?replicaSet=rs0"},
		{"BadOptionNextToASecret", "mongodb://app:" + secret + "@db1/?authMechanismProperties=AWS_SESSION_TOKEN:" + secret + "&w=-5x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.NotContains(t, redact.DSN(tc.uri), secret)
			// What the driver says of the URI.
			err := options.Client().ApplyURI(tc.uri).Validate()
			if err == nil {
				return
			}
			red := redact.Error(err, tc.uri)
			require.NotContains(t, red.Error(), secret, "driver error: %v", strings.ReplaceAll(err.Error(), secret, "<secret>"))
			require.True(t, errors.Is(red, err), "the chain is kept")
		})
	}
}
