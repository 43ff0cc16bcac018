package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// ErrProgressDeadline marks a Deployment that did not become ready in time; it is not retried.
var ErrProgressDeadline = errors.New("progress deadline exceeded")

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
	return w.waitReadyFrom(ctx, name, deadline, nil)
}

// waitReadyFrom is waitReady starting from the Deployment as this run last wrote or read it
// (see listWatch); nil lists it first.
func (w workload) waitReadyFrom(ctx context.Context, name string, deadline time.Duration, from *appsv1.Deployment) error {
	return w.waitReadyObserving(ctx, name, deadline, from, nil)
}

// waitReadyObserving is waitReadyFrom that also hands every copy it sees to observe (nil: none).
func (w workload) waitReadyObserving(ctx context.Context, name string, deadline time.Duration, from *appsv1.Deployment, observe func(*appsv1.Deployment)) error {
	waitCtx, cancel := context.WithTimeoutCause(ctx, deadline, ErrProgressDeadline)
	defer cancel()

	lastMsg := "Deployment not found"
	err := w.watchWorkload(waitCtx, name, from, func(d *appsv1.Deployment) (bool, error) {
		if d == nil {
			return false, nil
		}
		if observe != nil {
			observe(d)
		}
		ready, msg, fatal := kinds.Readiness(d, w.readyThreshold(name))
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
		return fmt.Errorf("%w: %s %s/%s not ready after %s (%s)", ErrProgressDeadline, w.rel.WorkloadKind(), w.rel.Namespace, name, deadline, lastMsg)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("waiting for %s %s/%s (%s): %w", w.rel.WorkloadKind(), w.rel.Namespace, name, lastMsg, context.Cause(ctx))
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

// canaryWatch follows the canary from before its scale-up to the end of the analysis on one
// watch, so a run watches it once instead of once per wait. It starts from a consistent read
// or from the copy this run's own write returned (see listWatch), and the watch delivers every
// later change in order, so the latest object it holds is never older than that start. A scale-up written while
// it runs is waited for by its generation: a copy older than the write (whose zero replicas
// would look ready) is never judged ready, which is what listing afresh after the write
// guaranteed before.
type canaryWatch struct {
	deploymentWatch
	name      string
	namespace string
	kind      string // the workload's kind, as messages name it
	template  string
	threshold int

	// watching is closed once the watch that follows the first list is open: a write made
	// after it is seen by the watch.
	watching     chan struct{}
	watchingOnce sync.Once

	mu     sync.Mutex
	latest *appsv1.Deployment
	gone   bool
	// updated is closed and replaced whenever latest changes.
	updated chan struct{}
	// judging is set once the canary was ready: from then on a loss of Ready pods or an
	// edited template is signalled, as deploymentWatch does.
	judging bool
}

// followCanary starts watching the canary Deployment from the copy this run read or wrote
// last (from; nil lists it first); template is the template hash the caller analyses.
func (w workload) followCanary(ctx context.Context, name, template string, from *appsv1.Deployment) *canaryWatch {
	wctx, cancel := context.WithCancel(ctx)
	c := &canaryWatch{
		deploymentWatch: deploymentWatch{changed: make(chan struct{}, 1), edited: make(chan struct{}, 1), stop: cancel, done: make(chan struct{})},
		name:            name, namespace: w.rel.Namespace, kind: w.rel.WorkloadKind(), template: template, threshold: w.readyThreshold(name),
		updated: make(chan struct{}), watching: make(chan struct{}),
	}
	lw := kinds.ListWatch(w.workloads(), name, from)
	watchFn := lw.WatchFuncWithContext
	lw.WatchFuncWithContext = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		wi, err := watchFn(ctx, o)
		if err == nil {
			c.watchingOnce.Do(func() { close(c.watching) })
		}
		return wi, err
	}
	go func() {
		defer close(c.done)
		_ = kinds.Until(wctx, lw, name, func(dep *appsv1.Deployment) (bool, error) {
			c.observe(dep)
			return false, nil
		})
	}()
	return c
}

// observe records the latest object (nil: deleted) and signals what the analysis must know.
func (c *canaryWatch) observe(dep *appsv1.Deployment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latest, c.gone = dep, dep == nil
	close(c.updated)
	c.updated = make(chan struct{})
	if dep != nil && TemplateHash(dep) != c.template {
		signal(c.edited)
	}
	if c.judging {
		now := dep != nil && kinds.HasReadyPods(dep)
		if c.ready.Swap(now) && !now {
			signal(c.changed)
		}
	}
}

// isJudging reports whether the watch judges the canary's readiness yet (see readyAfter).
func (c *canaryWatch) isJudging() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.judging
}

// await waits until cond holds for the latest object, within deadline. cond's error ends the
// wait (fatal); msg is the last reason it gave for not holding.
func (c *canaryWatch) await(ctx context.Context, deadline time.Duration, cond func(d *appsv1.Deployment) (ok bool, msg string, err error)) (*appsv1.Deployment, error) {
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	lastMsg := "Deployment not found"
	for {
		c.mu.Lock()
		d, updated, gone := c.latest, c.updated, c.gone
		c.mu.Unlock()
		if gone {
			return nil, fmt.Errorf("the %s %s/%s was deleted", c.kind, c.namespace, c.name)
		}
		if d != nil {
			ok, msg, err := cond(d)
			if err != nil {
				return nil, err
			}
			if ok {
				return d, nil
			}
			lastMsg = msg
		}
		select {
		case <-updated:
		case <-timer.C:
			return nil, fmt.Errorf("%w: %s %s/%s not ready after %s (%s)", ErrProgressDeadline, c.kind, c.namespace, c.name, deadline, lastMsg)
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s %s/%s (%s): %w", c.kind, c.namespace, c.name, lastMsg, context.Cause(ctx))
		}
	}
}

// scaledDown waits, when the Deployment's spec asks for no replicas, until no pods of that
// scale to zero are left, and returns the Deployment as it then was.
func (c *canaryWatch) scaledDown(ctx context.Context, deadline time.Duration) (*appsv1.Deployment, error) {
	start := time.Now()
	d, err := c.await(ctx, deadline, func(d *appsv1.Deployment) (bool, string, error) {
		return kinds.ScaledDown(d), "the pods of the last scale-down are still there", nil
	})
	if err != nil && ctx.Err() == nil && errors.Is(err, ErrProgressDeadline) {
		return nil, fmt.Errorf("%w: the pods of the last scale-down were still there after %s", ErrProgressDeadline, deadline)
	}
	if err != nil {
		return nil, err
	}
	// The caller writes next: the watch must be open by then to see the write.
	timer := time.NewTimer(max(deadline-time.Since(start), 0))
	defer timer.Stop()
	select {
	case <-c.watching:
		return d, nil
	case <-timer.C:
		return nil, fmt.Errorf("%w: the watch of %s %s/%s did not open within %s", ErrProgressDeadline, c.kind, c.namespace, c.name, deadline)
	case <-ctx.Done():
		return nil, fmt.Errorf("watching %s %s/%s: %w", c.kind, c.namespace, c.name, context.Cause(ctx))
	}
}

// scaledToZero waits, after the caller scaled the Deployment to zero, until a copy with that
// spec has no pods left, and returns it: the generation a later scale-up is judged against.
func (c *canaryWatch) scaledToZero(ctx context.Context, deadline time.Duration) (*appsv1.Deployment, error) {
	d, err := c.await(ctx, deadline, func(d *appsv1.Deployment) (bool, string, error) {
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			return false, "the scale to zero is not visible yet", nil
		}
		return kinds.ScaledDown(d), "the pods of the scale to zero are still there", nil
	})
	if err != nil && ctx.Err() == nil && errors.Is(err, ErrProgressDeadline) {
		return nil, fmt.Errorf("%w: the pods started before this run were still there after %s", ErrProgressDeadline, deadline)
	}
	return d, err
}

// readyAfter waits until the canary is ready (readiness, as waitReady) in a copy newer than
// generation: the one the Deployment had before the caller's scale write, or -1 when the
// caller wrote nothing. From then on the watch judges the analysis (deploymentWatch).
func (c *canaryWatch) readyAfter(ctx context.Context, generation int64, deadline time.Duration) error {
	_, err := c.await(ctx, deadline, func(d *appsv1.Deployment) (bool, string, error) {
		if d.Generation <= generation {
			return false, "the scale-up is not visible yet", nil
		}
		ready, msg, fatal := kinds.Readiness(d, c.threshold)
		if fatal {
			return false, msg, fmt.Errorf("%w: %s", ErrProgressDeadline, msg)
		}
		return ready && kinds.HasReadyPods(d), msg, nil
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.judging = true
	c.ready.Store(c.latest != nil && kinds.HasReadyPods(c.latest))
	if !c.ready.Load() {
		signal(c.changed)
	}
	return nil
}

// watchWorkload watches the release's workload name (a copy of it; nil when an event deletes
// it) from from, as kinds.ListWatch does, until until reports done or an error, or ctx ends: the one
// watch every wait of the engine on a workload goes through.
func (w workload) watchWorkload(ctx context.Context, name string, from *appsv1.Deployment, until func(d *appsv1.Deployment) (bool, error)) error {
	return kinds.Until(ctx, kinds.ListWatch(w.workloads(), name, from), name, until)
}

// signal signals c without blocking; one pending signal is enough.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
