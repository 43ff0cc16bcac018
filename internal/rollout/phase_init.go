package rollout

import (
	"context"
	"fmt"
)

// initializing creates the primary from the target, then the Services and the router object,
// and scales the target to zero. It is the one way a template becomes the primary without an
// analysis, and only for a release that was never initialised before.
func (r *run) initializing(ctx context.Context) (Phase, error) {
	if err := r.record(ctx, PhaseInitializing, normalEvent, "Initializing: creating the primary copy of the target"); err != nil {
		return "", err
	}
	target, err := r.prepareTarget(ctx)
	if err != nil {
		return "", err
	}
	key, value, err := selector(target)
	if err != nil {
		return "", err
	}
	if r.hash, err = r.w.revision(ctx, target); err != nil {
		return "", err
	}
	r.target = target
	r.replicas = r.primaryReplicas(ctx, target)
	if err := r.ensurePrimary(ctx, target, r.hash); err != nil {
		return "", err
	}
	if err := r.w.waitReadyFrom(ctx, r.rel.PrimaryName(), r.rel.ProgressDeadline, r.primaryLive); err != nil {
		return "", fmt.Errorf("primary Deployment %s/%s did not become ready: %w", r.rel.Namespace, r.rel.PrimaryName(), err)
	}
	// Services and routes go live only once the primary serves, so there is no gap in traffic.
	if err := r.w.ensureServices(ctx, target, key, value); err != nil {
		return "", err
	}
	if err := r.e.Router.Reconcile(ctx); err != nil {
		return "", err
	}
	if err := r.routeToPrimary(ctx); err != nil {
		return "", err
	}
	if err := r.w.ensurePrimaryAutoscaler(ctx); err != nil {
		return "", err
	}
	r.st.LastAppliedSpec, r.st.LastPromotedSpec, r.st.PrimarySpec = r.hash, r.hash, r.hash
	r.st.CanaryWeight, r.st.Initialized = 0, true
	return PhaseInitialized, r.record(ctx, PhaseInitialized, normalEvent,
		fmt.Sprintf("Initialization done: %s serves all traffic", r.rel.PrimaryName()))
}
