package rollout

import (
	"context"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/notify"
)

// notifyDrainTimeout bounds how long a finished run waits for its notifications (event
// webhooks and alerts), which leave the run's path (package notify).
const notifyDrainTimeout = 30 * time.Second

// notifyLater queues n; the first notification starts the run's queue.
func (r *run) notifyLater(ctx context.Context, n notify.Notification) {
	if r.notes == nil {
		r.notes = notify.Start(ctx)
	}
	r.notes.Push(n)
}

// drainNotifications waits, for at most notifyDrainTimeout, for the notifications still
// queued, stops the queue and passes their warnings on.
func (r *run) drainNotifications(context.Context) {
	n := r.notes
	if n == nil {
		return
	}
	r.notes = nil
	warnings, dropped := n.Drain(notifyDrainTimeout)
	if dropped {
		r.note("notifications still undelivered after %s were dropped", notifyDrainTimeout)
	}
	for _, w := range warnings {
		r.e.warn(r.rel, w[0], w[1])
	}
}
