package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// ErrProgressDeadline marks a Deployment that did not become ready in time; it is not retried.
var ErrProgressDeadline = errors.New("progress deadline exceeded")

// readiness is Flagger's deployment readiness rule: threshold percent of the updated replicas
// available, but never none. fatal is set when waiting longer is useless.
func readiness(d *appsv1.Deployment, threshold int) (ready bool, msg string, fatal bool) {
	if d.Generation > d.Status.ObservedGeneration {
		return false, "observed deployment generation less than desired", false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, fmt.Sprintf("Deployment %s exceeded its progress deadline", d.Name), true
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	switch {
	case d.Status.UpdatedReplicas < want:
		return false, fmt.Sprintf("%d out of %d new replicas have been updated", d.Status.UpdatedReplicas, want), false
	case d.Status.Replicas > d.Status.UpdatedReplicas:
		return false, fmt.Sprintf("%d old replicas are pending termination", d.Status.Replicas-d.Status.UpdatedReplicas), false
	case d.Status.TerminatingReplicas != nil && *d.Status.TerminatingReplicas > 0:
		return false, fmt.Sprintf("%d replicas are terminating", *d.Status.TerminatingReplicas), false
	case d.Status.AvailableReplicas < readyNeeded(d.Status.UpdatedReplicas, threshold):
		return false, fmt.Sprintf("%d of %d updated replicas are available, %d needed (%d%%)", d.Status.AvailableReplicas, d.Status.UpdatedReplicas,
			readyNeeded(d.Status.UpdatedReplicas, threshold), threshold), false
	}
	return true, "", false
}

// readyNeeded is how many of the updated replicas must be available. A side that may get
// traffic always needs one, whatever the threshold.
func readyNeeded(updated int32, threshold int) int32 {
	if threshold <= 0 || threshold > 100 {
		threshold = 100
	}
	return max(int32(float64(updated)*float64(threshold)/100), min(updated, 1))
}

// readyThreshold is the readiness threshold of one of the release's Deployments.
func (w workload) readyThreshold(name string) int {
	t := w.rel.Analysis.CanaryReadyThreshold
	if name == w.rel.PrimaryName() {
		t = w.rel.Analysis.PrimaryReadyThreshold
	}
	if t <= 0 {
		return 100
	}
	return t
}

// waitReady watches a Deployment until it is ready. It fails with ErrProgressDeadline when the
// deadline passes or Kubernetes reports ProgressDeadlineExceeded, and with ctx's error when the
// apply is cancelled or times out.
func (w workload) waitReady(ctx context.Context, name string, deadline time.Duration) error {
	lw := w.listWatch(name)
	waitCtx, cancel := context.WithTimeoutCause(ctx, deadline, ErrProgressDeadline)
	defer cancel()

	lastMsg := "Deployment not found"
	_, err := watchtools.UntilWithSync(waitCtx, lw, &appsv1.Deployment{}, nil, func(ev watch.Event) (bool, error) {
		d, ok := ev.Object.(*appsv1.Deployment)
		if !ok || d.Name != name || ev.Type == watch.Deleted {
			return false, nil
		}
		ready, msg, fatal := readiness(d, w.readyThreshold(name))
		lastMsg = msg
		if fatal {
			return false, fmt.Errorf("%w: %s", ErrProgressDeadline, msg)
		}
		return ready, nil
	})
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrProgressDeadline) {
		return err
	}
	if ctx.Err() == nil && errors.Is(context.Cause(waitCtx), ErrProgressDeadline) {
		return fmt.Errorf("%w: Deployment %s/%s not ready after %s (%s)", ErrProgressDeadline, w.rel.Namespace, name, deadline, lastMsg)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("waiting for Deployment %s/%s (%s): %w", w.rel.Namespace, name, lastMsg, context.Cause(ctx))
	}
	return err
}

// waitScaledDown waits, when a Deployment's spec asks for no replicas, until its pods are gone.
func (w workload) waitScaledDown(ctx context.Context, name string, deadline time.Duration) error {
	waitCtx, cancel := context.WithTimeoutCause(ctx, deadline, ErrProgressDeadline)
	defer cancel()
	_, err := watchtools.UntilWithSync(waitCtx, w.listWatch(name), &appsv1.Deployment{}, nil, func(ev watch.Event) (bool, error) {
		d, ok := ev.Object.(*appsv1.Deployment)
		if !ok || d.Name != name || ev.Type == watch.Deleted {
			return ev.Type == watch.Deleted, nil
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas > 0 {
			return true, nil
		}
		terminating := d.Status.TerminatingReplicas != nil && *d.Status.TerminatingReplicas > 0
		return d.Status.ObservedGeneration >= d.Generation && d.Status.Replicas == 0 && !terminating, nil
	})
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(waitCtx), ErrProgressDeadline) {
		return fmt.Errorf("%w: the pods of the last scale-down were still there after %s", ErrProgressDeadline, deadline)
	}
	return err
}

// deploymentWatch follows one Deployment and tells when it stops having Ready pods, so a
// canary that loses its pods mid-analysis loses its weight at once, not at the next check,
// and when its pod template stops being the one under analysis.
type deploymentWatch struct {
	ready   atomic.Bool
	changed chan struct{}
	edited  chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
}

func (d *deploymentWatch) serving() bool { return d.ready.Load() }

// Stop ends the watch and waits for its goroutine.
func (d *deploymentWatch) Stop() {
	d.stop()
	<-d.done
}

// watchDeployment follows a Deployment in the background from a fresh list; client-go's
// informer machinery re-lists and re-watches when the connection drops. template is the
// template hash the caller analyses.
func (w workload) watchDeployment(ctx context.Context, name, template string) (*deploymentWatch, error) {
	api := w.kube.AppsV1().Deployments(w.rel.Namespace)
	d, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	watchState := &deploymentWatch{changed: make(chan struct{}, 1), edited: make(chan struct{}, 1), stop: cancel, done: make(chan struct{})}
	watchState.ready.Store(hasReadyPods(d))
	go func() {
		defer close(watchState.done)
		_, _ = watchtools.UntilWithSync(wctx, w.listWatch(name), &appsv1.Deployment{}, nil, func(ev watch.Event) (bool, error) {
			dep, ok := ev.Object.(*appsv1.Deployment)
			if !ok || dep.Name != name {
				return false, nil
			}
			now := ev.Type != watch.Deleted && hasReadyPods(dep)
			if watchState.ready.Swap(now) && !now {
				notify(watchState.changed)
			}
			if ev.Type != watch.Deleted && TemplateHash(dep) != template {
				notify(watchState.edited)
			}
			return false, nil
		})
	}()
	return watchState, nil
}

// listWatch lists and watches one Deployment by name. Its lists are consistent reads: the
// informer's default ("0") may be served from a lagging watch cache, a copy from before the
// scale-up a wait follows, whose old replica count (0) looks ready, so traffic would shift
// before any pod is Ready.
func (w workload) listWatch(name string) *cache.ListWatch {
	api := w.kube.AppsV1().Deployments(w.rel.Namespace)
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			o.ResourceVersion, o.ResourceVersionMatch = "", ""
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return api.Watch(ctx, o)
		},
	}
}

// notify signals c without blocking; one pending signal is enough.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
