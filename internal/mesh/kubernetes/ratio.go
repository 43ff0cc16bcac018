package kubernetes

import (
	"context"
	"fmt"
	"math"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Without a mesh a partial split is a replica ratio: the apex Service selects the pods of both
// sides through router.LabelApex, and each side gets the share of requests its Ready pods are
// of all Ready pods. The canary is scaled to its share of the primary's Ready replicas, and the
// apex selects it only once that many are Ready, so a side with weight always has Ready pods.

// readyPoll is how often the canary's readiness is read while the apex waits to select it.
var readyPoll = 500 * time.Millisecond

// CanaryReplicas is the canary's replica count for weight percent of the traffic beside
// primary Ready replicas: the share rounded down to whole pods, so that the canary gets no
// more than its step, but at least one pod (a step without a pod analyses nothing).
func CanaryReplicas(primary int32, weight int) int32 {
	if weight <= 0 {
		return 0
	}
	if weight >= 100 {
		return max(primary, 1)
	}
	n := int32(int64(primary) * int64(weight) / int64(100-weight))
	return max(n, 1)
}

// EffectivePercent is the canary's share, in whole percent, of canary and primary pods: the
// weight a replica ratio gives it. A side with pods never rounds to nothing, nor to all.
func EffectivePercent(primary, canary int32) int {
	switch {
	case canary <= 0:
		return 0
	case primary <= 0:
		return 100
	}
	pct := int(math.Round(100 * float64(canary) / float64(primary+canary)))
	return min(max(pct, 1), 99)
}

// setRatio scales the canary to its share of w beside the primary's Ready replicas, waits for
// that many Ready canary pods, then lets the apex select both sides.
func (r *kubernetesRouter) setRatio(ctx context.Context, w router.Weights) error {
	deployments := r.kube.AppsV1().Deployments(r.s.Namespace)
	primaryName := r.s.Target + "-primary"
	var want, primaryReady int32
	err := router.WithRetry(ctx, func() error {
		primary, err := deployments.Get(ctx, primaryName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Deployment %s/%s: %w", r.s.Namespace, primaryName, err)
		}
		if primary.Status.ReadyReplicas == 0 {
			return fmt.Errorf("%s: the primary Deployment %s/%s has no Ready pods to share the traffic with the canary", r.ref(), r.s.Namespace, primaryName)
		}
		// Mid-rollout, the primary's Ready pods may be old ones without the label: the apex
		// would then leave the primary's share to the canary.
		if !rolledOut(primary) {
			return fmt.Errorf("%s: the primary %s is rolling out (%d of %d pods updated), so its Ready pods may lack the label %s (%s refused)",
				r.ref(), primaryName, primary.Status.UpdatedReplicas, replicasOf(primary), router.LabelApex, router.SplitText(w))
		}
		primaryReady = primary.Status.ReadyReplicas
		want = CanaryReplicas(primaryReady, w.Canary)
		canary, err := deployments.Get(ctx, r.s.Target, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Deployment %s/%s: %w", r.s.Namespace, r.s.Target, err)
		}
		// Selecting a label the pods lack would leave the apex without endpoints.
		for _, d := range []*appsv1.Deployment{primary, canary} {
			if d.Spec.Template.Labels[router.LabelApex] != r.s.Apex {
				return fmt.Errorf("%s: the pods of Deployment %s/%s lack the label %s=%s, so the apex cannot select both sides (%s refused); "+
					"the release gives it to both pod templates of a weighted release, the primary's when it is next written (an apply that leaves the template unchanged does)",
					r.ref(), d.Namespace, d.Name, router.LabelApex, r.s.Apex, router.SplitText(w))
			}
		}
		if canary.Spec.Replicas != nil && *canary.Spec.Replicas == want {
			return nil
		}
		canary.Spec.Replicas = &want
		if _, err := deployments.Update(ctx, canary, metav1.UpdateOptions{FieldManager: router.FieldManager}); err != nil {
			return fmt.Errorf("scaling Deployment %s/%s to %d replicas: %w", r.s.Namespace, r.s.Target, want, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := r.waitCanaryReady(ctx, want); err != nil {
		return err
	}
	err = r.writeSelector(ctx, fmt.Sprintf("%s=%s (%s by replica ratio)", router.LabelApex, r.s.Apex, router.SplitText(w)),
		func() (map[string]string, error) { return map[string]string{router.LabelApex: r.s.Apex}, nil })
	if err != nil {
		return err
	}
	pct := EffectivePercent(primaryReady, want)
	r.written, r.sizedBeside = &router.Weights{Primary: 100 - pct, Canary: pct}, primaryReady
	return nil
}

// waitCanaryReady returns once the canary has want Ready replicas of its current template and
// no more pods than that, within the spec's ReadyDeadline: a canary scaled down to its step
// (analysed at full size, say) still has its earlier pods until the ReplicaSet removes them,
// and the apex would give them more than the step.
func (r *kubernetesRouter) waitCanaryReady(ctx context.Context, want int32) error {
	deployments := r.kube.AppsV1().Deployments(r.s.Namespace)
	if r.s.ReadyDeadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.s.ReadyDeadline,
			fmt.Errorf("not Ready within progress_deadline_seconds (%s)", r.s.ReadyDeadline))
		defer cancel()
	}
	for {
		var canary *appsv1.Deployment
		err := router.WithRetry(ctx, func() (err error) {
			canary, err = deployments.Get(ctx, r.s.Target, metav1.GetOptions{})
			return err
		})
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("reading Deployment %s/%s: %w", r.s.Namespace, r.s.Target, err)
		}
		if err == nil && canary.Status.ObservedGeneration >= canary.Generation && canary.Status.ReadyReplicas >= want && canary.Status.UpdatedReplicas >= want &&
			canary.Status.Replicas <= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %d Ready replicas, and no more pods, of the canary %s before it shares the traffic: %w", r.ref(), want, r.s.Target, context.Cause(ctx))
		case <-time.After(readyPoll):
		}
	}
}

// rolledOut reports a Deployment whose pods all run its current template.
func rolledOut(d *appsv1.Deployment) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas >= replicasOf(d) && d.Status.Replicas <= d.Status.UpdatedReplicas
}

func replicasOf(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

// ratioWeights is the split of an apex that selects both sides: the canary's share of the
// apex's Ready endpoints, which the -canary Service's Ready endpoints tell apart. With none
// on either side the canary's share is nothing: a recovery then reads no traffic to move, and
// the primary gets the apex again once it serves.
func (r *kubernetesRouter) ratioWeights(ctx context.Context) (router.Weights, error) {
	all, err := r.readyAddresses(ctx, r.s.Apex)
	if err != nil {
		return router.Weights{}, err
	}
	canaries, err := r.readyAddresses(ctx, r.s.Apex+"-canary")
	if err != nil {
		return router.Weights{}, err
	}
	var canary int32
	for a := range all {
		if canaries[a] {
			canary++
		}
	}
	pct := EffectivePercent(int32(len(all))-canary, canary)
	return router.Weights{Primary: 100 - pct, Canary: pct}, nil
}

// readyAddresses are the addresses of the Ready endpoints of Service name.
func (r *kubernetesRouter) readyAddresses(ctx context.Context, name string) (map[string]bool, error) {
	var slices *discoveryv1.EndpointSliceList
	err := router.WithRetry(ctx, func() (err error) {
		slices, err = r.kube.DiscoveryV1().EndpointSlices(r.s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of Service %s/%s: %w", r.s.Namespace, name, err)
	}
	ready := map[string]bool{}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				ready[a] = true
			}
		}
	}
	return ready, nil
}
