package mongostore_test

import (
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
