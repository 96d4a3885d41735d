package migrations

import (
	"embed"
	"io/fs"
)

// sqliteFiles holds the SQLite store's schema: numbered SQL files in goose's
// format, applied by sqlitestore.Store.Migrate.
//
//go:embed sqlite/*.sql
var sqliteFiles embed.FS

// SQLiteFiles returns the embedded SQLite migrations (file names at the
// root, "00001_store.sql" and so on, in goose's format).
func SQLiteFiles() fs.FS {
	sub, _ := fs.Sub(sqliteFiles, "sqlite")
	return sub
}
