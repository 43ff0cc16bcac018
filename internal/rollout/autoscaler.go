package rollout

import (
	"context"
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Autoscaler is the target's HorizontalPodAutoscaler (Flagger's autoscalerRef). The primary
// gets a "<name>-primary" copy that scales it, kept in sync on every apply, and the canary
// is scaled for its analysis from the autoscaler's minimum.
type Autoscaler struct {
	Name string
	// PrimaryMinReplicas and PrimaryMaxReplicas override the copy's bounds; 0 keeps the
	// target autoscaler's (Flagger's primaryScalerReplicas).
	PrimaryMinReplicas int32
	PrimaryMaxReplicas int32
	// Kind is KindScaledObject for a KEDA ScaledObject; empty is a HorizontalPodAutoscaler.
	Kind string
	// PrimaryScalerQueries replace, by trigger name, the queries of the primary's copy of a
	// ScaledObject (Flagger's primaryScalerQueries).
	PrimaryScalerQueries map[string]string
}

// primaryAutoscalerName is the primary's copy of the target's autoscaler.
func (r Release) primaryAutoscalerName() string { return r.Autoscaler.Name + "-primary" }

// targetAutoscaler reads the target's HorizontalPodAutoscaler.
func (w workload) targetAutoscaler(ctx context.Context) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	hpa, err := w.kube.AutoscalingV2().HorizontalPodAutoscalers(w.rel.Namespace).Get(ctx, w.rel.Autoscaler.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("autoscaler_ref: HorizontalPodAutoscaler %s/%s: %w", w.rel.Namespace, w.rel.Autoscaler.Name, err)
	}
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != w.rel.Target {
		return nil, fmt.Errorf("autoscaler_ref: HorizontalPodAutoscaler %s/%s scales %s %s, not the target %s %s",
			w.rel.Namespace, hpa.Name, ref.Kind, ref.Name, w.rel.WorkloadKind(), w.rel.Target)
	}
	return hpa, nil
}

// primaryAutoscalerFrom is the primary's copy of the target's autoscaler.
func (w workload) primaryAutoscalerFrom(target *autoscalingv2.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	spec := *target.Spec.DeepCopy()
	spec.ScaleTargetRef.Name = w.rel.PrimaryName()
	if n := w.rel.Autoscaler.PrimaryMinReplicas; n > 0 {
		spec.MinReplicas = &n
	}
	if n := w.rel.Autoscaler.PrimaryMaxReplicas; n > 0 {
		spec.MaxReplicas = n
	}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: w.rel.primaryAutoscalerName(), Namespace: w.rel.Namespace, Labels: w.ownedLabels()},
		Spec:       spec,
	}
}

// ensurePrimaryAutoscaler creates or updates the primary's autoscaler from the target's.
func (w workload) ensurePrimaryAutoscaler(ctx context.Context) error {
	if w.rel.Autoscaler == nil {
		return nil
	}
	if w.rel.scaledObject() {
		return w.ensurePrimaryScaledObject(ctx)
	}
	target, err := w.targetAutoscaler(ctx)
	if err != nil {
		return err
	}
	want := w.primaryAutoscalerFrom(target)
	return upsertOwned(ctx, w, w.kube.AutoscalingV2().HorizontalPodAutoscalers(w.rel.Namespace), "HorizontalPodAutoscaler", want,
		func(live *autoscalingv2.HorizontalPodAutoscaler) bool {
			live.Spec = want.Spec
			// A minimum held for a promotion or rollback (holdPrimaryScale) is put back here,
			// by the run that held it or by the next one.
			delete(live.Annotations, AnnotationHeldMinReplicas)
			return true
		})
}

// canaryReplicas is how many replicas the canary gets for its analysis: the autoscaler's
// minimum when there is one, else as many as the primary.
func (r *run) canaryReplicas(ctx context.Context) int32 {
	if r.rel.Autoscaler == nil {
		return r.replicas
	}
	if r.rel.scaledObject() {
		so, err := r.w.targetScaledObject(ctx)
		if err != nil || scaledObjectMin(so) < 1 {
			return 1
		}
		return scaledObjectMin(so)
	}
	hpa, err := r.w.targetAutoscaler(ctx)
	if err != nil || hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 1 {
		return 1
	}
	return *hpa.Spec.MinReplicas
}

// autoscalerDrift tells how the primary's autoscaler differs from what the next apply writes.
func (w workload) autoscalerDrift(ctx context.Context) ([]string, error) {
	if w.rel.Autoscaler == nil {
		return nil, nil
	}
	if w.rel.scaledObject() {
		return w.scaledObjectDrift(ctx)
	}
	target, err := w.targetAutoscaler(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return []string{fmt.Sprintf("HorizontalPodAutoscaler %s/%s of autoscaler_ref is missing", w.rel.Namespace, w.rel.Autoscaler.Name)}, nil
	case err != nil:
		return nil, err
	}
	want := w.primaryAutoscalerFrom(target)
	live, err := w.kube.AutoscalingV2().HorizontalPodAutoscalers(w.rel.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return []string{fmt.Sprintf("HorizontalPodAutoscaler %s/%s is missing", w.rel.Namespace, want.Name)}, nil
	case err != nil:
		return nil, err
	}
	if held := heldMinDrift(live, ptrValue(want.Spec.MinReplicas)); held != nil {
		return held, nil
	}
	if ptrValue(live.Spec.MinReplicas) != ptrValue(want.Spec.MinReplicas) || live.Spec.MaxReplicas != want.Spec.MaxReplicas ||
		live.Spec.ScaleTargetRef != want.Spec.ScaleTargetRef {
		return []string{fmt.Sprintf("HorizontalPodAutoscaler %s/%s (min %d, max %d) no longer follows %s (min %d, max %d)", w.rel.Namespace, want.Name,
			ptrValue(live.Spec.MinReplicas), live.Spec.MaxReplicas, target.Name, ptrValue(want.Spec.MinReplicas), want.Spec.MaxReplicas)}, nil
	}
	return nil, nil
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// deletePrimaryAutoscaler removes the primary's autoscaler.
func (w workload) deletePrimaryAutoscaler(ctx context.Context) error {
	if w.rel.Autoscaler == nil {
		return nil
	}
	if w.rel.scaledObject() {
		return w.deletePrimaryScaledObject(ctx)
	}
	err := w.kube.AutoscalingV2().HorizontalPodAutoscalers(w.rel.Namespace).Delete(ctx, w.rel.primaryAutoscalerName(), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
