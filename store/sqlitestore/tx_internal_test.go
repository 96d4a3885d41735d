package sqlitestore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNextInsert(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ left, rows int }{
		{1, 1}, {2, 2}, {3, 2}, {4, 4}, {5, 4}, {7, 4}, {8, 8}, {15, 8}, {16, 16}, {31, 16}, {32, 32}, {500, 32},
	} {
		rows, i := nextInsert(c.left)
		require.Equal(t, c.rows, rows, "left %d", c.left)
		require.Equal(t, c.rows, insertRows[i], "left %d", c.left)
	}
}
