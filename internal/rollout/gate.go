package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The traffic gate. Every weight write of a run goes through setSplit, and setSplit asks admit
// first: a side gets user traffic only while it has Ready pods. The canary's readiness comes
// from the watch that follows it for the rest of the run once it was Ready (so a step costs no
// read), else from a read; the primary's from a read, when a write gives it more traffic.

// errPrimaryNotServing refuses traffic to a primary without Ready pods.
var errPrimaryNotServing = errors.New("the primary has no Ready pods")

// errCanaryNotPassed refuses more traffic, after the analysis passed, to a canary that no
// longer runs the template that passed: an unanalysed template gets no more than its step.
var errCanaryNotPassed = errors.New("the canary no longer runs the template that passed analysis")

// admit refuses a split that sends user traffic to a side without Ready pods. Mirrored
// copies are not user traffic: their answers are dropped.
func (r *run) admit(ctx context.Context, w router.Weights) error {
	if r.e.Owned != nil {
		return r.admitOwned(ctx, w)
	}
	if w.Canary > 0 || w.Matched {
		serves, err := r.canaryServes(ctx)
		if err != nil {
			return fmt.Errorf("checking the canary before routing to it: %w", err)
		}
		if !serves {
			return fmt.Errorf("%w: %s gets no traffic (%s refused)", errCanaryNotServing, r.rel.Target, splitText(w))
		}
	}
	if w.Canary > r.split().Canary && r.st.Phase.analysed() {
		passed, err := r.canaryRunsPassed(ctx)
		if err != nil {
			return fmt.Errorf("checking the canary's template before routing to it: %w", err)
		}
		if !passed {
			return fmt.Errorf("%w: %s gets no more traffic (%s refused)", errCanaryNotPassed, r.rel.Target, splitText(w))
		}
	}
	if gainsPrimaryTraffic(r.split(), w) && !r.takePrimaryReady() {
		serves, err := r.w.serving(ctx, r.rel.PrimaryName())
		if err != nil && r.canaryKnownLost(ctx) {
			// Unknown is not "no": traffic leaves a canary that certainly serves nothing.
			serves, err = true, nil
		}
		if err != nil {
			return fmt.Errorf("checking the primary before routing to it: %w", err)
		}
		if !serves {
			return fmt.Errorf("%w: %s gets no more traffic (%s refused)", errPrimaryNotServing, r.rel.PrimaryName(), splitText(w))
		}
	}
	return nil
}

// returnApex is the gate of a route that an interrupted destroy handed over to the apex
// Service (takeBackRoute, initializing): the routing object and the apex lead to the primary
// again only while it has Ready pods; until then the apex keeps serving from what it selects.
func (r *run) returnApex(ctx context.Context, key, value string) error {
	if !r.takePrimaryReady() {
		serves, err := r.w.serving(ctx, r.rel.PrimaryName())
		if err != nil {
			return fmt.Errorf("checking the primary before giving it the route back: %w", err)
		}
		if !serves {
			return fmt.Errorf("%w: Service %s/%s stays handed over to what it selects", errPrimaryNotServing, r.rel.Namespace, r.rel.Apex())
		}
	}
	if err := r.e.Router.Reconcile(ctx); err != nil {
		return err
	}
	if err := r.w.takeBackApex(ctx, key, value+"-primary"); err != nil {
		return fmt.Errorf("pointing Service %s/%s back at the primary: %w", r.rel.Namespace, r.rel.Apex(), err)
	}
	r.note("Service %s leads to the primary again", r.rel.Apex())
	return nil
}

// gainsPrimaryTraffic reports a write that sends the primary requests it did not get: a
// higher weight, or the requests an A/B match sent to the canary.
func gainsPrimaryTraffic(from, to router.Weights) bool {
	return to.Primary > from.Primary || (from.Matched && !to.Matched && to.Primary > 0)
}

// canaryRunsPassed reports whether the canary still runs the revision whose analysis passed:
// a later edit behind the release, or a new template that the next apply found after a killed
// promotion, has not passed anything.
func (r *run) canaryRunsPassed(ctx context.Context) (bool, error) {
	if r.canaryChanged {
		return false, nil
	}
	target, err := r.w.target(ctx)
	if err != nil {
		return false, err
	}
	revision, err := r.w.revision(ctx, target)
	if err != nil {
		return false, err
	}
	r.canaryChanged = revision != r.st.PassedSpec
	return !r.canaryChanged, nil
}

// canaryKnownLost reports a canary read to have no Ready pods (false when it cannot be read).
func (r *run) canaryKnownLost(ctx context.Context) bool {
	serves, err := r.w.serving(ctx, r.rel.Target)
	return err == nil && !serves
}

// sawPrimaryReady notes that the run has just seen the primary Ready (a wait or a read), so the
// gate's next check of it needs no read of its own.
func (r *run) sawPrimaryReady() { r.primaryReadySeen = true }

// takePrimaryReady uses up the note of sawPrimaryReady: it vouches for one write only.
func (r *run) takePrimaryReady() bool {
	seen := r.primaryReadySeen
	r.primaryReadySeen = false
	return seen
}

// canaryServes reports whether the canary has Ready pods. During the analysis's steps the watch
// that follows it answers, so a step costs no read (and a loss between two steps ends the
// interval at once, see pacer.wait); a watch that says no is confirmed by a read, since it may
// lag a recovery that a wait just saw. Elsewhere (the promotion's steps, a recovery) a read
// answers: those writes are few, and a read is never behind the watch.
func (r *run) canaryServes(ctx context.Context) (bool, error) {
	if watch := r.canaryWatch(); watch != nil && watch.serving() && r.st.Phase == PhaseProgressing {
		return true, nil
	}
	return r.w.serving(ctx, r.rel.Target)
}

// followCanary keeps watch for the rest of the run.
func (r *run) followCanary(watch *canaryWatch) {
	r.stopFollowingCanary()
	r.canary = watch
}

// stopFollowingCanary ends the run's canary watch, if any.
func (r *run) stopFollowingCanary() {
	if r.canary != nil {
		r.canary.Stop()
		r.canary = nil
	}
}

// canaryWatch is the watch of the canary's readiness, once the canary was Ready; nil before.
func (r *run) canaryWatch() *deploymentWatch {
	if r.canary == nil || !r.canary.isJudging() {
		return nil
	}
	return &r.canary.deploymentWatch
}

// moveOffLostCanary gives the primary the traffic of a canary that lost its Ready pods after
// its analysis passed (an OOM, an eviction, a drain), when the primary serves.
func (r *run) moveOffLostCanary(ctx context.Context) {
	if w := r.split(); w.Canary == 0 && !w.Matched {
		return
	}
	serves, err := r.canaryServes(ctx)
	if err != nil || serves {
		return
	}
	if err := r.setCanaryWeight(ctx, 0); err != nil {
		r.note("the canary %s lost its Ready pods during the promotion, and its traffic could not be moved to the primary: %v", r.rel.Target, err)
		return
	}
	r.event(ctx, warningEvent, string(r.st.Phase), fmt.Sprintf("the canary %s lost its Ready pods during the promotion: its traffic went to the primary %s",
		r.rel.Target, r.rel.PrimaryName()))
}

// moveOffLostPrimary gives the canary all traffic when its analysis has just passed and the
// primary has no Ready pods (deleted, evicted, drained while the analysis ran): until then the
// unanalysed canary could get no more than its step, now it is the side that may take it. A
// primary that cannot be read, or a canary that does not serve or no longer runs the passed
// template, leaves traffic where it is.
func (r *run) moveOffLostPrimary(ctx context.Context) {
	if r.split().Primary == 0 {
		return
	}
	// The copy read here is the one the promotion then writes onto: the check costs no read.
	primary, err := r.w.primary(ctx)
	if err != nil {
		return
	}
	if primary != nil {
		r.primaryLive = primary
	}
	if kinds.HasReadyPods(primary) {
		return
	}
	if passed, err := r.canaryRunsPassed(ctx); err != nil || !passed {
		return
	}
	if err := r.routeToCanary(ctx); err != nil {
		r.note("the primary %s has no Ready pods as the analysis passed, and traffic could not move to the canary: %v", r.rel.PrimaryName(), err)
		return
	}
	r.event(ctx, warningEvent, string(r.st.Phase), fmt.Sprintf("the primary %s has no Ready pods as the analysis passed: its traffic went to the canary %s, which runs the passed template",
		r.rel.PrimaryName(), r.rel.Target))
}

// moveSettledOffLostPrimary is settle's moveOffLostPrimary: the target is back on the last
// promoted template, so a canary with Ready pods runs what the primary is to run, and takes
// the primary's traffic while the primary has no Ready pods. A router object deleted behind
// the release is rebuilt at 100/0 (recover, prepare), and a promotion whose primary never
// became Ready left it without pods: else the traffic waited on it until it was Ready.
func (r *run) moveSettledOffLostPrimary(ctx context.Context) {
	if r.e.Owned != nil || r.inPlace() != nil || r.hash != r.st.LastPromotedSpec {
		return
	}
	live, err := r.e.Router.GetRoutes(ctx)
	if err != nil {
		return
	}
	r.st.recordSplit(live)
	if live.Primary == 0 {
		return
	}
	if serves, err := r.w.serving(ctx, r.rel.PrimaryName()); err != nil || serves {
		return
	}
	if err := r.routeToCanary(ctx); err != nil {
		r.note("the primary %s has no Ready pods, and its traffic could not move to the canary, which runs the promoted template: %v", r.rel.PrimaryName(), err)
		return
	}
	r.event(ctx, warningEvent, string(r.st.Phase), fmt.Sprintf("the primary %s has no Ready pods: its traffic went to the canary %s, which runs the promoted template, until the primary is Ready",
		r.rel.PrimaryName(), r.rel.Target))
}

// moveOffChangedCanary gives the primary the traffic of a canary whose template changed after
// its analysis passed: that template is unanalysed, so it gets no more than a first step, and
// after a completed analysis that is nothing. The gate refuses while the primary has no Ready
// pods: then nothing better exists, and the caller tries again once it has.
func (r *run) moveOffChangedCanary(ctx context.Context) {
	if !canaryHasTraffic(r.split()) {
		return
	}
	if err := r.setCanaryWeight(ctx, 0); err != nil {
		r.note("the canary %s no longer runs the template that passed analysis, and its traffic could not be moved to the primary yet: %v", r.rel.Target, err)
		return
	}
	r.event(ctx, warningEvent, string(r.st.Phase), fmt.Sprintf("the canary %s no longer runs the template that passed analysis: its traffic went to the primary %s, and the new template is analysed by the next rollout",
		r.rel.Target, r.rel.PrimaryName()))
}

// waitPrimaryWatchingCanary waits for the primary to be Ready after the promotion's copy, or
// after it lost its Ready pods. Meanwhile every side with traffic keeps Ready pods and the
// passed template, whenever the other side can take over: a canary that loses its Ready pods
// gives its traffic to the primary; a primary that loses its own gives its traffic to the
// canary, whose template passed; and a canary whose template changed gives its traffic to
// the primary as soon as the primary has Ready pods (of the promoted or the passed template).
func (r *run) waitPrimaryWatchingCanary(ctx context.Context) error {
	for {
		// The recorded split is what this run last wrote, but someone may have written the
		// router since (a hand edit, a tool resetting it to 100/0): the primary it waits for
		// may have no Ready pods, so whether it carries traffic is read from the router.
		r.syncLiveWeight(ctx)
		wctx, cancel := context.WithCancelCause(ctx)
		if watch := r.canaryWatch(); watch != nil {
			edited := watch.edited
			if r.canaryChanged {
				edited = nil // known: the primary's watch says when it can take the traffic
			}
			go func() {
				select {
				case <-watch.changed:
					cancel(errCanaryNotServing)
				case <-edited:
					cancel(errCanaryNotPassed)
				case <-wctx.Done():
				}
			}()
		}
		// A router written by someone else during the wait (reset to 100/0, say) may send
		// traffic to a primary without Ready pods: while the primary has none, its live weight
		// is re-read every routerRecheck, well within what a lost side may take to lose its
		// traffic.
		var primaryUnready atomic.Bool
		rechecked := make(chan struct{})
		if r.canaryChanged {
			close(rechecked)
		} else {
			go func() {
				defer close(rechecked)
				r.recheckRouterWhile(wctx, &primaryUnready, func() { cancel(errPrimaryNotServing) })
			}()
		}
		// The watch calls this on the waiting goroutine, so it reads the run's state safely.
		observePrimary := func(d *appsv1.Deployment) {
			primaryUnready.Store(!kinds.HasReadyPods(d))
			switch split := r.split(); {
			case r.canaryChanged && canaryHasTraffic(split) && kinds.HasReadyPods(d):
				cancel(errCanaryNotPassed)
			case !r.canaryChanged && split.Primary > 0 && !kinds.HasReadyPods(d):
				cancel(errPrimaryNotServing)
			}
		}
		err := r.w.waitReadyObserving(wctx, r.rel.PrimaryName(), r.rel.ProgressDeadline, r.primaryLive, observePrimary)
		cause := context.Cause(wctx)
		cancel(nil)
		<-rechecked // the router is this goroutine's again
		if ctx.Err() != nil {
			return err
		}
		switch {
		case errors.Is(cause, errCanaryNotServing):
			r.moveOffLostCanary(ctx)
		case errors.Is(cause, errCanaryNotPassed):
			r.canaryChanged = true
			r.moveOffChangedCanary(ctx)
		case errors.Is(cause, errPrimaryNotServing):
			if err := r.routeToCanary(ctx); err != nil {
				r.note("the primary lost its Ready pods before the promotion completed, and traffic could not move to the canary: %v", err)
				if !r.canaryChanged {
					// Nothing better exists until a side is back: the primary, or the canary,
					// whose template passed; whichever comes first takes the traffic.
					canaryBack, err := r.waitPrimaryOrCanary(ctx)
					if !canaryBack {
						return err
					}
				}
			}
		default:
			return err
		}
		// The primary's copy is older now; the next wait lists it afresh.
		r.primaryLive = nil
	}
}

// errCanaryServing ends a wait for the primary when the canary has Ready pods again.
var errCanaryServing = errors.New("the canary has Ready pods again")

// waitPrimaryOrCanary waits, with neither side Ready, for the primary to be Ready again, or
// for the canary to have Ready pods first (canaryBack): the caller then gives it the traffic.
func (r *run) waitPrimaryOrCanary(ctx context.Context) (canaryBack bool, err error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		pollUntil(wctx, func() bool {
			serves, err := r.w.serving(wctx, r.rel.Target)
			if err == nil && serves {
				cancel(errCanaryServing)
			}
			return err == nil && serves
		})
	}()
	err = r.w.waitReadyFrom(wctx, r.rel.PrimaryName(), r.rel.ProgressDeadline, nil)
	cause := context.Cause(wctx)
	cancel(nil)
	<-polled
	if ctx.Err() == nil && errors.Is(cause, errCanaryServing) {
		return true, nil
	}
	return false, err
}

// routerRecheck is how often a wait for a primary without Ready pods re-reads the router.
const routerRecheck = 400 * time.Millisecond

// recheckRouterWhile calls lost once the router gives the primary traffic while
// primaryUnready holds, until ctx ends. It only reads the router: the waiting goroutine acts.
func (r *run) recheckRouterWhile(ctx context.Context, primaryUnready *atomic.Bool, lost func()) {
	pollUntil(ctx, func() bool {
		if !primaryUnready.Load() {
			return false
		}
		w, err := r.e.Router.GetRoutes(ctx)
		if err == nil && w.Primary > 0 && primaryUnready.Load() {
			lost()
			return true
		}
		return false
	})
}

// pollUntil calls done every routerRecheck until it reports true or ctx ends: the polls of
// the waits for a side without Ready pods, which a watch of one object cannot replace.
func pollUntil(ctx context.Context, done func() bool) {
	tick := time.NewTicker(routerRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if done() {
			return
		}
	}
}

// routeToPrimaryWatchingIt is routeToPrimary for a canary that runs the passed template: the
// primary may lose its Ready pods as it takes the traffic back, so it is watched through the
// drain delay before the canary is scaled to zero. It fails with
// errPrimaryNotServing, the canary's pods kept, when the primary lost them: the caller gives
// the traffic back to the canary.
func (r *run) routeToPrimaryWatchingIt(ctx context.Context) error {
	return r.routeToPrimaryDraining(ctx, r.drainWatchingPrimary)
}

// drainWatchingPrimary waits the drain delay, ended early with errPrimaryNotServing when the
// primary loses its Ready pods (or is not there at all).
func (r *run) drainWatchingPrimary(ctx context.Context) error {
	name := r.rel.PrimaryName()
	dctx, cancel := context.WithTimeout(ctx, r.e.drainDelay())
	defer cancel()
	seen := false
	err := r.w.watchWorkload(dctx, name, nil, func(d *appsv1.Deployment) (bool, error) {
		seen = true
		return d == nil || !kinds.HasReadyPods(d), nil
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil, dctx.Err() != nil && !seen:
		return fmt.Errorf("%w: %s lost them as it took the traffic back; the canary %s keeps its pods", errPrimaryNotServing, name, r.rel.Target)
	case dctx.Err() != nil:
		return nil // watched Ready through the whole drain delay
	}
	// The watch failed: a read answers instead, once the drain delay is over.
	if err := sleep(dctx, r.e.drainDelay()); err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	serves, err := r.w.serving(ctx, name)
	if err != nil {
		return fmt.Errorf("checking the primary before scaling the canary down: %w", err)
	}
	if !serves {
		return fmt.Errorf("%w: %s lost them as it took the traffic back; the canary %s keeps its pods", errPrimaryNotServing, name, r.rel.Target)
	}
	return nil
}
