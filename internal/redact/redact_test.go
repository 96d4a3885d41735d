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
		{"QueryPassword", "postgres://u@h/db?sslmode=require&password=hunter2", "postgres://u@h/db?sslmode=require&password=xxxxx"},
		{"QueryPasswordUpperCase", "postgres://u@h/db?PassWord=hunter2&x=1", "postgres://u@h/db?PassWord=xxxxx&x=1"},
		{"QueryEscapedName", "postgres://u@h/db?pass%77ord=hunter2", "postgres://u@h/db?pass%77ord=xxxxx"},
		{"QuerySSLPassword", "postgres://u@h/db?sslmode=verify-full&sslkey=/k/hunter2.key&sslpassword=hunter2", "postgres://u@h/db?sslmode=verify-full&sslkey=xxxxx&sslpassword=xxxxx"},
		{"QueryAndUserinfo", "postgres://u:hunter2@h/db?password=hunter2", "postgres://u:xxxxx@h/db?password=xxxxx"},
		{"MongoKeyPassword", "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=hunter2", "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=xxxxx"},
		{"QueryWithoutSecret", "postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem", "postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem"},
		{"UnparsableQueryPassword", "postgres://u:hunter2@h/db%zz?password=hunter2&sslmode=disable", "postgres://xxxxx@h/db%zz?password=xxxxx&sslmode=disable"},
		{"KeyValue", "host=h port=5432 user=u password=hunter2 dbname=d", "host=h port=5432 user=u password=xxxxx dbname=d"},
		{"KeyValueSpaces", "host = h password = hunter2 dbname=d", "host = h password = xxxxx dbname=d"},
		{"KeyValueQuoted", `host=h password='hun ter2 \' hunter2' dbname=d`, "host=h password=xxxxx dbname=d"},
		{"KeyValueEscaped", `password=hun\ ter2 host=h`, "password=xxxxx host=h"},
		{"KeyValueUnterminatedQuote", `host=h password='hunter2 dbname=d`, "host=h password=xxxxx"},
		{"KeyValueSSL", "host=h sslmode=verify-full sslpassword=hunter2 sslkey=/k/hunter2.key", "host=h sslmode=verify-full sslpassword=xxxxx sslkey=xxxxx"},
		{"KeyValueUpperCaseKey", "host=h PASSWORD=hunter2", "host=h PASSWORD=xxxxx"},
		{"KeyValueNoSecret", "host=h dbname=d", "host=h dbname=d"},
		{"ServerURL", "https://admin:hunter2@outboxd.example:8443/", "https://admin:xxxxx@outboxd.example:8443/"},
		{"RedisUserAndPassword", "rediss://app:hunter2@redis.example:6380/0", "rediss://app:xxxxx@redis.example:6380/0"},
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
			require.NotContains(t, got, "hun ")
		})
	}
}
