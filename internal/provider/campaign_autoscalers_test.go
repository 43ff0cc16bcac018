package provider

// Autoscaler events in the campaign (issue 32 item 4): three StatefulSet schedules in four scale
// their set by a HorizontalPodAutoscaler of the user's (the release is not told: a release in
// place holds its partition above any replica count, whatever the bounds). The HPA here acts
// on its bounds as the real one does: it keeps the set at its demand, clamped to minReplicas
// and maxReplicas, and acts at once when either changes. Between commands, and at a random
// request of a command, the demand changes or the user changes maxReplicas (raised from 5 to
// 8, or lowered to 4), which is what let an autoscaler start unanalysed pods before a run
// (hole 4) and, during a run, puts more pods on the revision under analysis than its step
// allows, since a scale-up gives every new pod above the partition the update revision.

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// autoscalerShare is the share of the schedules that may have one (drawAutoscaler) that do.
const autoscalerShare = 0.75

// campaignAutoscaler is the user's HPA: its bounds and the demand it follows.
type campaignAutoscaler struct {
	mu                  sync.Mutex
	minReplicas, maxRep int32
	demand              int32
}

// drawAutoscaler gives a schedule the user's HPA, keyed apart from the schedule's stream.
func drawAutoscaler(s *campaignSchedule) {
	if keyedCoin(s.seed, "autoscaler") < autoscalerShare {
		s.shape.autoscaler = true
	}
}

// setUpAutoscaler creates the user's HPA, which scales the target between 3 and 5 pods at a
// demand of 8.
func (c *campaign) setUpAutoscaler(ctx context.Context) error {
	if !c.shape.autoscaler {
		return nil
	}
	c.hpa = &campaignAutoscaler{minReplicas: 3, maxRep: 5, demand: 8}
	minReplicas := c.hpa.minReplicas
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: campaignTarget, Namespace: campaignNamespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: c.targetKind(), Name: campaignTarget},
			MinReplicas:    &minReplicas, MaxReplicas: c.hpa.maxRep,
		},
	}
	_, err := c.harness.kube.AutoscalingV2().HorizontalPodAutoscalers(campaignNamespace).Create(ctx, hpa, metav1.CreateOptions{})
	return err
}

// targetKind is the kind of the release's target.
func (c *campaign) targetKind() string {
	if c.shape.statefulSet {
		return "StatefulSet"
	}
	return "Deployment"
}

// autoscalerBetweenApplies: before half the commands, the demand or maxReplicas changes.
func (c *campaign) autoscalerBetweenApplies(ctx context.Context, process string) {
	if c.hpa != nil && keyedCoin(c.seed, "autoscaler before "+process) < 0.5 {
		c.autoscalerEvent(ctx, "before "+process, false)
	}
}

// autoscalerAtRequest: in half the commands, the demand or maxReplicas changes at a random
// request.
func (c *campaign) autoscalerAtRequest(f *processFaults, at string) {
	if c.hpa == nil || c.converging() || keyedCoin(c.seed, "autoscaler command "+f.process) >= 0.5 {
		return
	}
	if _, due := c.fire(f.process, "autoscaler", at, 25); due {
		c.autoscalerEvent(context.Background(), "at "+at, false)
	}
}

// autoscalerEvent changes maxReplicas (raised to 8, or lowered to 4 once raised) or the demand,
// and scales the target as the HPA does. A rise raises the demand to 8 pods, and maxReplicas
// to 8 with it half the time.
func (c *campaign) autoscalerEvent(ctx context.Context, when string, rise bool) {
	coin := keyedCoin(c.seed, "autoscaler event "+when)
	c.hpa.mu.Lock()
	what := ""
	switch {
	case rise && coin < 0.5 && c.hpa.maxRep < 8:
		c.hpa.maxRep, c.hpa.demand, what = 8, 8, "demand of 8 pods, maxReplicas raised to 8"
	case rise:
		c.hpa.demand, what = 8, "demand of 8 pods"
	case coin < 0.5 && c.hpa.maxRep < 8:
		c.hpa.maxRep, what = 8, "maxReplicas raised to 8"
	case coin < 0.5:
		c.hpa.maxRep, what = 4, "maxReplicas lowered to 4"
	default:
		c.hpa.demand = []int32{2, 4, 6, 8}[int(coin*8)%4]
		what = fmt.Sprintf("demand of %d pods", c.hpa.demand)
	}
	maxRep := c.hpa.maxRep
	desired := min(max(c.hpa.demand, c.hpa.minReplicas), c.hpa.maxRep)
	c.hpa.mu.Unlock()
	api := c.harness.kube.AutoscalingV2().HorizontalPodAutoscalers(campaignNamespace)
	if hpa, err := api.Get(ctx, campaignTarget, metav1.GetOptions{}); err == nil && hpa.Spec.MaxReplicas != maxRep {
		hpa.Spec.MaxReplicas = maxRep
		_, _ = api.Update(ctx, hpa, metav1.UpdateOptions{})
	}
	c.cover("autoscaler: " + what)
	scaled := ""
	if c.shape.statefulSet {
		err := c.updateStatefulSet(ctx, func(set *appsv1.StatefulSet) {
			if set.Spec.Replicas == nil || *set.Spec.Replicas != desired {
				scaled = fmt.Sprintf("; the StatefulSet scales to %d", desired)
				set.Spec.Replicas = &desired
			}
		})
		if err != nil {
			scaled = fmt.Sprintf("; scaling to %d: %v", desired, err)
		}
	}
	if scaled != "" {
		c.disrupted()
		c.cover("autoscaler: the target scaled")
	}
	c.tracef("autoscaler, %s: %s%s", when, what, scaled)
}
