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
//
// A fifth of the Deployment schedules (neither a replica ratio, which sizes the canary itself,
// nor a DaemonSet or Knative) scale their target by an HPA or a KEDA ScaledObject, named in
// autoscaler_ref: the release makes the primary's copy, holds its minimum while the traffic
// returns, and pauses the target's ScaledObject at the replicas it gives the canary. Here
// every HPA and ScaledObject of the namespace acts as its controller does, through the scale
// subresource: it keeps its Deployment at the demand within its bounds, at the count a
// ScaledObject's paused-replicas annotation names, and leaves alone a Deployment scaled to
// zero (an HPA is disabled there; KEDA scales from zero only by its triggers, here the
// demand, which is never zero). It acts at each autoscaler event, and a moment after a run
// writes an autoscaler or scales a Deployment (its next sync).

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
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

// deploymentAutoscalerShare is the share of the Deployment schedules with an autoscaler, half
// of them KEDA's.
const deploymentAutoscalerShare = 1.0 / 5

// drawDeploymentAutoscaler gives a Deployment schedule the user's HPA or ScaledObject, named
// in autoscaler_ref, keyed apart from the schedule's stream.
func drawDeploymentAutoscaler(s *campaignSchedule) {
	sh := &s.shape
	if sh.statefulSet || sh.knative || sh.daemonSet || sh.ratioRouted() || keyedCoin(s.seed, "deployment autoscaler") >= deploymentAutoscalerShare {
		return
	}
	sh.autoscaler, sh.keda = true, keyedCoin(s.seed, "keda") < 0.5
}

// autoscalerConfig names a Deployment's autoscaler in autoscaler_ref.
func (s releaseShape) autoscalerConfig(config map[string]any) {
	if !s.autoscaler || s.statefulSet {
		return
	}
	ref := map[string]any{"name": campaignTarget}
	if s.keda {
		ref["kind"], ref["api_version"] = autoscaler.KindScaledObject, "keda.sh/v1alpha1"
	}
	config["autoscaler_ref"] = ref
}

// autoscalerKind names the user's autoscaler.
func (c *campaign) autoscalerKind() string {
	if c.shape.keda {
		return "KEDA ScaledObject"
	}
	return "HPA"
}

// setUpAutoscaler creates the user's HPA, which scales the target between 3 and 5 pods at a
// demand of 8.
func (c *campaign) setUpAutoscaler(ctx context.Context) error {
	if !c.shape.autoscaler {
		return nil
	}
	c.hpa = &campaignAutoscaler{minReplicas: 3, maxRep: 5, demand: 8}
	minReplicas := c.hpa.minReplicas
	if c.shape.keda {
		so := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "keda.sh/v1alpha1", "kind": autoscaler.KindScaledObject,
			"spec": map[string]any{
				"scaleTargetRef": map[string]any{"name": campaignTarget}, "minReplicaCount": int64(minReplicas), "maxReplicaCount": int64(c.hpa.maxRep),
				"triggers": []any{map[string]any{"type": "prometheus", "name": "load", "metadata": map[string]any{
					"serverAddress": "http://prometheus.campaign.example", "query": `sum(rate(http_requests_total{app="` + campaignTarget + `"}[1m]))`, "threshold": "10",
				}}},
			},
		}}
		so.SetName(campaignTarget)
		so.SetNamespace(campaignNamespace)
		_, err := c.harness.dynamic.Resource(autoscaler.ScaledObjects).Namespace(campaignNamespace).Create(ctx, so, metav1.CreateOptions{})
		return err
	}
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
	sos := c.harness.dynamic.Resource(autoscaler.ScaledObjects).Namespace(campaignNamespace)
	if so, err := sos.Get(ctx, campaignTarget, metav1.GetOptions{}); err == nil {
		if was, _, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount"); was != int64(maxRep) {
			_ = unstructured.SetNestedField(so.Object, int64(maxRep), "spec", "maxReplicaCount")
			_, _ = sos.Update(ctx, so, metav1.UpdateOptions{})
		}
	}
	c.cover("autoscaler: " + what)
	scaled := ""
	if !c.shape.statefulSet {
		scaled = c.autoscaleDeployments(ctx)
	}
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

// deploymentScaler is one autoscaler of a Deployment as its controller reads it: the
// Deployment it scales, its bounds, and a ScaledObject's paused count (-1: not paused).
type deploymentScaler struct {
	kind, name, target  string
	minReplicas, maxRep int32
	paused              int32
}

// deploymentScalers lists the namespace's HPAs and ScaledObjects (KEDA's own HPA for a
// ScaledObject is left out: the ScaledObject stands for it).
func (c *campaign) deploymentScalers(ctx context.Context) []deploymentScaler {
	var out []deploymentScaler
	if hpas, err := c.harness.kube.AutoscalingV2().HorizontalPodAutoscalers(campaignNamespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, h := range hpas.Items {
			if h.Spec.ScaleTargetRef.Kind != "Deployment" {
				continue
			}
			out = append(out, deploymentScaler{kind: "HorizontalPodAutoscaler", name: h.Name, target: h.Spec.ScaleTargetRef.Name,
				minReplicas: ptrOr(h.Spec.MinReplicas, 1), maxRep: h.Spec.MaxReplicas, paused: -1})
		}
	}
	if sos, err := c.harness.dynamic.Resource(autoscaler.ScaledObjects).Namespace(campaignNamespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, so := range sos.Items {
			target, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
			minReplicas, _, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
			maxRep, ok, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount")
			if !ok {
				maxRep = 100
			}
			paused := int32(-1)
			if v, ok := so.GetAnnotations()[autoscaler.AnnotationPausedReplicas]; ok {
				if n, err := strconv.Atoi(v); err == nil {
					paused = int32(n)
				}
			}
			out = append(out, deploymentScaler{kind: autoscaler.KindScaledObject, name: so.GetName(), target: target,
				minReplicas: int32(minReplicas), maxRep: int32(maxRep), paused: paused})
		}
	}
	return out
}

func ptrOr(p *int32, otherwise int32) int32 {
	if p == nil {
		return otherwise
	}
	return *p
}

// autoscaleDeployments is one sync of every Deployment autoscaler: each Deployment goes to its
// demand within the bounds, or to a ScaledObject's paused count, through the scale
// subresource. It says what it scaled.
func (c *campaign) autoscaleDeployments(ctx context.Context) string {
	if c.hpa == nil || c.shape.statefulSet {
		return ""
	}
	c.hpa.mu.Lock()
	demand := c.hpa.demand
	c.hpa.mu.Unlock()
	var scaled []string
	api := c.harness.kube.AppsV1().Deployments(campaignNamespace)
	for _, a := range c.deploymentScalers(ctx) {
		scale, err := api.GetScale(ctx, a.target, metav1.GetOptions{})
		if err != nil {
			continue
		}
		desired := min(max(demand, a.minReplicas, 1), max(a.maxRep, 1))
		switch {
		case a.paused >= 0:
			desired = a.paused
		case scale.Spec.Replicas == 0:
			continue // an HPA is disabled at zero replicas
		}
		if scale.Spec.Replicas == desired {
			continue
		}
		was := scale.Spec.Replicas
		scale.Spec.Replicas = desired
		if _, err := api.UpdateScale(ctx, a.target, &autoscalingv1.Scale{ObjectMeta: scale.ObjectMeta, Spec: scale.Spec}, metav1.UpdateOptions{}); err != nil {
			scaled = append(scaled, fmt.Sprintf("%s %s could not scale %s to %d: %v", a.kind, a.name, a.target, desired, err))
			continue
		}
		if desired < was {
			c.disrupted()
		}
		c.cover("autoscaler: " + a.kind + " scaled a Deployment")
		scaled = append(scaled, fmt.Sprintf("%s %s scales %s from %d to %d", a.kind, a.name, a.target, was, desired))
	}
	if len(scaled) == 0 {
		return ""
	}
	return "; " + strings.Join(scaled, "; ")
}

// autoscalersFollowing has the Deployment autoscalers sync a moment after a run wrote an
// autoscaler or a Deployment's replicas, as their controllers' next sync would.
func (c *campaign) autoscalersFollowing(next func(apiChange)) func(apiChange) {
	if !c.shape.autoscaler || c.shape.statefulSet {
		return next
	}
	return func(ch apiChange) {
		next(ch)
		if ch.by == harnessWriter || c.converging() {
			return
		}
		switch {
		case ch.gvr.Resource == "horizontalpodautoscalers", ch.gvr == autoscaler.ScaledObjects:
		case ch.gvr == deploymentsResource && replicasChanged(ch):
		default:
			return
		}
		delay := time.Millisecond + time.Duration(keyedCoin(c.seed, "autoscaler sync "+ch.by+" "+ch.name+" "+ch.verb)*float64(5*time.Second))
		time.AfterFunc(delay, func() {
			if c.hpa == nil || c.converging() {
				return
			}
			if what := c.autoscaleDeployments(context.Background()); what != "" {
				c.tracef("autoscalers' sync after %s's write of %s%s", ch.by, ch.name, what)
			}
		})
	}
}

// replicasChanged reports a write of a Deployment that changed its replica count.
func replicasChanged(ch apiChange) bool {
	before, _ := ch.before.(*appsv1.Deployment)
	after, _ := ch.after.(*appsv1.Deployment)
	return before != nil && after != nil && ptrOr(before.Spec.Replicas, 1) != ptrOr(after.Spec.Replicas, 1)
}
