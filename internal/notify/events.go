package notify

import (
	"regexp"
	"slices"
	"strings"
	"time"
)

// Batch is the Normal Events of a run told but not yet written: under a short analysis
// interval, Events less than a window apart share one Event, so that they are not the largest
// share of a run's API requests. Each keeps its reason, its line and its time in the shared
// Event's message (EventStory splits it again).
type Batch struct {
	pending []pendingEvent
}

type pendingEvent struct {
	at              time.Time
	reason, message string
}

// Full reports whether an Event told at at must not join the batch: the batch's first Event is
// window old, or the shared message would grow beyond maxLen.
func (b *Batch) Full(at time.Time, reason, message string, window time.Duration, maxLen int) bool {
	next := pendingEvent{at: at, reason: reason, message: message}
	return len(b.pending) > 0 && (at.Sub(b.pending[0].at) >= window || len(batchedMessage(append(slices.Clip(b.pending), next))) > maxLen)
}

// Add adds an Event to the batch.
func (b *Batch) Add(at time.Time, reason, message string) {
	b.pending = append(b.pending, pendingEvent{at: at, reason: reason, message: message})
}

// Take empties the batch into one Event, under the reason of the latest; ok is false when the
// batch was empty.
func (b *Batch) Take() (reason, message string, ok bool) {
	if len(b.pending) == 0 {
		return "", "", false
	}
	message, reason = batchedMessage(b.pending), b.pending[len(b.pending)-1].reason
	b.pending = nil
	return reason, message, true
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

// EventStory splits an Event into the Events it stands for, as reason and message pairs:
// itself, or each of those a Batch joined.
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
