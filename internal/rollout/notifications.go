package rollout

import (
	"context"
	"sync"
	"time"
)

// Notifications (event webhooks and alerts) are news, not part of the release: they leave the
// run's path, so traffic moves first and a slow sink never holds a rollback. One goroutine
// delivers them in order; the run waits for what is left when it ends, for at most
// notifyDrainTimeout, and reports their warnings then, from its own goroutine.

// notifyDrainTimeout bounds how long a finished run waits for its notifications.
const notifyDrainTimeout = 30 * time.Second

// notification delivers one notification and returns the warnings it has for the apply.
type notification func(ctx context.Context) [][2]string

type notifier struct {
	mu       sync.Mutex
	queue    []notification
	warnings [][2]string
	wake     chan struct{}
	idle     chan struct{} // closed while the queue is empty and nothing is being delivered
	ctx      context.Context
	stop     context.CancelFunc
}

// notifyLater queues n; the first notification starts the run's notifier.
func (r *run) notifyLater(ctx context.Context, n notification) {
	if r.notes == nil {
		nctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		r.notes = &notifier{wake: make(chan struct{}, 1), idle: make(chan struct{}), ctx: nctx, stop: stop}
		close(r.notes.idle)
		go r.notes.deliver()
	}
	r.notes.push(n)
}

func (n *notifier) push(note notification) {
	n.mu.Lock()
	if len(n.queue) == 0 {
		select {
		case <-n.idle:
			n.idle = make(chan struct{})
		default:
		}
	}
	n.queue = append(n.queue, note)
	n.mu.Unlock()
	notify(n.wake)
}

func (n *notifier) deliver() {
	for {
		n.mu.Lock()
		if len(n.queue) == 0 {
			select {
			case <-n.idle:
			default:
				close(n.idle)
			}
			n.mu.Unlock()
			select {
			case <-n.wake:
				continue
			case <-n.ctx.Done():
				return
			}
		}
		next := n.queue[0]
		n.queue = n.queue[1:]
		n.mu.Unlock()
		warnings := next(n.ctx)
		n.mu.Lock()
		n.warnings = append(n.warnings, warnings...)
		n.mu.Unlock()
	}
}

// drainNotifications waits, for at most notifyDrainTimeout, for the notifications still
// queued, stops the notifier and passes their warnings on.
func (r *run) drainNotifications(context.Context) {
	n := r.notes
	if n == nil {
		return
	}
	r.notes = nil
	n.mu.Lock()
	idle := n.idle
	n.mu.Unlock()
	timer := time.NewTimer(notifyDrainTimeout)
	defer timer.Stop()
	// Not ctx: a cancelled apply still tells its sinks how it ended, within the bound.
	select {
	case <-idle:
	case <-timer.C:
		r.note("notifications still undelivered after %s were dropped", notifyDrainTimeout)
	}
	n.stop()
	n.mu.Lock()
	warnings := n.warnings
	n.mu.Unlock()
	for _, w := range warnings {
		r.e.warn(r.rel, w[0], w[1])
	}
}
