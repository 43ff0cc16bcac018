package rollout

import (
	"context"
	"time"
)

// eventBatchWindow bounds how long an Event may wait to be written. Under a shorter analysis
// interval, Normal Events (phase changes and weight steps) less than this apart share one
// Event, written at the latest with a Warning, with the next Event after the window, or when
// the run ends: otherwise a short interval makes the Events the largest share of a run's API
// requests. Each keeps its reason, its line and its time in the shared Event's message.
// Warnings are written at once, and under longer intervals every Event is.
const eventBatchWindow = 30 * time.Second

// event queues an Event for the event webhooks (package notify) and records it on the target as a
// Kubernetes Event, batched with its neighbours under a short interval (eventBatchWindow).
func (r *run) event(ctx context.Context, eventType, reason, message string) {
	now := r.e.now()
	if a := r.analyzer(); len(a.hooksOf(HookEvent)) > 0 {
		phase, note := r.st.Phase, r.noteLater()
		r.notifyLater(ctx, func(ctx context.Context) [][2]string {
			a.sendEvent(ctx, phase, eventType, message, now, note)
			return nil
		})
	}
	if eventType != normalEvent || r.rel.Analysis.Interval >= eventBatchWindow {
		r.flushEvents(ctx)
		r.store.event(ctx, eventType, reason, message)
		return
	}
	if r.pending.Full(now, reason, message, eventBatchWindow, maxEventMessage) {
		r.flushEvents(ctx)
	}
	r.pending.Add(now, reason, message)
}

// stepEvent tells of a weight step.
func (r *run) stepEvent(ctx context.Context, message string) {
	r.event(ctx, normalEvent, string(PhaseProgressing), message)
}

// flushEvents writes the pending Events as one, under the reason of the latest.
func (r *run) flushEvents(ctx context.Context) {
	if reason, message, ok := r.pending.Take(); ok {
		r.store.event(ctx, normalEvent, reason, message)
	}
}
