package mongodb

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
)

func TestCheckTopology(t *testing.T) {
	t.Parallel()
	require.NoError(t, checkTopology(bson.M{"setName": "rs0", "isWritablePrimary": true}))
	require.NoError(t, checkTopology(bson.M{"msg": "isdbgrid"}))
	err := checkTopology(bson.M{"isWritablePrimary": true})
	require.ErrorIs(t, err, ErrStandalone)
	require.Contains(t, err.Error(), "--replSet")
}
