package redact_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/redact"
	"github.com/outboxd/outboxd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestDSN(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"MongoPassword", "mongodb://app:hunter2@db1:27017,db2:27017/outboxd?replicaSet=rs0", "mongodb://app:xxxxx@db1:27017,db2:27017/outboxd?replicaSet=rs0"},
		{"MongoSRV", "mongodb+srv://app:hunter2@cluster.example.net/", "mongodb+srv://app:xxxxx@cluster.example.net/"},
		{"RedisPasswordOnly", "redis://:hunter2@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"PostgresPassword", "postgres://outboxd:hunter2@127.0.0.1:5432/outboxd?sslmode=disable", "postgres://outboxd:xxxxx@127.0.0.1:5432/outboxd?sslmode=disable"},
		{"OtherScheme", "mysql://u:hunter2@h/db", "mysql://u:xxxxx@h/db"},
		{"EscapedPassword", "postgres://u:hun%40ter2@h/db", "postgres://u:xxxxx@h/db"},
		{"UserWithoutPassword", "postgres://outboxd@127.0.0.1/outboxd", "postgres://outboxd@127.0.0.1/outboxd"},
		{"NoUserinfo", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"UnparsableWithUserinfo", "postgres://u:hunter2%zz@h/db", "postgres://xxxxx@h/db"},
		{"UnparsableAtInPassword", "mongodb://u:hun@ter%zz@h/db", "mongodb://xxxxx@h/db"},
		{"SQLitePath", "sqlite:data/outboxd.db", "sqlite:data/outboxd.db"},
		{"LungoMemory", "lungo:memory", "lungo:memory"},
		{"Empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := redact.DSN(tt.in)
			require.Equal(t, tt.want, got)
			require.NotContains(t, got, "hunter2")
			require.NotContains(t, got, "ter2")
		})
	}
}
