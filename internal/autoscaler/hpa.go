// Package autoscaler keeps a release's autoscalers: the primary's copy of the target's
// HorizontalPodAutoscaler or KEDA ScaledObject, the canary's replicas from its minimum, the
// target's ScaledObject paused at the replicas the release gives it, and a minimum held while
// traffic returns to the primary. When the engine asks for each is its own concern.
package autoscaler

import (
	"context"
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
)

// Ref is the target's autoscaler (Flagger's autoscalerRef): a HorizontalPodAutoscaler or a
// KEDA ScaledObject. The primary gets a "<name>-primary" copy that scales it, kept in sync on
// every apply, and the canary is scaled for its analysis from the autoscaler's minimum.
type Ref struct {
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

// PrimaryName is the primary's copy of the target's autoscaler.
func (r Ref) PrimaryName() string { return r.Name + "-primary" }

// Scalers reads and writes one release's autoscalers: the target's, and the primary's copy.
type Scalers struct {
	Kube kubernetes.Interface
	// Dyn reads and writes a KEDA ScaledObject; nil refuses one.
	Dyn       dynamic.Interface
	Namespace string
	// Ref is the target's autoscaler; nil is none.
	Ref *Ref
	// Target and Primary are the workloads the autoscalers scale; TargetKind names the
	// target's kind in messages.
	Target, Primary, TargetKind string
	// Labels are the labels of an object the release writes.
	Labels map[string]string
	// FieldManager writes the copies.
	FieldManager string
	// CheckOwned refuses to take over an object of kind that the release did not create.
	CheckOwned func(m metav1.Object, kind string) error
}

// ScaledObject says whether the autoscaler is a KEDA ScaledObject.
func (s Scalers) ScaledObject() bool { return s.Ref != nil && s.Ref.Kind == KindScaledObject }

// targetAutoscaler reads the target's HorizontalPodAutoscaler.
func (s Scalers) targetAutoscaler(ctx context.Context) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	hpa, err := s.Kube.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Get(ctx, s.Ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("autoscaler_ref: HorizontalPodAutoscaler %s/%s: %w", s.Namespace, s.Ref.Name, err)
	}
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != s.Target {
		return nil, fmt.Errorf("autoscaler_ref: HorizontalPodAutoscaler %s/%s scales %s %s, not the target %s %s",
			s.Namespace, hpa.Name, ref.Kind, ref.Name, s.TargetKind, s.Target)
	}
	return hpa, nil
}

// primaryAutoscalerFrom is the primary's copy of the target's autoscaler.
func (s Scalers) primaryAutoscalerFrom(target *autoscalingv2.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	spec := *target.Spec.DeepCopy()
	spec.ScaleTargetRef.Name = s.Primary
	if n := s.Ref.PrimaryMinReplicas; n > 0 {
		spec.MinReplicas = &n
	}
	if n := s.Ref.PrimaryMaxReplicas; n > 0 {
		spec.MaxReplicas = n
	}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: s.Ref.PrimaryName(), Namespace: s.Namespace, Labels: s.Labels},
		Spec:       spec,
	}
}

// EnsurePrimary creates or updates the primary's autoscaler from the target's.
func (s Scalers) EnsurePrimary(ctx context.Context) error {
	if s.Ref == nil {
		return nil
	}
	if s.ScaledObject() {
		return s.ensurePrimaryScaledObject(ctx)
	}
	target, err := s.targetAutoscaler(ctx)
	if err != nil {
		return err
	}
	want := s.primaryAutoscalerFrom(target)
	return kube.UpsertOwned(ctx, s.Kube.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace), want, s.FieldManager,
		func(live *autoscalingv2.HorizontalPodAutoscaler) error {
			return s.CheckOwned(live, "HorizontalPodAutoscaler")
		},
		func(live *autoscalingv2.HorizontalPodAutoscaler) bool {
			live.Spec = want.Spec
			// A minimum held for a promotion or rollback (HoldMin) is put back here, by the
			// run that held it or by the next one.
			delete(live.Annotations, AnnotationHeldMinReplicas)
			return true
		})
}

// CanaryReplicas is how many replicas the canary gets for its analysis: the autoscaler's
// minimum, at least 1.
func (s Scalers) CanaryReplicas(ctx context.Context) int32 {
	if s.ScaledObject() {
		so, err := s.targetScaledObject(ctx)
		if err != nil || scaledObjectMin(so) < 1 {
			return 1
		}
		return scaledObjectMin(so)
	}
	hpa, err := s.targetAutoscaler(ctx)
	if err != nil || hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 1 {
		return 1
	}
	return *hpa.Spec.MinReplicas
}

// Drift tells how the primary's autoscaler differs from what the next apply writes.
func (s Scalers) Drift(ctx context.Context) ([]string, error) {
	if s.Ref == nil {
		return nil, nil
	}
	if s.ScaledObject() {
		return s.scaledObjectDrift(ctx)
	}
	target, err := s.targetAutoscaler(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return []string{fmt.Sprintf("HorizontalPodAutoscaler %s/%s of autoscaler_ref is missing", s.Namespace, s.Ref.Name)}, nil
	case err != nil:
		return nil, err
	}
	want := s.primaryAutoscalerFrom(target)
	live, err := s.Kube.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return []string{fmt.Sprintf("HorizontalPodAutoscaler %s/%s is missing", s.Namespace, want.Name)}, nil
	case err != nil:
		return nil, err
	}
	if held := heldMinDrift(live, ptrValue(want.Spec.MinReplicas)); held != nil {
		return held, nil
	}
	if ptrValue(live.Spec.MinReplicas) != ptrValue(want.Spec.MinReplicas) || live.Spec.MaxReplicas != want.Spec.MaxReplicas ||
		live.Spec.ScaleTargetRef != want.Spec.ScaleTargetRef {
		return []string{fmt.Sprintf("HorizontalPodAutoscaler %s/%s (min %d, max %d) no longer follows %s (min %d, max %d)", s.Namespace, want.Name,
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

// DeletePrimary removes the primary's autoscaler.
func (s Scalers) DeletePrimary(ctx context.Context) error {
	if s.Ref == nil {
		return nil
	}
	if s.ScaledObject() {
		return s.deletePrimaryScaledObject(ctx)
	}
	err := s.Kube.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Delete(ctx, s.Ref.PrimaryName(), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
