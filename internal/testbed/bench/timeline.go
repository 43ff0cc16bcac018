package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// observation is what the bench saw of one object at one moment, from the outside.
type observation struct {
	at   time.Time
	kind string // "Deployment" or "TrafficSplit"
	name string
	// Deployments
	image    string
	replicas int32
	ready    bool
	// TrafficSplits
	canaryWeight int
}

// deploymentReady is Flagger's readiness rule, as the engine applies it: the controller saw
// the latest spec, every replica runs it, no old one is left and all are available.
func deploymentReady(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Status.ObservedGeneration >= d.Generation &&
		d.Status.UpdatedReplicas >= want &&
		d.Status.Replicas <= d.Status.UpdatedReplicas &&
		d.Status.AvailableReplicas >= d.Status.UpdatedReplicas
}

func observeDeployment(at time.Time, d *appsv1.Deployment) observation {
	o := observation{at: at, kind: "Deployment", name: d.Name, ready: deploymentReady(d)}
	if d.Spec.Replicas != nil {
		o.replicas = *d.Spec.Replicas
	}
	if c := d.Spec.Template.Spec.Containers; len(c) > 0 {
		o.image = c[0].Image
	}
	return o
}

// observeSplit reads the canary weight of a TrafficSplit (the backend named <apex>-canary).
func observeSplit(at time.Time, u *unstructured.Unstructured, canaryService string) observation {
	o := observation{at: at, kind: "TrafficSplit", name: u.GetName(), canaryWeight: -1}
	backends, _, _ := unstructured.NestedSlice(u.Object, "spec", "backends")
	for _, b := range backends {
		m, _ := b.(map[string]any)
		if m["service"] == canaryService {
			if w, ok := m["weight"].(int64); ok {
				o.canaryWeight = int(w)
			}
		}
	}
	return o
}

// recorder keeps the observations of one namespace while an apply runs.
type recorder struct {
	mu   sync.Mutex
	obs  []observation
	stop context.CancelFunc
}

// record watches the Deployments and TrafficSplits of ns through informers and timestamps
// every change as it arrives. It returns once the informers have synced.
func record(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, ns, apex string) (*recorder, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &recorder{stop: cancel}
	add := func(o observation) {
		r.mu.Lock()
		r.obs = append(r.obs, o)
		r.mu.Unlock()
	}
	typed := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	deps := typed.Apps().V1().Deployments().Informer()
	onDeployment := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			add(observeDeployment(time.Now(), d))
		}
	}
	if _, err := deps.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onDeployment, UpdateFunc: func(_, obj any) { onDeployment(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	dynamicFactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
	splits := dynamicFactory.ForResource(router.TrafficSplitResource).Informer()
	onSplit := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			add(observeSplit(time.Now(), u, apex+"-canary"))
		}
	}
	if _, err := splits.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onSplit, UpdateFunc: func(_, obj any) { onSplit(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	typed.Start(ctx.Done())
	dynamicFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), deps.HasSynced, splits.HasSynced) {
		cancel()
		return nil, fmt.Errorf("watching namespace %s: informers did not sync", ns)
	}
	return r, nil
}

// done stops the watches and returns what was seen, in arrival order.
func (r *recorder) done() []observation {
	r.stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observation(nil), r.obs...)
}

// rolloutTimes are the moments of one rollout as seen from outside. Zero means not seen.
type rolloutTimes struct {
	updateStart    time.Time // the target first carries the new image: the Update's first write
	canaryScaled   time.Time // the target is scaled up from 0
	canaryReady    time.Time
	firstShift     time.Time // the first canary weight above 0
	primaryUpdated time.Time // the primary first carries the new image (promotion)
	primaryReady   time.Time
	backToPrimary  time.Time // canary weight 0 again after the first shift
}

// rolloutTimeline finds the rollout's moments in the observations of target, its primary and
// its TrafficSplit (named like the target).
func rolloutTimeline(obs []observation, target, newImage string) rolloutTimes {
	var t rolloutTimes
	primary := target + "-primary"
	after := func(ref, at time.Time) bool { return !ref.IsZero() && !at.Before(ref) }
	for _, o := range obs {
		switch {
		case o.kind == "Deployment" && o.name == target:
			if t.updateStart.IsZero() && o.image == newImage {
				t.updateStart = o.at
			}
			if t.canaryScaled.IsZero() && after(t.updateStart, o.at) && o.image == newImage && o.replicas > 0 {
				t.canaryScaled = o.at
			}
			if t.canaryReady.IsZero() && after(t.canaryScaled, o.at) && o.replicas > 0 && o.ready {
				t.canaryReady = o.at
			}
		case o.kind == "Deployment" && o.name == primary:
			if t.primaryUpdated.IsZero() && after(t.updateStart, o.at) && o.image == newImage {
				t.primaryUpdated = o.at
			}
			if t.primaryReady.IsZero() && after(t.primaryUpdated, o.at) && o.image == newImage && o.ready {
				t.primaryReady = o.at
			}
		case o.kind == "TrafficSplit" && o.name == target:
			if t.firstShift.IsZero() && after(t.updateStart, o.at) && o.canaryWeight > 0 {
				t.firstShift = o.at
			}
			if t.backToPrimary.IsZero() && after(t.firstShift, o.at) && o.canaryWeight == 0 {
				t.backToPrimary = o.at
			}
		}
	}
	return t
}

// span is b−a, or an error naming what was not seen.
func span(what string, a, b time.Time) (time.Duration, error) {
	if a.IsZero() || b.IsZero() {
		return 0, errors.New("not observed: " + what)
	}
	return b.Sub(a), nil
}

func (t rolloutTimes) canaryWait() (time.Duration, error) {
	return span("canary readiness", t.canaryScaled, t.canaryReady)
}

func (t rolloutTimes) primaryWait() (time.Duration, error) {
	return span("primary readiness", t.primaryUpdated, t.primaryReady)
}

func (t rolloutTimes) firstShiftAfterUpdate() (time.Duration, error) {
	return span("first weight change", t.updateStart, t.firstShift)
}

// trafficBack is the time from the first shift to 100% on the primary again (promoted or rolled back).
func (t rolloutTimes) trafficBack() (time.Duration, error) {
	return span("traffic back on the primary", t.firstShift, t.backToPrimary)
}
