package rollout

import (
	"context"
	"fmt"
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
	if err := r.record(cctx, PhaseRollingBack, warningEvent, reason+". Rolling back"); err != nil {
		// Traffic moves towards the primary, which any recovery would do too: a record
		// that cannot be written must not keep it on an analysis that failed.
		r.e.logf("%s/%s: %v; rolling back all the same", r.rel.Namespace, r.rel.Name, err)
	}
	outcome, err := r.restorePrimary(cctx)
	if err != nil {
		outcome = fmt.Sprintf("Rollback at canary weight %d%% was incomplete: %v; %s.", weight, err, r.whereTraffic(cctx))
	} else if outcome == "" {
		outcome = fmt.Sprintf("Rolled back at canary weight %d%%: 100%% of traffic is back on the primary %s, and the canary %s is scaled to 0.",
			weight, r.rel.PrimaryName(), r.rel.Target)
	}
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
		return "", fmt.Errorf("checking the primary: %w", err)
	}
	if serves {
		r.sawPrimaryReady()
	}
	if !serves {
		return fmt.Sprintf("The rollback is held: the primary %s has no Ready pods, so traffic stays where it is served (%s); the next apply finishes the rollback once the primary is Ready.",
			r.rel.PrimaryName(), r.whereTraffic(ctx)), nil
	}
	return "", r.routeToPrimary(ctx)
}
