package provider

// The replica ratio in the campaign: mesh_provider "kubernetes" with step weights, where the
// apex Service selects the Ready pods of both sides and each side's share of the requests is
// its share of those pods. About one schedule in eleven runs one, with five primary pods (two
// give no share between 0% and 50%), and its primary may lose a node's pods mid-run. What the
// judge holds it to is read from the EndpointSlices the fake API server serves, as kube-proxy
// would: the engine's record and the router's arithmetic play no part.

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// ratioShare is the share of schedules that run a replica ratio.
const ratioShare = 0.09

// ratioReplicas is the replica count of a ratio schedule's Deployments.
const ratioReplicas = 5

// sideDrainedPrimary is a loss of the primary's pods on one node (a drain, a node lost): some of
// its Ready pods go, the others keep serving.
const sideDrainedPrimary = "primary (node drained)"

// drawReplicaRatio makes about ratioShare of the schedules ratio-routed, keyed apart from the
// schedule's stream so that the others stay as they were. Two thirds of their primary readiness
// losses become node drains, and each command may drain a node besides.
func drawReplicaRatio(s *campaignSchedule) {
	if s.shape.knative || keyedCoin(s.seed, "replica ratio") >= ratioShare {
		return
	}
	s.shape.router, s.shape.strategy, s.shape.replicas = "kubernetes", strategyCanary, ratioReplicas
	if s.shape.steps == nil {
		s.shape.steps = [][]int{{20, 40}, {10, 50}, {30}}[int(keyedCoin(s.seed, "ratio steps")*3)]
	}
	// The apex's selector switches all at once: the provider refuses step_weight_promotion.
	s.shape.promotionSteps = false
	for i := range s.ops {
		e := &s.ops[i].events
		key := fmt.Sprintf("ratio drain %d", i)
		switch {
		case e.lossSide == "primary" && keyedCoin(s.seed, key) < 2.0/3:
			e.lossSide = sideDrainedPrimary
		case e.lossSide == "" && keyedCoin(s.seed, key) < 0.5:
			e.lossSide, e.lossPerMille = sideDrainedPrimary, 40
			e.lossRecovery = []time.Duration{3 * time.Second, 40 * time.Second}[int(keyedCoin(s.seed, key+" recovery")*2)]
		}
	}
}

// ratioRouted reports a shape whose partial splits are a replica ratio.
func (s releaseShape) ratioRouted() bool {
	return s.router == "kubernetes" && s.strategy == strategyCanary && !s.statefulSet
}

// drainNode takes the pods of one node from the primary: half its Ready pods, rounded up,
// until recoverAfter (when positive) or its pods' next restart.
func (c *campaign) drainNode(recovery time.Duration, when string) {
	key := types.NamespacedName{Namespace: campaignNamespace, Name: campaignPrimary}
	var lost int32
	drained := c.server.writeStatus(key, func(d *appsv1.Deployment, set *podSet) bool {
		if set.broken || set.lost > 0 || d.Status.ReadyReplicas < 2 {
			return false // a node drain leaves a pod elsewhere; a single pod is a readiness loss
		}
		lost = (d.Status.ReadyReplicas + 1) / 2
		set.lost = lost
		set.keepLost(&d.Status)
		return true
	})
	if !drained {
		return
	}
	c.disrupted()
	c.tracef("%s lost %d Ready pods to a node drain %s (back after %s; 0: at its next restart)", campaignPrimary, lost, when, recovery)
	c.cover("node drain: primary")
	if recovery > 0 {
		time.AfterFunc(recovery, func() { c.server.rescheduleLost(key) })
	}
}

// keepLost takes a drained node's pods from a status written as if every pod ran.
func (set *podSet) keepLost(st *appsv1.DeploymentStatus) {
	st.ReadyReplicas = max(0, st.ReadyReplicas-set.lost)
	st.AvailableReplicas = max(0, st.AvailableReplicas-set.lost)
}

// rescheduleLost gives a drained Deployment its pods back: they started on another node.
func (s *fakeAPIServer) rescheduleLost(key types.NamespacedName) {
	s.writeStatus(key, func(d *appsv1.Deployment, set *podSet) bool {
		if set.lost == 0 {
			return false
		}
		set.lost = 0
		if !set.broken && d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == desiredReplicas(d) {
			d.Status = podStatus(d, true, desiredReplicas(d))
		}
		return true
	})
}

// endpointSlices are the EndpointSlices of the Services of namespace ns, as the endpoint
// controller writes them: one per Service, with an endpoint for each pod of each Deployment
// whose pod template the Service selects, Ready as its Deployment's Ready count says. A pod
// is named <Deployment>.<n>, its address is that name. s.mu is held.
func (s *fakeAPIServer) endpointSlices(ns string) []runtime.Object {
	var out []runtime.Object
	for key, obj := range s.objects[servicesResource] {
		svc, ok := obj.(*corev1.Service)
		if !ok || (ns != "" && key.Namespace != ns) || len(svc.Spec.Selector) == 0 {
			continue
		}
		selector := labels.SelectorFromSet(svc.Spec.Selector)
		slice := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeFQDN}
		slice.Name, slice.Namespace = svc.Name+"-fake", svc.Namespace
		slice.Labels = map[string]string{discoveryv1.LabelServiceName: svc.Name}
		for dkey, dobj := range s.objects[deploymentsResource] {
			d, ok := dobj.(*appsv1.Deployment)
			if !ok || dkey.Namespace != svc.Namespace || !selector.Matches(labels.Set(d.Spec.Template.Labels)) {
				continue
			}
			for i := range d.Status.Replicas {
				ready := i < d.Status.ReadyReplicas
				pod := fmt.Sprintf("%s.%d", d.Name, i)
				slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
					Addresses:  []string{pod},
					Conditions: discoveryv1.EndpointConditions{Ready: &ready},
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: d.Namespace, Name: pod},
				})
			}
		}
		out = append(out, slice)
	}
	return out
}

// ratioSides are the two sides of an apex that selects both by router.LabelApex, read from its
// EndpointSlice: each side's weight is its share of the Ready endpoints, in whole percent.
func (c *campaign) ratioSides(provider string) []trafficSide {
	c.server.mu.Lock()
	ready := c.server.readyPodsBehind(campaignTarget)
	primaryReplicas := int32(0)
	if d, ok := c.server.objects[deploymentsResource][types.NamespacedName{Namespace: campaignNamespace, Name: campaignPrimary}].(*appsv1.Deployment); ok {
		primaryReplicas = desiredReplicas(d)
	}
	primary := trafficSide{router: provider, name: "primary", revision: c.pods.running(campaignNamespace, campaignPrimary), ratio: true,
		pods: ready[campaignPrimary], beside: ready[campaignTarget], replicas: primaryReplicas}
	canary := trafficSide{router: provider, name: "canary", revision: c.pods.running(campaignNamespace, campaignTarget), ratio: true,
		pods: ready[campaignTarget], beside: ready[campaignPrimary], replicas: primaryReplicas}
	if d, ok := c.server.objects[deploymentsResource][types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget}].(*appsv1.Deployment); ok {
		canary.template = c.server.revisionOf(d)
	}
	c.server.mu.Unlock()
	if total := primary.pods + canary.pods; total > 0 {
		canary.weight = int(100 * canary.pods / total)
		if canary.pods > 0 && canary.weight == 0 {
			canary.weight = 1
		}
		primary.weight = 100 - canary.weight
	}
	primary.serves, canary.serves = primary.pods > 0, canary.pods > 0
	return []trafficSide{primary, canary}
}

// readyPodsBehind counts the Ready endpoints of Service name by the Deployment of their pod.
// s.mu is held.
func (s *fakeAPIServer) readyPodsBehind(service string) map[string]int32 {
	out := map[string]int32{}
	for _, obj := range s.endpointSlices(campaignNamespace) {
		slice, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || slice.Labels[discoveryv1.LabelServiceName] != service {
			continue
		}
		for _, e := range slice.Endpoints {
			if e.Conditions.Ready == nil || !*e.Conditions.Ready || e.TargetRef == nil {
				continue
			}
			if dot := strings.LastIndex(e.TargetRef.Name, "."); dot > 0 {
				out[e.TargetRef.Name[:dot]]++
			}
		}
	}
	return out
}

// selectsBothSides reports an apex Service selector that is a replica ratio's.
func selectsBothSides(selector map[string]string) bool {
	return len(selector) == 1 && selector[router.LabelApex] == campaignTarget
}

// overCap reports a canary side above limit percent. A ratio's share moves in whole pods, and a
// step gets at least one: it is over only if it would be with one pod fewer.
func (s trafficSide) overCap(limit int) bool {
	if s.inPlace {
		// A StatefulSet's pods are capped at the partition's writes (judgeAdmitted): an
		// autoscaler's scale-up puts more on the canary, and the engine may only hold.
		return false
	}
	if !s.ratio {
		return s.weight > limit
	}
	if s.pods == 0 {
		return false
	}
	fewer := s.pods - 1
	return int(fewer)*100 > limit*int(fewer+s.beside)
}

// atLastStepByRatio reports a ratio canary that serves exactly the last step's share of a
// whole primary: the most pods whose share is within the step, and at least one.
func (s trafficSide) atLastStepByRatio(last int) bool {
	if !s.ratio || s.beside < s.replicas || s.beside == 0 {
		return false
	}
	want := max(int(s.beside)*last/(100-last), 1)
	return int(s.pods) == want
}

// apexSides are what the apex Service selects: both sides of a replica ratio, or one.
func (c *campaign) apexSides(provider string) []trafficSide {
	c.server.mu.Lock()
	obj, ok := c.server.objects[servicesResource][types.NamespacedName{Namespace: campaignNamespace, Name: campaignTarget}]
	c.server.mu.Unlock()
	if svc, isService := obj.(*corev1.Service); ok && isService && selectsBothSides(svc.Spec.Selector) {
		return c.ratioSides(provider)
	}
	return []trafficSide{c.apexSide(provider)}
}

// ratioRoutedNow reports a release whose current router splits by replica ratio.
func (c *campaign) ratioRoutedNow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shape.ratioRouted()
}

// canaryAtLastStepByRatio reports a canary that the apex serves at the last step's share of a
// whole primary.
func (c *campaign) canaryAtLastStepByRatio() bool {
	for _, side := range c.liveTraffic() {
		if side.ratio && side.name == "canary" {
			return side.atLastStepByRatio(c.shape.lastStep())
		}
	}
	return false
}

// endpointSlicesResource is served from the Services and the pods (endpointSlices).
var endpointSlicesResource = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
