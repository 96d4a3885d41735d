package mongostore_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store/mongostore"
)

// TestOptionsValidateMaxPoolSize: a pool larger than a server accepts is
// refused, naming MaxPoolSize (a negative --mongo-max-pool arrives as one).
func TestOptionsValidateMaxPoolSize(t *testing.T) {
	t.Parallel()
	testkit.RequireBound(t, (&mongostore.Options{MaxPoolSize: mongostore.MaxPoolSizeMax + 1}).Validate(), "MaxPoolSize", "between 1 and 65536")
	require.NoError(t, (&mongostore.Options{MaxPoolSize: mongostore.MaxPoolSizeMax}).Validate())
}

// TestValidateURIHidesTheSecret: a MongoDB URI that net/url refuses is not
// quoted whole in ValidateURI's error (the --store usage error): its
// password and secret options are masked, and the cause is still told (net/url's own words).
func TestValidateURIHidesTheSecret(t *testing.T) {
	t.Parallel()
	const secret = "S3cr3tV4lue"
	for _, tc := range []struct{ name, uri, cause string }{
		{"BadEscapeInPassword", "mongodb://app:" + secret + "%zz@db1/", `invalid URL escape "%zz"`},
		{"InvalidPort", "mongodb://app:" + secret + "@db1:99999x/?replicaSet=rs0", "invalid port"},
		{"InvalidPortSRV", "mongodb+srv://app:" + secret + "@db1:x/", "invalid port"},
		{"ControlByteBesideASecretOption", "mongodb://db1/?tls=true&tlsCertificateKeyFilePassword=" + secret + "&appName=a\x01", "invalid control character"},
		{"ControlByteBesideTheAWSToken", "mongodb://AKID:" + secret + "@db1/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:" + secret + "\x7f", "invalid control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			uri := tc.uri
			_, parseErr := url.Parse(uri)
			require.Error(t, parseErr)
			require.Contains(t, parseErr.Error(), secret, "net/url quotes it")
			err := mongostore.ValidateURI(uri)
			require.Error(t, err)
			require.NotContains(t, err.Error(), secret)
			require.Contains(t, err.Error(), tc.cause)
		})
	}
}
