package rollout

import (
	"context"
	"time"
)

// pacer times the analysis like Flagger's ticker: a check is due one interval after the
// weight change it judges (or after the previous check at that weight), so the time spent
// writing the weight, the state and the events counts towards the interval instead of adding
// to it. A run that falls behind (a check slower than the interval) checks again at once.
type pacer struct {
	interval time.Duration
	due      time.Time
}

// restart makes the next check due one interval from now; call it just before a weight change.
func (p *pacer) restart() { p.due = time.Now().Add(p.interval) }

// wait sleeps until the next check is due, until ctx ends, until the canary stops serving
// (errCanaryNotServing) or until its template is edited (errTargetEdited); watch may be nil.
func (p *pacer) wait(ctx context.Context, watch *deploymentWatch) error {
	t := time.NewTimer(time.Until(p.due))
	defer t.Stop()
	var lost, edited <-chan struct{}
	if watch != nil {
		lost, edited = watch.changed, watch.edited
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-lost:
		// Even a moment without Ready pods takes the weight away: the data plane sent
		// requests to nothing in that moment.
		return errCanaryNotServing
	case <-edited:
		return errTargetEdited
	case <-t.C:
	}
	p.due = p.due.Add(p.interval)
	if now := time.Now(); p.due.Before(now) {
		p.due = now
	}
	return nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
