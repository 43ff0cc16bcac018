package rollout

import "time"

// heldStep is since when a step has been held for one reason: its checks do not count, and
// a hold that lasts progress_deadline_seconds ends the run in a rollback, so that no hold
// outlasts the deadline a stuck rollout gets.
type heldStep struct{ since time.Time }

func (h *heldStep) clear() { h.since = time.Time{} }

// progressDeadline is the release's progress_deadline_seconds, or Kubernetes' default.
func (r *run) progressDeadline() time.Duration {
	if r.rel.ProgressDeadline > 0 {
		return r.rel.ProgressDeadline
	}
	return 10 * time.Minute
}

// heldPastDeadline starts h if it is not held yet, and reports whether it has been held for
// the progress deadline.
func (r *run) heldPastDeadline(h *heldStep) (time.Duration, bool) {
	now := r.e.now()
	if h.since.IsZero() {
		h.since = now
	}
	deadline := r.progressDeadline()
	return deadline, now.Sub(h.since) >= deadline
}
