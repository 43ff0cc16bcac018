package rollout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// routeDrainDelay is how long the backends of a deleted route are kept on destroy.
const routeDrainDelay = 2 * time.Second

// cleanupTimeout bounds the rollback that runs after the apply was cancelled or timed out:
// traffic must be back on the primary even though the caller's context is gone.
const cleanupTimeout = 30 * time.Second

// Engine runs releases against one cluster.
type Engine struct {
	Kube    kubernetes.Interface
	Router  router.Router
	Metrics MetricQuerier
	// HTTP calls the webhooks.
	HTTP *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logf receives progress lines (weights, checks); nil discards them.
	Logf func(format string, args ...any)
}

// Failure is a release that did not go through; the traffic is already back on a serving copy.
type Failure struct {
	Status Status
	Reason string
}

func (f *Failure) Error() string { return f.Reason }

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Engine) logf(format string, args ...any) {
	if e.Logf != nil {
		e.Logf(format, args...)
	}
}

// run is the state of one engine call on one release.
type run struct {
	e     *Engine
	rel   Release
	w     workload
	store stateStore
	st    Status
	spec  []byte
}

func (e *Engine) newRun(rel Release, st Status, spec []byte) *run {
	return &run{e: e, rel: rel, w: workload{e.Kube, rel}, store: stateStore{kube: e.Kube, rel: rel}, st: st, spec: spec}
}

// transition records a phase change in the cluster state and as an Event on the target.
func (r *run) transition(ctx context.Context, phase Phase, eventType, message string) error {
	if r.st.Phase != phase {
		r.st.LastTransitionTime = r.e.now().UTC().Truncate(time.Second)
	}
	r.st.Phase = phase
	r.st.Message = message
	r.e.logf("%s/%s: %s: %s", r.rel.Namespace, r.rel.Name, phase, message)
	r.store.event(ctx, eventType, string(phase), message)
	return r.save(ctx)
}

func (r *run) save(ctx context.Context) error {
	if err := r.store.save(ctx, r.st, r.spec); err != nil {
		return fmt.Errorf("saving release state in ConfigMap %s/%s: %w", r.rel.Namespace, StateConfigMapName(r.rel.Name), err)
	}
	return nil
}

// prepareTarget returns the target, applying the manifest first when the release owns it.
func (r *run) prepareTarget(ctx context.Context) (*appsv1.Deployment, error) {
	if r.rel.Manifest == nil {
		return r.w.target(ctx)
	}
	var replicas int32
	if live, err := r.w.target(ctx); err == nil && live.Spec.Replicas != nil {
		replicas = *live.Spec.Replicas
	}
	return r.w.applyManifest(ctx, replicas)
}

// primaryReplicas is the manifest's replica count, else the primary's, else the target's, else 1.
func (r *run) primaryReplicas(ctx context.Context, target *appsv1.Deployment) int32 {
	if r.rel.Manifest != nil && r.rel.Manifest.Spec.Replicas != nil {
		return *r.rel.Manifest.Spec.Replicas
	}
	if p, err := r.e.Kube.AppsV1().Deployments(r.rel.Namespace).Get(ctx, r.rel.PrimaryName(), metav1.GetOptions{}); err == nil && p.Spec.Replicas != nil && *p.Spec.Replicas > 0 {
		return *p.Spec.Replicas
	}
	if r.rel.Manifest == nil && target.Spec.Replicas != nil && *target.Spec.Replicas > 0 {
		return *target.Spec.Replicas
	}
	return 1
}

// Initialize creates the primary, the Services and the router object; no analysis runs.
// It adopts objects left by an earlier failed Create when they carry the release's labels.
func (e *Engine) Initialize(ctx context.Context, rel Release, spec []byte) (Status, error) {
	r := e.newRun(rel, Status{}, spec)
	target, err := r.prepareTarget(ctx)
	if err != nil {
		return r.st, err
	}
	key, value, err := selector(target)
	if err != nil {
		return r.st, err
	}
	replicas := r.primaryReplicas(ctx, target)
	if err := r.transition(ctx, PhaseInitializing, corev1.EventTypeNormal, "Initializing: creating the primary copy of the target"); err != nil {
		return r.st, err
	}
	if _, err := r.w.ensurePrimary(ctx, target, replicas); err != nil {
		return r.st, err
	}
	if _, err := r.w.waitReady(ctx, rel.PrimaryName(), rel.ProgressDeadline); err != nil {
		return r.st, fmt.Errorf("primary Deployment %s/%s did not become ready: %w", rel.Namespace, rel.PrimaryName(), err)
	}
	// Services and routes go live only once the primary serves, so there is no gap in traffic.
	if err := r.w.ensureServices(ctx, key, value); err != nil {
		return r.st, err
	}
	if err := e.Router.Reconcile(ctx); err != nil {
		return r.st, err
	}
	if err := r.w.scale(ctx, rel.Target, 0); err != nil {
		return r.st, err
	}
	hash := TemplateHash(target)
	r.st.LastAppliedSpec, r.st.LastPromotedSpec = hash, hash
	r.st.CanaryWeight = 0
	return r.st, r.transition(ctx, PhaseInitialized, corev1.EventTypeNormal,
		fmt.Sprintf("Initialization done: %s serves all traffic", rel.PrimaryName()))
}

// Apply reconciles the generated objects and, when the target's pod template differs from
// the last promoted one, runs a rollout. A failed rollout returns *Failure after rolling back.
func (e *Engine) Apply(ctx context.Context, rel Release, spec []byte, prior Status) (Status, error) {
	if cs, ok, err := LoadState(ctx, e.Kube, rel.Namespace, rel.Name); err != nil {
		return prior, err
	} else if ok && cs.Status.LastPromotedSpec != "" {
		// The cluster knows best what was last promoted, even after an interrupted apply.
		prior.LastPromotedSpec = cs.Status.LastPromotedSpec
	}
	r := e.newRun(rel, prior, spec)
	target, err := r.prepareTarget(ctx)
	if err != nil {
		return r.st, err
	}
	key, value, err := selector(target)
	if err != nil {
		return r.st, err
	}
	replicas := r.primaryReplicas(ctx, target)
	if err := r.w.ensureServices(ctx, key, value); err != nil {
		return r.st, err
	}
	if err := e.Router.Reconcile(ctx); err != nil {
		return r.st, err
	}
	hash := TemplateHash(target)
	if hash == r.st.LastPromotedSpec {
		return r.settle(ctx, target, replicas)
	}
	return r.release(ctx, target, hash, replicas)
}

// settle repairs a release with nothing new to roll out: the primary runs the promoted spec,
// all traffic goes to it and the canary is scaled to zero.
func (r *run) settle(ctx context.Context, target *appsv1.Deployment, replicas int32) (Status, error) {
	if _, err := r.w.ensurePrimary(ctx, target, replicas); err != nil {
		return r.st, err
	}
	if _, err := r.w.waitReady(ctx, r.rel.PrimaryName(), r.rel.ProgressDeadline); err != nil {
		return r.st, err
	}
	if err := r.e.Router.SetRoutes(ctx, router.Weights{Primary: 100, Canary: 0}); err != nil {
		return r.st, err
	}
	if err := r.w.scale(ctx, r.rel.Target, 0); err != nil {
		return r.st, err
	}
	r.st.CanaryWeight, r.st.FailedChecks = 0, 0
	// A failed or interrupted run whose target went back to the promoted spec is settled too.
	if r.st.Phase != PhaseInitialized {
		r.st.Phase = PhaseSucceeded
	}
	r.st.Message = "nothing to release: the target's pod template matches the last promoted spec"
	return r.st, r.save(ctx)
}

// release runs one canary analysis and promotes or rolls back.
func (r *run) release(ctx context.Context, target *appsv1.Deployment, hash string, replicas int32) (Status, error) {
	rel := r.rel
	r.st.LastAppliedSpec = hash
	r.st.FailedChecks, r.st.Iterations, r.st.CanaryWeight = 0, 0, 0
	if err := r.transition(ctx, PhaseProgressing, corev1.EventTypeNormal,
		fmt.Sprintf("New revision detected: scaling up %s", rel.Target)); err != nil {
		return r.st, err
	}
	if err := r.w.scale(ctx, rel.Target, replicas); err != nil {
		return r.rollback(ctx, err.Error())
	}
	if _, err := r.w.waitReady(ctx, rel.Target, rel.ProgressDeadline); err != nil {
		return r.rollback(ctx, fmt.Sprintf("canary Deployment %s/%s is not ready: %v", rel.Namespace, rel.Target, err))
	}
	a := analyzer{rel: rel, querier: r.e.Metrics, http: r.e.HTTP}
	if !rel.SkipAnalysis {
		if ended, st, err := r.analyse(ctx, a); ended {
			return st, err
		}
	}
	return r.promote(ctx, target, replicas, a)
}

// analyse walks the strategy's steps. ended is true when the run ended (rolled back).
func (r *run) analyse(ctx context.Context, a analyzer) (ended bool, st Status, err error) {
	rel := r.rel
	threshold := max(rel.Analysis.Threshold, 1)
	// check runs one interval's checks; it reports whether the run must roll back.
	check := func(f *CheckFailure) (string, bool) {
		if f == nil {
			return "", false
		}
		r.st.FailedChecks++
		msg := fmt.Sprintf("%s (failed checks: %d of threshold %d)", f.Message, r.st.FailedChecks, threshold)
		r.e.logf("%s/%s: %s", rel.Namespace, rel.Name, msg)
		r.store.event(ctx, corev1.EventTypeWarning, "Halted", "Halt advancement: "+msg)
		_ = r.save(ctx)
		return fmt.Sprintf("Canary analysis failed at canary weight %d%%: %s", r.st.CanaryWeight, msg), r.st.FailedChecks >= threshold
	}
	pace := pacer{interval: rel.Analysis.Interval}
	pace.restart()
	for {
		msg, stop := check(a.runHooks(ctx, HookPreRollout, PhaseProgressing, r.st.LastAppliedSpec))
		if stop {
			st, err := r.rollback(ctx, msg)
			return true, st, err
		}
		if msg == "" {
			break
		}
		if err := pace.wait(ctx); err != nil {
			st, err := r.rollback(ctx, interruptedReason(err))
			return true, st, err
		}
	}
	for _, weight := range StrategyFor(rel.Analysis).Steps() {
		pace.restart()
		if err := r.setCanaryWeight(ctx, weight); err != nil {
			st, err := r.rollback(ctx, err.Error())
			return true, st, err
		}
		for {
			if err := pace.wait(ctx); err != nil {
				st, err := r.rollback(ctx, interruptedReason(err))
				return true, st, err
			}
			r.st.Iterations++
			f := a.runHooks(ctx, HookRollout, PhaseProgressing, r.st.LastAppliedSpec)
			if f == nil {
				f = a.runMetrics(ctx)
			}
			if ctx.Err() != nil {
				st, err := r.rollback(ctx, interruptedReason(context.Cause(ctx)))
				return true, st, err
			}
			msg, stop := check(f)
			if stop {
				st, err := r.rollback(ctx, msg)
				return true, st, err
			}
			if msg == "" {
				break
			}
		}
	}
	return false, r.st, nil
}

func (r *run) setCanaryWeight(ctx context.Context, canary int) error {
	if err := r.e.Router.SetRoutes(ctx, router.Weights{Primary: 100 - canary, Canary: canary}); err != nil {
		return err
	}
	r.st.CanaryWeight = canary
	r.e.logf("%s/%s: canary weight %d%%", r.rel.Namespace, r.rel.Name, canary)
	r.store.event(ctx, corev1.EventTypeNormal, "Progressing", fmt.Sprintf("Advance %s canary weight %d", r.rel.Name, canary))
	return r.save(ctx)
}

// promote copies the canary's template to the primary, waits for it, then routes all traffic
// back to the primary and scales the canary down.
func (r *run) promote(ctx context.Context, target *appsv1.Deployment, replicas int32, a analyzer) (Status, error) {
	rel := r.rel
	if err := r.transition(ctx, PhasePromoting, corev1.EventTypeNormal,
		fmt.Sprintf("Copying %s template to %s", rel.Target, rel.PrimaryName())); err != nil {
		return r.st, err
	}
	if _, err := r.w.ensurePrimary(ctx, target, replicas); err != nil {
		return r.rollback(ctx, err.Error())
	}
	if _, err := r.w.waitReady(ctx, rel.PrimaryName(), rel.ProgressDeadline); err != nil {
		return r.failedPromotion(ctx, err)
	}
	steps := promotionSteps(r.st.CanaryWeight, rel.Analysis.StepWeightPromotion)
	pace := pacer{interval: rel.Analysis.Interval}
	for i, w := range steps {
		if i > 0 {
			if err := pace.wait(ctx); err != nil {
				return r.finishInterrupted(ctx, err)
			}
		}
		pace.restart()
		if err := r.setCanaryWeight(ctx, w); err != nil {
			return r.st, err
		}
	}
	if err := r.transition(ctx, PhaseFinalising, corev1.EventTypeNormal, "Routing all traffic to primary"); err != nil {
		return r.st, err
	}
	if err := r.w.scale(ctx, rel.Target, 0); err != nil {
		return r.st, err
	}
	r.st.LastPromotedSpec = r.st.LastAppliedSpec
	r.st.FailedChecks = 0
	if err := r.transition(ctx, PhaseSucceeded, corev1.EventTypeNormal,
		fmt.Sprintf("Promotion completed! %s runs the new revision", rel.PrimaryName())); err != nil {
		return r.st, err
	}
	_ = a.runHooks(ctx, HookPostRollout, PhaseSucceeded, r.st.LastAppliedSpec)
	return r.st, nil
}

// finishInterrupted completes a promotion whose primary is already ready: its traffic can
// safely go back to the primary even after a cancel.
func (r *run) finishInterrupted(ctx context.Context, cause error) (Status, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	_ = r.setCanaryWeight(cctx, 0)
	_ = r.w.scale(cctx, r.rel.Target, 0)
	r.st.LastPromotedSpec = r.st.LastAppliedSpec
	_ = r.transition(cctx, PhaseSucceeded, corev1.EventTypeNormal, "Promotion completed while the apply was interrupted")
	return r.st, &Failure{Status: r.st, Reason: interruptedReason(cause) + "; the promotion had already completed, so the primary runs the new revision"}
}

// failedPromotion handles a primary that did not become ready after the copy (Flagger #1898):
// the canary still serves, so all traffic goes to it and it keeps running.
func (r *run) failedPromotion(ctx context.Context, cause error) (Status, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	_ = r.setCanaryWeight(cctx, 100)
	reason := fmt.Sprintf("promotion failed: primary Deployment %s/%s did not become ready (%v); 100%% of traffic is on the canary %s, which keeps running",
		r.rel.Namespace, r.rel.PrimaryName(), cause, r.rel.Target)
	_ = r.transition(cctx, PhaseFailed, corev1.EventTypeWarning, reason)
	return r.st, &Failure{Status: r.st, Reason: reason}
}

// rollback sends all traffic to the primary, scales the canary to zero and fails the run.
func (r *run) rollback(ctx context.Context, reason string) (Status, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	weight := r.st.CanaryWeight
	var problems []error
	if err := r.e.Router.SetRoutes(cctx, router.Weights{Primary: 100, Canary: 0}); err != nil {
		problems = append(problems, fmt.Errorf("routing traffic back to the primary: %w", err))
	}
	r.st.CanaryWeight = 0
	if err := r.w.scale(cctx, r.rel.Target, 0); err != nil {
		problems = append(problems, err)
	}
	outcome := fmt.Sprintf("Rolled back at canary weight %d%%: 100%% of traffic is back on the primary %s, and the canary %s is scaled to 0.",
		weight, r.rel.PrimaryName(), r.rel.Target)
	if len(problems) > 0 {
		outcome = fmt.Sprintf("Rollback at canary weight %d%% was incomplete: %v", weight, errors.Join(problems...))
	}
	message := reason + ". " + outcome
	_ = r.transition(cctx, PhaseFailed, corev1.EventTypeWarning, message)
	a := analyzer{rel: r.rel, querier: r.e.Metrics, http: r.e.HTTP}
	_ = a.runHooks(cctx, HookPostRollout, PhaseFailed, r.st.LastAppliedSpec)
	return r.st, &Failure{Status: r.st, Reason: message}
}

// cleanupContext outlives a cancelled apply just long enough to leave traffic on a serving copy.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

func interruptedReason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "the apply's timeout expired before the analysis finished"
	}
	return fmt.Sprintf("the apply was interrupted (%v)", err)
}

// pacer times the analysis like Flagger's ticker: a check is due one interval after the
// weight change it judges (or after the previous check at that weight), so the time spent
// writing the weight, the state and the events counts towards the interval instead of adding
// to it. A run that falls behind (a check slower than the interval) checks again at once.
type pacer struct {
	interval time.Duration
	due      time.Time
}

// restart makes the next check due one interval from now; call it just before a weight change.
func (p *pacer) restart() { p.due = time.Now().Add(p.interval) }

// wait sleeps until the next check is due, or until ctx ends.
func (p *pacer) wait(ctx context.Context) error {
	err := sleep(ctx, time.Until(p.due))
	p.due = p.due.Add(p.interval)
	if now := time.Now(); p.due.Before(now) {
		p.due = now
	}
	return err
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Delete removes the release. In target_ref mode with revert, the target is scaled up and
// Ready and the apex selects it before the primary and the routes go. Without revert, the
// generated objects stay and keep serving. A release-owned manifest is deleted with the rest.
func (e *Engine) Delete(ctx context.Context, rel Release, revert bool) error {
	r := e.newRun(rel, Status{}, nil)
	if rel.Manifest == nil && !revert {
		return r.store.delete(ctx)
	}
	if rel.Manifest == nil {
		target, err := r.w.target(ctx)
		if err != nil {
			return err
		}
		key, value, err := selector(target)
		if err != nil {
			return err
		}
		if err := r.w.scale(ctx, rel.Target, r.primaryReplicas(ctx, target)); err != nil {
			return err
		}
		if _, err := r.w.waitReady(ctx, rel.Target, rel.ProgressDeadline); err != nil {
			return fmt.Errorf("giving the workload back to %s: %w", rel.Target, err)
		}
		if err := r.w.pointApex(ctx, key, value); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if err := e.Router.Finalize(ctx); err != nil {
		return err
	}
	// The data plane drops a deleted route a moment after the API does; the backends the route
	// pointed at must outlive that moment, or requests in flight find no Service.
	if err := sleep(ctx, routeDrainDelay); err != nil {
		return err
	}
	del := func(err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	services := []string{rel.Apex() + "-primary", rel.Apex() + "-canary"}
	if rel.Manifest != nil {
		services = append(services, rel.Apex())
		if err := del(e.Kube.AppsV1().Deployments(rel.Namespace).Delete(ctx, rel.Target, metav1.DeleteOptions{})); err != nil {
			return err
		}
	}
	for _, s := range services {
		if err := del(e.Kube.CoreV1().Services(rel.Namespace).Delete(ctx, s, metav1.DeleteOptions{})); err != nil {
			return err
		}
	}
	if err := del(e.Kube.AppsV1().Deployments(rel.Namespace).Delete(ctx, rel.PrimaryName(), metav1.DeleteOptions{})); err != nil {
		return err
	}
	return r.store.delete(ctx)
}

// Drift lists the ways the cluster no longer matches the release; the next apply repairs them.
func (e *Engine) Drift(ctx context.Context, rel Release, st Status) ([]string, error) {
	w := workload{e.Kube, rel}
	var out []string
	target, err := w.target(ctx)
	if err != nil {
		return []string{err.Error()}, nil
	}
	if st.LastPromotedSpec != "" && TemplateHash(target) != st.LastPromotedSpec {
		out = append(out, fmt.Sprintf("target Deployment %s/%s has a pod template that differs from the last promoted spec", rel.Namespace, rel.Target))
	}
	if cs, ok, err := LoadState(ctx, e.Kube, rel.Namespace, rel.Name); err == nil && ok {
		switch cs.Status.Phase {
		case PhaseProgressing, PhasePromoting, PhaseFinalising, PhaseInitializing:
			out = append(out, fmt.Sprintf("a rollout was interrupted in phase %s", cs.Status.Phase))
		}
	}
	wd, err := w.drift(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, wd...)
	rd, err := e.Router.Drift(ctx)
	if err != nil {
		return nil, err
	}
	return append(out, rd...), nil
}
