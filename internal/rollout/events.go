package rollout

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"time"
)

// eventBatchWindow bounds how long an Event may wait to be written. Under a shorter analysis
// interval, Normal Events (phase changes and weight steps) less than this apart share one
// Event, written at the latest with a Warning, with the next Event after the window, or when
// the run ends: otherwise a short interval makes the Events the largest share of a run's API
// requests. Each keeps its reason, its line and its time in the shared Event's message.
// Warnings are written at once, and under longer intervals every Event is.
const eventBatchWindow = 30 * time.Second

// pendingEvent is a Normal Event told to the event webhooks but not yet written.
type pendingEvent struct {
	at              time.Time
	reason, message string
}

// event queues an Event for the event webhooks (notifications.go) and records it on the target as a
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
	next := pendingEvent{at: now, reason: reason, message: message}
	if len(r.pending) > 0 && (now.Sub(r.pending[0].at) >= eventBatchWindow || len(batchedMessage(append(slices.Clip(r.pending), next))) > maxEventMessage) {
		r.flushEvents(ctx)
	}
	r.pending = append(r.pending, next)
}

// stepEvent tells of a weight step.
func (r *run) stepEvent(ctx context.Context, message string) {
	r.event(ctx, normalEvent, string(PhaseProgressing), message)
}

// batchedMessage is the message of one Event for several: a line each, with its reason and
// time, in order.
func batchedMessage(events []pendingEvent) string {
	if len(events) == 1 {
		return events[0].message
	}
	lines := make([]string, len(events))
	for i, e := range events {
		lines[i] = e.reason + ": " + e.message + " at " + e.at.UTC().Format("15:04:05Z")
	}
	return strings.Join(lines, "; ")
}

// batchedLine is one line of a batched message.
var batchedLine = regexp.MustCompile(`^([A-Za-z]+): (.*) at (\d\d:\d\d:\d\dZ)$`)

// EventStory splits an Event on the target into the Events it stands for, as reason and
// message pairs: itself, or each of those batchedMessage joined.
func EventStory(reason, message string) [][2]string {
	lines := strings.Split(message, "; ")
	if len(lines) < 2 {
		return [][2]string{{reason, message}}
	}
	story := make([][2]string, 0, len(lines))
	for _, line := range lines {
		m := batchedLine.FindStringSubmatch(line)
		if m == nil {
			return [][2]string{{reason, message}}
		}
		story = append(story, [2]string{m[1], m[2]})
	}
	return story
}

// flushEvents writes the pending Events as one, under the reason of the latest.
func (r *run) flushEvents(ctx context.Context) {
	if len(r.pending) == 0 {
		return
	}
	message, reason := batchedMessage(r.pending), r.pending[len(r.pending)-1].reason
	r.pending = nil
	r.store.event(ctx, normalEvent, reason, message)
}
