package rollout

import (
	"context"
	"fmt"
	"maps"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"
)

// A weighted release without a mesh (mesh_provider "kubernetes" with step weights) is a
// replica ratio behind the apex Service: the router scales the canary to its step's share of
// the primary's Ready pods and points the apex at router.LabelApex, which the pods of both
// sides carry. The Deployments keep their own selectors (app=<name> and app=<name>-primary),
// so neither selects the other's pods; the label is only the apex's. It is the release's, not
// the template's: TemplateHash leaves it out, so adding it is no new revision.

// RatioRouted reports a release whose partial splits are a replica ratio: a Deployment's
// (a kind released in place splits its own pods).
func (r Release) RatioRouted() bool {
	return r.Service.SelectorRouted && StrategyFor(r.Analysis).Weighted() && !kinds.ReleasedInPlace(r.TargetKind)
}

// ratioSelector is the apex's selector while both sides share the traffic.
func ratioSelector(rel Release) map[string]string {
	return map[string]string{router.LabelApex: rel.Apex()}
}

// labelForRatio gives a pod template the apex's label when the release is ratio-routed.
func (w workload) labelForRatio(t *corev1.PodTemplateSpec) {
	if !w.rel.RatioRouted() || t.Labels[router.LabelApex] == w.rel.Apex() {
		return
	}
	t.Labels = maps.Clone(t.Labels)
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[router.LabelApex] = w.rel.Apex()
}

// withoutApexLabel is a copy of t without the apex's label.
func withoutApexLabel(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	t = *t.DeepCopy()
	delete(t.Labels, router.LabelApex)
	return t
}

// needsApexLabel reports a canary template that lacks the apex's label its release needs.
func (w workload) needsApexLabel(t corev1.PodTemplateSpec) bool {
	return w.rel.RatioRouted() && t.Labels[router.LabelApex] != w.rel.Apex()
}

// unshareApex gives the primary alone an apex that still selects both sides of a replica
// ratio, before the canary scales up for its analysis: left so by a run that stopped with a
// canary of no Ready pods (it then served nothing, and the recovery had no traffic to move),
// the apex would hand the new canary pods their share of the traffic before any step.
func (r *run) unshareApex(ctx context.Context) error {
	if !r.rel.RatioRouted() {
		return nil
	}
	apex, err := r.w.ownedApex(ctx)
	if err != nil || apex == nil || !maps.Equal(apex.Spec.Selector, ratioSelector(r.rel)) {
		return err
	}
	r.note("Service %s/%s still selects the pods of both sides: giving it the primary's alone before the canary %s scales up", r.rel.Namespace, r.rel.Apex(), r.rel.Target)
	return r.setSplit(ctx, router.Weights{Primary: 100})
}

// scaleCanary scales the canary for its analysis. A ratio-routed release's canary also gets
// the apex's label in the same write when the template the run read (before) lacks it (a
// target_ref Deployment): the router refuses to let the apex select pods without it.
func (w workload) scaleCanary(ctx context.Context, before *appsv1.Deployment, replicas int32) error {
	if !w.needsApexLabel(before.Spec.Template) || w.scalers().ScaledObject() {
		// A KEDA-scaled target is scaled through its pause (w.scale); the provider refuses an
		// autoscaler_ref beside a replica ratio.
		return w.scale(ctx, w.rel.Target, replicas)
	}
	api := w.kube.AppsV1().Deployments(w.rel.Namespace)
	known := before.DeepCopy()
	err := onAPIError(ctx, func() error {
		d := known
		known = nil
		if d == nil {
			var err error
			if d, err = api.Get(ctx, w.rel.Target, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		w.labelForRatio(&d.Spec.Template)
		d.Spec.Replicas = &replicas
		_, err := api.Update(ctx, d, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("scaling %s %s/%s to %d with the label %s=%s: %w", w.rel.WorkloadKind(), w.rel.Namespace, w.rel.Target, replicas, router.LabelApex, w.rel.Apex(), err)
	}
	return nil
}

// A replica ratio is the canary's share of the Ready pods behind the apex, so a primary that
// loses pods hands their share to the canary without any write: 1 canary pod beside 4 primary
// ones is 20%, beside 1 it is 50%, beside none 100%. The run keeps the step's share at each
// analysis interval (keepRatio), through the traffic gate like every other write.

// ratioKeeper is what a ratio-routed run remembers of its primary between analysis intervals.
type ratioKeeper struct {
	// shortSince is when the primary was first seen with fewer Ready pods than replicas;
	// zero while it is whole.
	shortSince time.Time
}

// sizedBeside is how many Ready primary pods the router sized the canary's share for at its
// last write, 0 when unknown (router.Sizing).
func (r *run) sizedBeside() int32 {
	if sizing, ok := r.e.Router.(router.Sizing); ok {
		return sizing.SizedBeside()
	}
	return 0
}

// keepRatio runs at each analysis interval of a ratio-routed release whose canary shares the
// traffic. While the primary lacks pods, the step's split is written again, so that the router
// scales the canary to its share of the primary's Ready pods left and the status records what
// the apex serves; the step holds (held), neither advancing nor promoting a canary analysed
// beside a primary that is not whole. Once whole, the split is written again for all its pods
// and the step holds one more interval at that share; so does a canary found sized for fewer
// pods than the whole primary's, which lost pods between two checks. A primary short for longer than
// progress_deadline_seconds rolls the release back; one without any Ready pod leaves the
// canary serving alone (anything else is an outage), and the rollback is held until it has.
func (r *run) keepRatio(ctx context.Context) (held bool, next Phase, err error) {
	if w := r.split(); !r.rel.RatioRouted() || w.Matched || w.Canary == 0 || w.Canary == 100 {
		return false, "", nil
	}
	primary, err := r.w.primary(ctx)
	if err != nil {
		// Unknown is not whole: the step holds, and the next interval asks again, as long
		// as a short primary may be waited for.
		if r.ratio.shortSince.IsZero() {
			r.ratio.shortSince = r.e.now()
		}
		reason := fmt.Sprintf("reading the primary to keep the canary's share of the Ready pods behind Service %s/%s: %v", r.rel.Namespace, r.rel.Apex(), err)
		if deadline := r.rel.ProgressDeadline; deadline > 0 && r.e.now().Sub(r.ratio.shortSince) >= deadline {
			next, err := r.rollBack(reason)
			return true, next, err
		}
		r.note("%s", reason)
		return true, "", nil
	}
	var ready, replicas int32
	if primary != nil {
		ready, replicas = primary.Status.ReadyReplicas, 1
		if primary.Spec.Replicas != nil {
			replicas = *primary.Spec.Replicas
		}
	}
	name := fmt.Sprintf("the primary %s %s/%s", r.rel.WorkloadKind(), r.rel.Namespace, r.rel.PrimaryName())
	switch {
	case ready == 0:
		// The status records where the traffic is: all of it on the canary.
		r.syncLiveWeight(ctx)
		next, err := r.rollBack(fmt.Sprintf("%s has no Ready pods, so Service %s/%s serves the canary %s alone, whose analysis did not complete: "+
			"no share of the step can be kept without an outage", name, r.rel.Namespace, r.rel.Apex(), r.rel.Target))
		return true, next, err
	case ready < replicas:
		first := r.ratio.shortSince.IsZero()
		if first {
			r.ratio.shortSince = r.e.now()
		}
		if deadline := r.rel.ProgressDeadline; deadline > 0 && r.e.now().Sub(r.ratio.shortSince) >= deadline {
			next, err := r.rollBack(fmt.Sprintf("%s had %d of %d Ready pods for progress_deadline_seconds (%s): the canary %s was held at its step's share of them meanwhile",
				name, ready, replicas, deadline, r.rel.Target))
			return true, next, err
		}
		if ready != r.sizedBeside() {
			if err := r.setSplit(ctx, r.stepSplit()); err != nil {
				next, err := r.rollBack(fmt.Sprintf("keeping the canary at its step's share of the Ready pods of %s: %v", name, err))
				return true, next, err
			}
		}
		if first {
			r.event(ctx, warningEvent, "Halted", fmt.Sprintf("Halt advancement: %s has %d of %d Ready pods, so the canary %s is kept at its step's share of them (%s) until it is whole again",
				name, ready, replicas, r.rel.Target, splitText(r.split())))
		}
		return true, "", nil
	case !r.ratio.shortSince.IsZero():
		r.ratio = ratioKeeper{}
		if err := r.setSplit(ctx, r.stepSplit()); err != nil {
			next, err := r.rollBack(fmt.Sprintf("giving the canary its step's share again beside %s: %v", name, err))
			return true, next, err
		}
		r.event(ctx, normalEvent, "Progressing", fmt.Sprintf("%s has its %d Ready pods again: the canary %s is back at its step's share (%s)",
			name, ready, r.rel.Target, splitText(r.split())))
		return true, "", nil
	case ready != r.sizedBeside():
		// The primary lost pods and got them back between the split's write and this check,
		// or this process did not write the split: the canary was sized for other pods than
		// the whole primary's. Sized again, a check at another share than this one's does not
		// count.
		analysed := r.split()
		if err := r.setSplit(ctx, r.stepSplit()); err != nil {
			next, err := r.rollBack(fmt.Sprintf("giving the canary its step's share of the Ready pods of %s: %v", name, err))
			return true, next, err
		}
		return r.split() != analysed, "", nil
	}
	return false, "", nil
}

// stepSplit is the split the analysis's current step asks for (the last step's once all are
// walked, while a promotion gate holds).
func (r *run) stepSplit() router.Weights {
	splits := StrategyFor(r.rel.Analysis).Splits()
	return splits[min(r.st.Step, len(splits)-1)]
}

// primaryWithoutPodsDrift tells the plan where the traffic is when a run ended with the canary
// serving because the primary has no Ready pods to take it back (a held rollback).
func (w workload) primaryWithoutPodsDrift(ctx context.Context, st Status, live router.Weights) ([]string, error) {
	if st.Phase.active() || !canaryHasTraffic(live) {
		return nil, nil
	}
	primary, err := w.primary(ctx)
	if err != nil || kinds.HasReadyPods(primary) {
		return nil, err
	}
	return []string{fmt.Sprintf("the primary %s %s/%s has no Ready pods, so %s; the next apply finishes the rollback once the primary is Ready",
		w.rel.WorkloadKind(), w.rel.Namespace, w.rel.PrimaryName(), trafficText(w.rel, live))}, nil
}
