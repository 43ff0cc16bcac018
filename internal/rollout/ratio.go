package rollout

import (
	"context"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// A weighted release without a mesh (mesh_provider "kubernetes" with step weights) is a
// replica ratio behind the apex Service: the router scales the canary to its step's share of
// the primary's Ready pods and points the apex at router.LabelApex, which the pods of both
// sides carry. The Deployments keep their own selectors (app=<name> and app=<name>-primary),
// so neither selects the other's pods; the label is only the apex's. It is the release's, not
// the template's: TemplateHash leaves it out, so adding it is no new revision.

// RatioRouted reports a release whose partial splits are a replica ratio: a Deployment's
// (a StatefulSet's are its partition).
func (r Release) RatioRouted() bool {
	return r.Service.SelectorRouted && StrategyFor(r.Analysis).Weighted() && r.TargetKind != KindStatefulSet
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

// scaleCanary scales the canary for its analysis. A ratio-routed release's canary also gets
// the apex's label in the same write when the template the run read (before) lacks it (a
// target_ref Deployment): the router refuses to let the apex select pods without it.
func (w workload) scaleCanary(ctx context.Context, before *appsv1.Deployment, replicas int32) error {
	if !w.needsApexLabel(before.Spec.Template) || w.rel.scaledObject() {
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
		return fmt.Errorf("scaling Deployment %s/%s to %d with the label %s=%s: %w", w.rel.Namespace, w.rel.Target, replicas, router.LabelApex, w.rel.Apex(), err)
	}
	return nil
}
