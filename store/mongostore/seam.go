package mongostore

import (
	"context"

	"github.com/256dpi/lungo"

	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/outbox"
)

func init() {
	mongoseam.Register(mongoseam.Hooks{
		Database: func(s any) lungo.IDatabase { return s.(*Store).db },
		RunTx: func(ctx context.Context, s any, fn func(sc lungo.ISessionContext, tx outbox.Tx) error) error {
			return s.(*Store).runOwnTx(ctx, fn)
		},
	})
}
