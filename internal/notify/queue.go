// Package notify carries a run's news off its path: a queue that delivers notifications
// (event webhooks, alerts) in order on a goroutine of its own, and the batching of the
// Kubernetes Events a run writes on its target.
package notify

import (
	"context"
	"sync"
	"time"
)

// Notifications are news, not part of the release: they leave the run's path, so traffic
// moves first and a slow sink never holds a rollback. One goroutine delivers them in order;
// the run waits for what is left when it ends, for a bounded time, and reports their warnings
// then, from its own goroutine.

// Notification delivers one notification and returns the warnings it has for the apply, each
// a summary and a detail.
type Notification func(ctx context.Context) [][2]string

// Queue delivers notifications in order.
type Queue struct {
	mu       sync.Mutex
	queue    []Notification
	warnings [][2]string
	wake     chan struct{}
	idle     chan struct{} // closed while the queue is empty and nothing is being delivered
	ctx      context.Context
	stop     context.CancelFunc
}

// Start starts a queue. It outlives ctx's cancellation: a cancelled apply still tells its
// sinks how it ended (Drain bounds the wait).
func Start(ctx context.Context) *Queue {
	nctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	q := &Queue{wake: make(chan struct{}, 1), idle: make(chan struct{}), ctx: nctx, stop: stop}
	close(q.idle)
	go q.deliver()
	return q
}

// Push queues note.
func (q *Queue) Push(note Notification) {
	q.mu.Lock()
	if len(q.queue) == 0 {
		select {
		case <-q.idle:
			q.idle = make(chan struct{})
		default:
		}
	}
	q.queue = append(q.queue, note)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *Queue) deliver() {
	for {
		q.mu.Lock()
		if len(q.queue) == 0 {
			select {
			case <-q.idle:
			default:
				close(q.idle)
			}
			q.mu.Unlock()
			select {
			case <-q.wake:
				continue
			case <-q.ctx.Done():
				return
			}
		}
		next := q.queue[0]
		q.queue = q.queue[1:]
		q.mu.Unlock()
		warnings := next(q.ctx)
		q.mu.Lock()
		q.warnings = append(q.warnings, warnings...)
		q.mu.Unlock()
	}
}

// Drain waits, for at most timeout, for the notifications still queued, stops the queue and
// returns their warnings; dropped reports notifications left undelivered at the timeout.
func (q *Queue) Drain(timeout time.Duration) (warnings [][2]string, dropped bool) {
	q.mu.Lock()
	idle := q.idle
	q.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	// Not the run's context: a cancelled apply still tells its sinks how it ended, within the bound.
	select {
	case <-idle:
	case <-timer.C:
		dropped = true
	}
	q.stop()
	q.mu.Lock()
	warnings = q.warnings
	q.mu.Unlock()
	return warnings, dropped
}
