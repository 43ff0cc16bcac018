package autoscaler

import (
	"context"
	"fmt"
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// AnnotationHeldMinReplicas on the primary's autoscaler marks a minimum the release holds at
// the primary's pre-rollout replicas while traffic returns to the primary (promotion's
// finalising, a rollback); its value is the minimum the autoscaler had. The run puts the
// minimum back when the traffic is back; a run killed in between leaves it to the next run,
// whose reconciliation of the autoscaler (EnsurePrimary) writes the target's again,
// and until then the plan shows it as drift.
const AnnotationHeldMinReplicas = "canary-release.dev/held-min-replicas"

// HoldMin raises the primary autoscaler's minimum to want (at most its maximum),
// recording the minimum it had in AnnotationHeldMinReplicas. It returns the minimum it holds.
func (s Scalers) HoldMin(ctx context.Context, want int32) (int32, error) {
	if s.ScaledObject() {
		return s.holdScaledObjectMin(ctx, want)
	}
	api := s.Kube.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace)
	var held int32
	err := kube.Retry(ctx, func() error {
		live, err := api.Get(ctx, s.Ref.PrimaryName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := s.CheckOwned(live, "HorizontalPodAutoscaler"); err != nil {
			return err
		}
		held = min(want, live.Spec.MaxReplicas)
		if ptrValue(live.Spec.MinReplicas) >= held {
			held = ptrValue(live.Spec.MinReplicas)
			return nil
		}
		if _, ok := live.Annotations[AnnotationHeldMinReplicas]; !ok {
			live.Annotations, _ = router.MergeStrings(live.Annotations, map[string]string{AnnotationHeldMinReplicas: strconv.Itoa(int(ptrValue(live.Spec.MinReplicas)))})
		}
		live.Spec.MinReplicas = &held
		_, err = api.Update(ctx, live, metav1.UpdateOptions{FieldManager: s.FieldManager})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("HorizontalPodAutoscaler %s/%s: %w", s.Namespace, s.Ref.PrimaryName(), err)
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
