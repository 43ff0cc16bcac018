package autoscaler

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// KindScaledObject is autoscaler_ref's kind for a KEDA ScaledObject (keda.sh/v1alpha1).
const KindScaledObject = "ScaledObject"

// ScaledObjects is KEDA's ScaledObject resource.
var ScaledObjects = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}

// AnnotationPausedReplicas is KEDA's annotation that pauses a ScaledObject at a fixed replica
// count. The release keeps it on the target's ScaledObject at the replicas it gives the target
// (0 between rollouts, the analysis's count during one), so that KEDA does not scale the
// canary behind the release; destroy removes it.
const AnnotationPausedReplicas = "autoscaling.keda.sh/paused-replicas"

func (s Scalers) scaledObjects() (dynamic.ResourceInterface, error) {
	if s.Dyn == nil {
		return nil, fmt.Errorf("autoscaler_ref: a ScaledObject needs a dynamic client, which this engine was built without")
	}
	return s.Dyn.Resource(ScaledObjects).Namespace(s.Namespace), nil
}

// targetScaledObject reads the target's ScaledObject, which must scale the target.
func (s Scalers) targetScaledObject(ctx context.Context) (*unstructured.Unstructured, error) {
	api, err := s.scaledObjects()
	if err != nil {
		return nil, err
	}
	so, err := api.Get(ctx, s.Ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("autoscaler_ref: ScaledObject %s/%s: %w", s.Namespace, s.Ref.Name, err)
	}
	kind, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "kind")
	name, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
	if (kind != "" && kind != "Deployment") || name != s.Target {
		return nil, fmt.Errorf("autoscaler_ref: ScaledObject %s/%s scales %s %s, not the target %s %s", s.Namespace, so.GetName(), kind, name, s.TargetKind, s.Target)
	}
	return so, nil
}

// primaryScaledObjectSpec is the primary's copy of the target ScaledObject's spec: it scales
// the primary, within primary_scaler_replicas when set, and its triggers' queries are
// primary_scaler_queries by trigger name, else the target's with the target's name replaced
// by the primary's (as Flagger does).
func (s Scalers) primaryScaledObjectSpec(target *unstructured.Unstructured) map[string]any {
	spec, _, _ := unstructured.NestedMap(target.Object, "spec")
	spec = runtimeDeepCopy(spec)
	_ = unstructured.SetNestedField(spec, s.Primary, "scaleTargetRef", "name")
	if n := s.Ref.PrimaryMinReplicas; n > 0 {
		spec["minReplicaCount"] = int64(n)
	}
	if n := s.Ref.PrimaryMaxReplicas; n > 0 {
		spec["maxReplicaCount"] = int64(n)
	}
	triggers, _, _ := unstructured.NestedSlice(spec, "triggers")
	for i, t := range triggers {
		trigger, ok := t.(map[string]any)
		if !ok {
			continue
		}
		meta, _ := trigger["metadata"].(map[string]any)
		if meta == nil {
			continue
		}
		name, _ := trigger["name"].(string)
		if q, ok := s.Ref.PrimaryScalerQueries[name]; ok {
			meta["query"] = q
		} else if q, ok := meta["query"].(string); ok && len(s.Ref.PrimaryScalerQueries) == 0 {
			meta["query"] = strings.ReplaceAll(q, s.Target, s.Primary)
		}
		triggers[i] = trigger
	}
	if len(triggers) > 0 {
		spec["triggers"] = triggers
	}
	return spec
}

func runtimeDeepCopy(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

// ensurePrimaryScaledObject creates or updates the primary's ScaledObject from the target's,
// putting back a minimum a promotion or rollback held (AnnotationHeldMinReplicas).
func (s Scalers) ensurePrimaryScaledObject(ctx context.Context) error {
	target, err := s.targetScaledObject(ctx)
	if err != nil {
		return err
	}
	api, _ := s.scaledObjects()
	spec := s.primaryScaledObjectSpec(target)
	return kube.Retry(ctx, func() error {
		live, err := api.Get(ctx, s.Ref.PrimaryName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			want := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "spec": spec}}
			want.SetName(s.Ref.PrimaryName())
			want.SetNamespace(s.Namespace)
			want.SetLabels(s.Labels)
			_, err = api.Create(ctx, want, metav1.CreateOptions{FieldManager: s.FieldManager})
			return err
		}
		if err != nil {
			return err
		}
		if err := s.CheckOwned(live, "ScaledObject"); err != nil {
			return err
		}
		annotations := live.GetAnnotations()
		_, held := annotations[AnnotationHeldMinReplicas]
		liveSpec, _, _ := unstructured.NestedMap(live.Object, "spec")
		if !held && equality.Semantic.DeepEqual(liveSpec, spec) {
			return nil
		}
		delete(annotations, AnnotationHeldMinReplicas)
		live.SetAnnotations(annotations)
		live.Object["spec"] = spec
		_, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: s.FieldManager})
		return err
	})
}

// scaledObjectMin is a ScaledObject's minReplicaCount (KEDA's default is 0).
func scaledObjectMin(so *unstructured.Unstructured) int32 {
	n, _, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
	return int32(n)
}

// scaledObjectMax is a ScaledObject's maxReplicaCount (KEDA's default is 100).
func scaledObjectMax(so *unstructured.Unstructured) int32 {
	n, ok, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount")
	if !ok {
		return 100
	}
	return int32(n)
}

// holdScaledObjectMin is HoldMin for the primary's ScaledObject: its minReplicaCount.
func (s Scalers) holdScaledObjectMin(ctx context.Context, want int32) (int32, error) {
	api, err := s.scaledObjects()
	if err != nil {
		return 0, err
	}
	var held int32
	err = kube.Retry(ctx, func() error {
		live, err := api.Get(ctx, s.Ref.PrimaryName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := s.CheckOwned(live, "ScaledObject"); err != nil {
			return err
		}
		held = min(want, scaledObjectMax(live))
		if was := scaledObjectMin(live); was >= held {
			held = was
			return nil
		}
		annotations := live.GetAnnotations()
		if _, ok := annotations[AnnotationHeldMinReplicas]; !ok {
			annotations, _ = router.MergeStrings(annotations, map[string]string{AnnotationHeldMinReplicas: strconv.Itoa(int(scaledObjectMin(live)))})
			live.SetAnnotations(annotations)
		}
		if err := unstructured.SetNestedField(live.Object, int64(held), "spec", "minReplicaCount"); err != nil {
			return err
		}
		_, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: s.FieldManager})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("ScaledObject %s/%s: %w", s.Namespace, s.Ref.PrimaryName(), err)
	}
	return held, nil
}

// PauseTarget keeps the target's ScaledObject paused at the replicas the release
// gives the target (AnnotationPausedReplicas); resume removes the pause, for destroy.
func (s Scalers) PauseTarget(ctx context.Context, replicas int32, resume bool) error {
	api, err := s.scaledObjects()
	if err != nil {
		return err
	}
	return kube.Retry(ctx, func() error {
		live, err := api.Get(ctx, s.Ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && resume {
			return nil
		}
		if err != nil {
			return fmt.Errorf("autoscaler_ref: ScaledObject %s/%s: %w", s.Namespace, s.Ref.Name, err)
		}
		annotations := maps.Clone(live.GetAnnotations())
		if annotations == nil {
			annotations = map[string]string{}
		}
		want := strconv.Itoa(int(replicas))
		switch {
		case resume && annotations[AnnotationPausedReplicas] == "":
			return nil
		case resume:
			delete(annotations, AnnotationPausedReplicas)
		case annotations[AnnotationPausedReplicas] == want:
			return nil
		default:
			annotations[AnnotationPausedReplicas] = want
		}
		live.SetAnnotations(annotations)
		_, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: s.FieldManager})
		return err
	})
}

// scaledObjectDrift tells how the primary's ScaledObject differs from what the next apply writes.
func (s Scalers) scaledObjectDrift(ctx context.Context) ([]string, error) {
	target, err := s.targetScaledObject(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return []string{fmt.Sprintf("ScaledObject %s/%s of autoscaler_ref is missing", s.Namespace, s.Ref.Name)}, nil
	case err != nil:
		return nil, err
	}
	api, _ := s.scaledObjects()
	live, err := api.Get(ctx, s.Ref.PrimaryName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return []string{fmt.Sprintf("ScaledObject %s/%s is missing", s.Namespace, s.Ref.PrimaryName())}, nil
	case err != nil:
		return nil, err
	}
	want := s.primaryScaledObjectSpec(target)
	if was, ok := live.GetAnnotations()[AnnotationHeldMinReplicas]; ok {
		return []string{fmt.Sprintf("ScaledObject %s/%s still holds minReplicaCount %d for a promotion or rollback that did not finish (it had %s); the next apply puts it back",
			s.Namespace, live.GetName(), scaledObjectMin(live), was)}, nil
	}
	liveSpec, _, _ := unstructured.NestedMap(live.Object, "spec")
	if !equality.Semantic.DeepEqual(liveSpec, want) {
		return []string{fmt.Sprintf("ScaledObject %s/%s no longer follows %s", s.Namespace, live.GetName(), target.GetName())}, nil
	}
	return nil, nil
}

// deletePrimaryScaledObject removes the primary's ScaledObject and gives the target's back to KEDA.
func (s Scalers) deletePrimaryScaledObject(ctx context.Context) error {
	api, err := s.scaledObjects()
	if err != nil {
		return err
	}
	if err := api.Delete(ctx, s.Ref.PrimaryName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return s.PauseTarget(ctx, 0, true)
}
