package rollout

import (
	"context"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
)

// scalers are the release's autoscalers (package autoscaler).
func (w workload) scalers() autoscaler.Scalers {
	return autoscaler.Scalers{Kube: w.kube, Dyn: w.dyn, Namespace: w.rel.Namespace, Ref: w.rel.Autoscaler,
		Target: w.rel.Target, Primary: w.rel.PrimaryName(), TargetKind: w.rel.WorkloadKind(),
		Labels: w.ownedLabels(), FieldManager: FieldManager, CheckOwned: w.checkOwned}
}

// canaryReplicas is how many replicas the canary gets for its analysis: the autoscaler's
// minimum when there is one, else as many as the primary.
func (r *run) canaryReplicas(ctx context.Context) int32 {
	if r.rel.Autoscaler == nil {
		return r.replicas
	}
	return r.w.scalers().CanaryReplicas(ctx)
}

// rollingOut reports a phase of a rollout under way: a run that finds one resumes it, and the
// primary's replicas it recorded at its start stay the baseline.
func rollingOut(p Phase) bool {
	switch p {
	case PhaseProgressing, PhaseWaiting, PhaseWaitingPromotion, PhasePromoting, PhaseFinalising, PhaseRollingBack:
		return true
	}
	return false
}

// recordPrimaryBaseline keeps the primary's replicas as the rollout starts: they served the
// whole load, and the primary gets at least as many back before the traffic returns to it
// (Flagger #1600, #1209, #869: during the analysis the primary's autoscaler scales it down as
// the canary takes traffic). A resumed rollout keeps the larger of the two counts.
func (r *run) recordPrimaryBaseline(ctx context.Context) {
	if r.rel.Autoscaler == nil {
		r.st.PrimaryReplicasBefore = 0
		return
	}
	p, err := r.w.primary(ctx)
	if err != nil || p == nil || p.Spec.Replicas == nil {
		return
	}
	now := *p.Spec.Replicas
	if rollingOut(r.st.Phase) && r.st.PrimaryReplicasBefore > now {
		return
	}
	r.st.PrimaryReplicasBefore = now
}

// holdPrimaryScale makes the primary as large as it was before the rollout before traffic
// returns to it: the primary's autoscaler keeps that many as its minimum (so that it does
// not scale the primary down again meanwhile), the primary is scaled to it when it has fewer,
// and the run waits until they are Ready, within progress_deadline. It returns what puts the
// autoscaler's minimum back. Best effort: a primary that cannot be held gets the traffic all
// the same (a note says so), as it did before.
func (r *run) holdPrimaryScale(ctx context.Context) (release func(context.Context)) {
	release = func(context.Context) {}
	want := r.st.PrimaryReplicasBefore
	if r.rel.Autoscaler == nil || want < 1 {
		return release
	}
	held, err := r.w.scalers().HoldMin(ctx, want)
	if err != nil {
		r.note("the primary's autoscaler could not hold %d replicas while traffic returns to the primary: %v", want, err)
		return release
	}
	release = func(ctx context.Context) {
		if err := r.w.scalers().EnsurePrimary(ctx); err != nil {
			r.note("putting back the minimum of the primary's autoscaler: %v; the next apply does it", err)
		}
	}
	// Read afresh: the autoscaler scales the primary behind the run's copy.
	p, err := r.w.primary(ctx)
	if err != nil || p == nil || p.Spec.Replicas == nil || !kinds.HasReadyPods(p) {
		// A primary without Ready pods is the rollback's and the promotion's own concern.
		return release
	}
	if *p.Spec.Replicas < held {
		if err := r.w.scale(ctx, r.rel.PrimaryName(), held); err != nil {
			r.note("%v; the autoscaler's held minimum scales it", err)
		}
		r.primaryLive = nil
	}
	if err := r.w.waitReady(ctx, r.rel.PrimaryName(), r.rel.ProgressDeadline); err != nil {
		r.note("the primary did not have its %d pre-rollout replicas Ready in time (%v): traffic returns to it all the same", held, err)
		return release
	}
	r.primaryLive = nil
	r.note("the primary %s has its %d pre-rollout replicas Ready before traffic returns to it", r.rel.PrimaryName(), held)
	return release
}
