package rollout

import (
	"context"
	"fmt"
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationHeldMinReplicas on the primary's autoscaler marks a minimum the release holds at
// the primary's pre-rollout replicas while traffic returns to the primary (promotion's
// finalising, a rollback); its value is the minimum the autoscaler had. The run puts the
// minimum back when the traffic is back; a run killed in between leaves it to the next run,
// whose reconciliation of the autoscaler (ensurePrimaryAutoscaler) writes the target's again,
// and until then the plan shows it as drift.
const AnnotationHeldMinReplicas = "canary-release.dev/held-min-replicas"

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
	held, err := r.w.holdAutoscalerMin(ctx, want)
	if err != nil {
		r.note("the primary's autoscaler could not hold %d replicas while traffic returns to the primary: %v", want, err)
		return release
	}
	release = func(ctx context.Context) {
		if err := r.w.ensurePrimaryAutoscaler(ctx); err != nil {
			r.note("putting back the minimum of the primary's autoscaler: %v; the next apply does it", err)
		}
	}
	// Read afresh: the autoscaler scales the primary behind the run's copy.
	p, err := r.w.primary(ctx)
	if err != nil || p == nil || p.Spec.Replicas == nil || !hasReadyPods(p) {
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

// holdAutoscalerMin raises the primary autoscaler's minimum to want (at most its maximum),
// recording the minimum it had in AnnotationHeldMinReplicas. It returns the minimum it holds.
func (w workload) holdAutoscalerMin(ctx context.Context, want int32) (int32, error) {
	if w.rel.scaledObject() {
		return w.holdScaledObjectMin(ctx, want)
	}
	api := w.kube.AutoscalingV2().HorizontalPodAutoscalers(w.rel.Namespace)
	var held int32
	err := onAPIError(ctx, func() error {
		live, err := api.Get(ctx, w.rel.primaryAutoscalerName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := w.checkOwned(live, "HorizontalPodAutoscaler"); err != nil {
			return err
		}
		held = min(want, live.Spec.MaxReplicas)
		if ptrValue(live.Spec.MinReplicas) >= held {
			held = ptrValue(live.Spec.MinReplicas)
			return nil
		}
		if _, ok := live.Annotations[AnnotationHeldMinReplicas]; !ok {
			live.Annotations = mergeLabels(live.Annotations, map[string]string{AnnotationHeldMinReplicas: strconv.Itoa(int(ptrValue(live.Spec.MinReplicas)))})
		}
		live.Spec.MinReplicas = &held
		_, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("HorizontalPodAutoscaler %s/%s: %w", w.rel.Namespace, w.rel.primaryAutoscalerName(), err)
	}
	return held, nil
}

// heldMinDrift tells of a minimum a run held and did not put back (it was killed in between).
func heldMinDrift(live *autoscalingv2.HorizontalPodAutoscaler, wantMin int32) []string {
	was, ok := live.Annotations[AnnotationHeldMinReplicas]
	if !ok {
		return nil
	}
	return []string{fmt.Sprintf("HorizontalPodAutoscaler %s/%s still holds minReplicas %d for a promotion or rollback that did not finish (it had %s); the next apply puts back %d",
		live.Namespace, live.Name, ptrValue(live.Spec.MinReplicas), was, wantMin)}
}
