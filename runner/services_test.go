package runner

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/startstop"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/worker"
)

var (
	_ startstop.Service = (*worker.Worker)(nil)
	_ startstop.Service = (*dispatcher.Dispatcher)(nil)
	_ startstop.Service = (*reconciler.Reconciler)(nil)
	_ startstop.Service = (*outbox.Committer)(nil)
	_ startstop.Service = (*ostatus.History)(nil)
)

// TestServicesLifecycleAPI: the services this binary runs hold their
// lifecycle in a named field, so startstop's Init (and anything else of
// its Base) is not part of their API.
func TestServicesLifecycleAPI(t *testing.T) {
	t.Parallel()
	base := reflect.TypeFor[startstop.Base]()
	for _, typ := range []reflect.Type{
		reflect.TypeFor[worker.Worker](),
		reflect.TypeFor[dispatcher.Dispatcher](),
		reflect.TypeFor[reconciler.Reconciler](),
		reflect.TypeFor[outbox.Committer](),
		reflect.TypeFor[ostatus.History](),
	} {
		t.Run(typ.Name(), func(t *testing.T) {
			t.Parallel()
			_, ok := reflect.PointerTo(typ).MethodByName("Init")
			require.False(t, ok, "Init is not part of %s's API", typ)
			for f := range typ.Fields() {
				require.False(t, f.Anonymous && f.Type == base, "%s embeds startstop.Base", typ)
				require.False(t, f.IsExported() && f.Type == base, "%s exports its lifecycle field", typ)
			}
		})
	}
}
