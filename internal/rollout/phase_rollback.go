package rollout

import (
	"context"
	"fmt"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
)

// rollBack sets why the run rolls back and names the phase that does it.
func (r *run) rollBack(reason string) (Phase, error) {
	r.reason = reason
	return PhaseRollingBack, nil
}

// rollingBack sends all traffic to the primary, after checking that it serves, then scales the
// canary to zero and fails the run. It runs to the end even when the apply was cancelled.
// A primary without Ready pods gets no traffic: the rollback is held where traffic is served,
// and the message says so.
func (r *run) rollingBack(ctx context.Context) (Phase, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	weight := r.st.CanaryWeight
	reason := r.reason
	if reason == "" {
		reason = "rolling back"
	}
	// Neither the revision analysed nor the one this run was for is reverted to without
	// analysis from now on: the first record of the rollback says so already, so that a
	// later record that fails cannot leave either in the history.
	r.st.forgetPromoted(r.st.CanarySpec)
	r.st.forgetPromoted(r.hash)
	if err := r.record(cctx, PhaseRollingBack, warningEvent, reason+". Rolling back"); err != nil {
		// Traffic moves towards the primary, which any recovery would do too: a record
		// that cannot be written must not keep it on an analysis that failed.
		r.note("%v; rolling back all the same", err)
	}
	release := r.holdPrimaryScale(cctx)
	outcome, err := r.restorePrimary(cctx)
	release(cctx)
	if err != nil {
		outcome = fmt.Sprintf("Rollback at canary weight %d%% was incomplete: %v; %s.", weight, err, r.whereTraffic(cctx))
	} else if outcome == "" {
		outcome = fmt.Sprintf("Rolled back at canary weight %d%%: 100%% of traffic is back on the primary %s, and the canary %s is scaled to 0.",
			weight, r.rel.PrimaryName(), r.rel.Target)
	}
	r.recordRejection()
	if err := r.record(cctx, PhaseFailed, warningEvent, reason+". "+outcome); err != nil {
		return "", err
	}
	r.postRollout(cctx, PhaseFailed)
	return PhaseFailed, nil
}

// restorePrimary routes all traffic to the primary when it serves. It returns a message when
// it held the rollback instead (the primary has no Ready pods).
func (r *run) restorePrimary(ctx context.Context) (string, error) {
	serves, err := r.w.serving(ctx, r.rel.PrimaryName())
	if err != nil {
		if !r.canaryKnownLost(ctx) {
			return "", fmt.Errorf("checking the primary: %w", err)
		}
		// Unknown is not "no": the canary certainly serves nothing, and the primary served
		// at the last look, so its traffic goes where it is most likely served.
		r.note("the primary could not be read (%v), and the canary has no Ready pods: routing traffic to the primary", err)
		r.sawPrimaryReady() // the best evidence there is; the gate need not read again
		return "", r.routeToPrimary(ctx)
	}
	if !serves {
		rebuilt, err := r.rebuildMissingPrimary(ctx)
		if err != nil {
			return "", err
		}
		serves = rebuilt
	}
	if !serves {
		serves = r.awaitPrimaryPods(ctx)
	}
	if serves {
		r.sawPrimaryReady()
	}
	if !serves {
		if p, err := r.w.primary(ctx); err == nil && p == nil {
			return fmt.Sprintf("The rollback is held: the primary %s %s was deleted, and the target no longer holds the template the release last promoted (%s), "+
				"the only one it may be rebuilt from without an analysis (%s): set the target back to its last promoted template and apply (for example with the image it last released), "+
				"which rebuilds the primary and finishes the rollback.", r.rel.WorkloadKind(), r.rel.PrimaryName(), r.st.LastPromotedSpec, r.whereTraffic(ctx)), nil
		}
		return fmt.Sprintf("The rollback is held: the primary %s has no Ready pods, so traffic stays where it is served (%s); the next apply finishes the rollback once the primary is Ready.",
			r.rel.PrimaryName(), r.whereTraffic(ctx)), nil
	}
	return "", r.routeToPrimary(ctx)
}

// primaryPodsWait bounds how long a rollback waits for a primary without Ready pods (a
// restart, a node drain) before it is held: within the cleanup's own bound, so that the
// rollback still records where the traffic is when the apply was cancelled.
const primaryPodsWait = cleanupTimeout / 2

// awaitPrimaryPods waits, up to progress_deadline_seconds and primaryPodsWait, for a primary
// that exists but has no Ready pods to have some: most come back within seconds, and until
// they do the canary keeps traffic its template may not have earned. It reports whether they
// came.
func (r *run) awaitPrimaryPods(ctx context.Context) bool {
	name := r.rel.PrimaryName()
	if p, err := r.w.primary(ctx); err != nil || p == nil {
		return false
	}
	deadline := primaryPodsWait
	if d := r.rel.ProgressDeadline; d > 0 && d < deadline {
		deadline = d
	}
	r.note("the primary %s has no Ready pods: waiting up to %s for them before the rollback", name, deadline)
	wctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	if err := r.w.watchWorkload(wctx, name, nil, func(d *appsv1.Deployment) (bool, error) {
		return d != nil && kinds.HasReadyPods(d), nil
	}); err != nil {
		return false
	}
	r.sawPrimaryReady()
	return true
}

// rebuildMissingPrimary recreates a primary Deployment deleted behind the release, from the
// template the release last promoted (the only one it may run without an analysis), when the
// target or the manifest holds that template again. It reports whether the primary serves.
func (r *run) rebuildMissingPrimary(ctx context.Context) (bool, error) {
	if p, err := r.w.primary(ctx); err != nil || p != nil {
		return false, err
	}
	var source *appsv1.Deployment
	var err error
	if r.rel.Manifest != nil {
		// The manifest as it would be applied, without touching the target, which has traffic.
		source, err = r.w.patchManifest(ctx, 0, []string{metav1.DryRunAll})
	} else {
		source, err = r.w.target(ctx)
	}
	if err != nil {
		return false, err
	}
	revision, err := r.w.revision(ctx, source)
	if err != nil {
		return false, err
	}
	proof, err := promotion.PromotedBefore(r.st.LastPromotedSpec, revision)
	if err != nil {
		// The held rollback's message says to set the target back.
		return false, nil //nolint:nilerr // not an error: nothing to rebuild from yet
	}
	r.note("the primary %s was deleted; rebuilding it from the last promoted template %s", r.rel.WorkloadKind(), revision)
	r.replicas = r.primaryReplicas(ctx, source)
	r.primaryLive = nil
	if err := r.promote(ctx, source, proof); err != nil {
		return false, fmt.Errorf("rebuilding the deleted primary: %w", err)
	}
	if err := r.w.waitReadyFrom(ctx, r.rel.PrimaryName(), r.rel.ProgressDeadline, r.primaryLive); err != nil {
		return false, fmt.Errorf("rebuilding the deleted primary: %w", err)
	}
	return true, nil
}
