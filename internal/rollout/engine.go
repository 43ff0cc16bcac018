package rollout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/lock"
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/notify"
	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// DefaultDrainDelay is how long a side keeps its pods after the router, read back, sends it
// no traffic: data planes apply a route change a moment after the API server accepts it.
const DefaultDrainDelay = 2 * time.Second

// cleanupTimeout bounds the work that runs after the apply was cancelled or timed out:
// traffic must be on a serving copy even though the caller's context is gone.
const cleanupTimeout = 30 * time.Second

// Engine runs releases against one cluster.
type Engine struct {
	Kube kubernetes.Interface
	// LockKube writes the release's Lease; nil uses Kube. A client of its own keeps the
	// renewals from queueing behind the run's other requests in a shared rate limiter.
	LockKube kubernetes.Interface
	Router   router.Router
	// Dynamic reads and writes a KEDA ScaledObject (autoscaler_ref kind ScaledObject); nil
	// refuses one.
	Dynamic dynamic.Interface
	// Owned is the release's target when its mesh driver owns the target's kind
	// (mesh.TargetOwner): the run pins revisions instead of copying templates (owned_target.go).
	// nil: the target is a Deployment.
	Owned mesh.Target
	// RouterFor builds this release's router for another mesh_provider, from the configuration
	// the cluster's record holds (opaque, as given to Apply): the router a run takes the traffic
	// over from after mesh_provider changed (see takeOverRouting). nil: such a run fails.
	RouterFor func(meshProvider string, recordedSpec []byte) (router.Router, error)
	Metrics   MetricQuerier
	// PodLabels is the labelling of the application's series that the built-in checks read
	// (the provider's prometheus.namespace_label and pod_label); unset, each run finds it.
	PodLabels metrics.PodLabels
	// HTTP calls the webhooks.
	HTTP *http.Client
	// InsecureHTTP calls the webhooks with disable_tls; nil builds a direct one when needed.
	InsecureHTTP *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Progress receives the run's progress lines (phases, weights, checks, gates, the
	// verdict, and each query as a detail); nil discards them.
	Progress func(Progress)
	// Warn receives what the user must know although the run went through (a takeover, what
	// a destroy left behind); nil discards it.
	Warn func(summary, detail string)
	// DrainDelay overrides DefaultDrainDelay when positive.
	DrainDelay time.Duration
	// Lock tunes the per-release Lease; the zero value is the documented default.
	Lock lock.Options
}

// Failure is a release that did not go through; the message says where traffic is.
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

// warn tells the user through the apply's warnings; rel names the release in the progress line.
func (e *Engine) warn(rel Release, summary, detail string) {
	e.report(Progress{Kind: ProgressWarning, Namespace: rel.Namespace, Name: rel.Name, Message: fmt.Sprintf("warning: %s: %s", summary, detail)})
	if e.Warn != nil {
		e.Warn(summary, detail)
	}
}

func (e *Engine) drainDelay() time.Duration {
	if e.DrainDelay > 0 {
		return e.DrainDelay
	}
	return DefaultDrainDelay
}

// run is the state of one engine call on one release.
type run struct {
	e     *Engine
	rel   Release
	w     workload
	store stateStore
	st    Status
	spec  []byte

	// target is the Deployment being released and hash its template's hash, once read.
	target *appsv1.Deployment
	// listedTarget is the release-owned target (manifest) as the first list found it, while
	// nothing since changed it; nil otherwise.
	listedTarget *appsv1.Deployment
	hash         string
	replicas     int32
	// reason is why the run rolls back; the rollback phase words the outcome.
	reason string
	// primaryLive is the primary Deployment as this run last read or wrote it (nil: not
	// known, or missing), so that checking it, sizing it and updating it read it only once.
	primaryLive *appsv1.Deployment
	// pending are the Normal Events not written yet (see eventBatchWindow).
	pending notify.Batch
	// found is what loadRecord found of an earlier run: the evidence an initialisation
	// needs to prove it is the release's first (see initProof).
	found promotion.Evidence
	// pinned is the revision a target released in place shows a release pinned as its
	// primary (mesh.InPlace's Pinned), as loadRecord read it; empty for any other target.
	pinned string
	// canary follows the canary from its scale-up to the end of the run, once it is Ready:
	// the traffic gate and the promotion read its readiness from it. nil: not followed.
	canary *canaryWatch
	// notes delivers the event webhooks and alerts off the run's path (package notify).
	notes *notify.Queue
	// primaryReadySeen: the run has just seen the primary Ready (see sawPrimaryReady).
	primaryReadySeen bool
	// services are the release's Services as the run first read them (knownApex), until its
	// first ensureServices (or a weight write, which may rewrite the apex) uses them up.
	services map[string]*corev1.Service
	// canaryChanged: after its analysis passed, the canary's template changed (an edit
	// behind the release, or the next apply's template after a killed promotion). It gets
	// no more traffic, and its own goes to the primary as soon as the primary can take it.
	canaryChanged bool
	// ratio keeps a replica ratio's share as the primary's pods come and go (keepRatio).
	ratio ratioKeeper
	// podLabels is the labelling of the application's series this run found (podLabelsFor).
	podLabels metrics.PodLabels
	// recordedSpec is the configuration the cluster's record holds, as loadRecord found it.
	recordedSpec []byte

	// ctl follows the operator's controls on the state ConfigMap during the analysis
	// (package controls); seenControls is what the run last read of them, for the log of
	// changes.
	ctl          *controls.Watch
	seenControls controls.Set
	// approvals are the gate approvals already told of; refused the promote-now refused.
	approvals map[string]bool
	refused   string
	// canaryReady: the canary was Ready for the analysis (a promote-now may act).
	canaryReady bool
	// overStepHeld: since when the checks of the step reached find more pods on the canary
	// revision of a release in place than the step allows (overStep); routerHeld: since when
	// the router reads back other weights than the run wrote (stepTakenBehind).
	overStepHeld, routerHeld heldStep
	// lastFailure is the message of the run's last failed check.
	lastFailure string
	// rejection, when the run rolls back, says the analysis rejected the revision (a failed
	// check at the threshold, a rollback webhook, an abort): the record keeps it (rejection.go).
	rejection *Rejection
}

func (e *Engine) newRun(rel Release, st Status, spec []byte) *run {
	return &run{e: e, rel: rel, w: workload{kube: e.Kube, rel: rel, dyn: e.Dynamic}, store: stateStore{kube: e.Kube, rel: rel}, st: st, spec: spec}
}

func (r *run) analyzer() analyzer {
	return analyzer{rel: r.rel, querier: r.e.Metrics, http: r.e.HTTP, insecureHTTP: r.e.InsecureHTTP, report: r.report,
		podLabels: r.e.PodLabels, foundPodLabels: &r.podLabels}
}

// record writes the status to the cluster before the action it announces (write-ahead), with
// an Event on the target when the phase changes.
func (r *run) record(ctx context.Context, phase Phase, eventType, message string) error {
	changed := r.st.Phase != phase
	if changed {
		r.st.LastTransitionTime = r.e.now().UTC().Truncate(time.Second)
	}
	r.st.Phase = phase
	if changed {
		r.event(ctx, eventType, string(phase), message)
		if severity, ok := alertedPhases[phase]; ok {
			r.alert(ctx, severity, message)
		}
	}
	r.st.Message = message
	kind := ProgressPhase
	if phase == PhaseSucceeded || phase == PhaseFailed {
		kind = ProgressVerdict
	}
	r.report(Progress{Kind: kind, Message: fmt.Sprintf("%s: %s", phase, message)})
	return r.save(ctx)
}

func (r *run) save(ctx context.Context) error {
	// A run that records the release owns it from then on (see Delete).
	if r.rel.Instance != "" {
		r.st.Owner = r.rel.Instance
	}
	r.st.Target = r.rel.Target
	if l := lock.FromContext(ctx); l != nil {
		r.st.Holder = l.Identity()
	}
	if !r.routingPending() {
		r.st.Router = r.rel.Provider
	}
	if err := r.store.save(ctx, r.st, r.spec); err != nil {
		return fmt.Errorf("saving release state in ConfigMap %s/%s: %w", r.rel.Namespace, StateConfigMapName(r.rel.Name), err)
	}
	r.store.shown, r.store.savedAt = liveViewText(r.st), r.e.now()
	return nil
}

// withLock runs fn while this process holds the release's Lease. fn's context ends when the
// lease is lost, so the run stops advancing and puts traffic on a serving side. With retire,
// a run that succeeded (the release is gone) deletes the Lease instead of leaving it empty.
func (e *Engine) withLock(ctx context.Context, rel Release, retire bool, fn func(context.Context) (Status, error)) (Status, error) {
	opts := e.Lock
	// A killed run that this host cannot check (another host or PID namespace) stops
	// renewing: its Lease is watched for one lease duration and taken over, rather than
	// failing the run that came to recover it. One seen renewing fails this run.
	opts.WaitForExpiry = true
	leases := e.LockKube
	if leases == nil {
		leases = e.Kube
	}
	l, err := lock.Acquire(ctx, leases, rel.Namespace, rel.Name, opts)
	if err != nil {
		return Status{}, err
	}
	if previous, ok := l.TookOver(); ok {
		e.note(rel, "took over the release lock from %s, whose process was gone or which stopped renewing (a killed run); recovering", previous)
	}
	lctx, cancel := l.Context(ctx)
	var st Status
	defer func() {
		cancel()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		giveBack := l.Release
		if retire && err == nil {
			giveBack = l.Retire
		}
		if err := giveBack(rctx); err != nil {
			// The run itself is done and the lock is taken over in time, but the next run
			// may wait for it: say why the lock was left.
			e.warn(rel, "canary_release lock not released", fmt.Sprintf("The Lease %s/%s-canary-release-lock could not be released: %v. "+
				"The next run takes it over: on this host once this process has exited, elsewhere after watching it unrenewed for a minute.", rel.Namespace, rel.Name, err))
		}
	}()
	if l.FoundNoLease() {
		if err = e.awaitDeletedLease(lctx, rel, l); err != nil {
			return Status{}, err
		}
	}
	st, err = fn(lctx)
	if cause := context.Cause(lctx); err != nil && errors.Is(cause, lock.ErrLost) && !errors.Is(err, lock.ErrLost) && errors.Is(err, context.Canceled) {
		// The API client only says "context canceled": say that the lock was lost, and why.
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	return st, err
}

// awaitDeletedLease handles a Lease that was missing. Runs keep the Lease when they end, so a
// release whose record names a holder lost its Lease to a deletion, perhaps under a run that
// still writes until it notices (at once when it may watch its Lease, else at its next
// renewal, and never past its lease duration). Holding a new Lease, this run waits a lease
// duration during which the record stays unchanged, as it would for a holder that stopped
// renewing, before it writes anything. The record's holder is not judged by its process:
// the run under way may not have written the record yet.
func (e *Engine) awaitDeletedLease(ctx context.Context, rel Release, l *lock.Lock) error {
	cs, cm, ok, err := loadState(ctx, e.Kube, rel.Namespace, rel.Name)
	if err != nil || !ok || cs.Status.Holder == "" {
		return err
	}
	e.warn(rel, "canary_release lock was deleted", fmt.Sprintf("The Lease %s/%s-canary-release-lock was missing although %s last ran this release: someone deleted it, perhaps while that run was under way. "+
		"This run waited until the release's state ConfigMap %s had stayed unchanged for %s before it went on.", rel.Namespace, rel.Name, cs.Status.Holder, StateConfigMapName(rel.Name), l.LeaseDuration()))
	version := cm.ResourceVersion
	quietSince := time.Now()
	// A side may lose its pods at any moment of the wait: look as often as a run checks its
	// canary, not only at the Lease's pace (campaign seed 460).
	look := l.RenewInterval() / 2
	if i := rel.Analysis.Interval; i > 0 && i < look {
		look = i
	}
	for {
		// What is left of the quiet period, up to the next look.
		left := min(l.LeaseDuration()-time.Since(quietSince), look)
		if left <= 0 {
			return nil
		}
		e.moveOffLostSideWhileQuiet(ctx, rel)
		if err := sleep(ctx, min(left, l.RenewInterval()/2)); err != nil {
			return fmt.Errorf("waiting for the run that held the deleted Lease %s/%s-canary-release-lock to stop: %w", rel.Namespace, rel.Name, err)
		}
		live, err := e.Kube.CoreV1().ConfigMaps(rel.Namespace).Get(ctx, StateConfigMapName(rel.Name), metav1.GetOptions{})
		current := ""
		switch {
		case err == nil:
			current = live.ResourceVersion
		case !apierrors.IsNotFound(err):
			continue // unknown: the next read tells
		}
		if current != version {
			e.note(rel, "the state ConfigMap changed while waiting out the deleted Lease: another run is still writing; waiting %s from now", l.LeaseDuration())
			version, quietSince = current, time.Now()
		}
	}
}

// moveOffLostSideWhileQuiet is the one write a run makes while it waits out a deleted Lease
// (awaitDeletedLease): traffic off a side that has no Ready pods, onto the other side when it
// has Ready pods and may take it, through the traffic gate (campaign seeds 1003719, 1004417).
// The canary may take it only while it runs the template the signed record says passed (in
// Promoting or Finalising) or the last promoted one; the primary whenever it serves, as in any
// run. It writes the router's weights and nothing else: not the record (whose quiet the wait
// watches), not a Deployment's scale. A run that held the deleted Lease and still writes
// moves traffic by the same rule, judged on the same live readiness, so the two cannot undo
// each other's moves: neither gives a side without Ready pods traffic, and this one moves
// only off such a side. A record that is not trusted, a routing takeover under way, a target
// released in place (whose record is its router) or an owned target leave traffic where it is.
func (e *Engine) moveOffLostSideWhileQuiet(ctx context.Context, rel Release) {
	if e.Owned != nil {
		return
	}
	cs, _, ok, err := loadState(ctx, e.Kube, rel.Namespace, rel.Name)
	if err != nil || !ok || cs.Verify(rel.Seal) != nil || cs.Status.Router != rel.Provider {
		return
	}
	r := e.newRun(rel, cs.Status, nil)
	if r.inPlace() != nil {
		return
	}
	live, err := e.Router.GetRoutes(ctx)
	if err != nil {
		return
	}
	r.st.recordSplit(live)
	if live.Primary > 0 {
		serves, err := r.w.serving(ctx, rel.PrimaryName())
		if err != nil {
			return
		}
		if !serves {
			if r.canaryMayTakeWhileQuiet(ctx) && r.routeToCanary(ctx) == nil {
				e.note(rel, "the primary %s has no Ready pods while this run waits out the deleted Lease: its traffic went to the canary %s, which runs the passed template", rel.PrimaryName(), rel.Target)
			}
			return
		}
	}
	if canaryHasTraffic(live) && r.canaryKnownLost(ctx) {
		if err := r.setSplit(ctx, router.Weights{Primary: 100}); err == nil {
			e.note(rel, "the canary %s has no Ready pods while this run waits out the deleted Lease: its traffic went to the primary %s", rel.Target, rel.PrimaryName())
		}
	}
}

// canaryMayTakeWhileQuiet reports a canary that runs the template the record says passed, in
// Promoting or Finalising, or the last promoted template.
func (r *run) canaryMayTakeWhileQuiet(ctx context.Context) bool {
	target, err := r.w.target(ctx)
	if err != nil {
		return false
	}
	revision, err := r.w.revision(ctx, target)
	if err != nil || revision == "" {
		return false
	}
	return (r.st.Phase.analysed() && revision == r.st.PassedSpec) || revision == r.st.LastPromotedSpec
}

// Initialize creates the primary, the Services and the router object; no analysis runs. It
// adopts what an earlier, unfinished initialisation of this release left. A release that was
// initialised before (its state ConfigMap says so, or its primary exists) is taken over
// instead, through the same recovery and analysis as an update, so a lost Terraform state
// never promotes a template that has not passed analysis.
func (e *Engine) Initialize(ctx context.Context, rel Release, spec []byte) (Status, error) {
	e.bindTarget(rel)
	return e.withLock(ctx, rel, false, func(ctx context.Context) (Status, error) {
		r := e.newRun(rel, Status{}, spec)
		defer r.drainNotifications(ctx)
		rec, existing, err := r.loadRecord(ctx)
		if err != nil {
			return rec, err
		}
		if err := r.claim(ctx); err != nil {
			return rec, err
		}
		if e.Owned != nil {
			if existing {
				r.st = rec
			}
			return r.ownedApply(ctx)
		}
		if existing && rec.Initialized && rec.Phase != PhaseInitializing {
			e.warn(rel, "canary_release took over an existing release",
				fmt.Sprintf("canary_release %s/%s already existed in the cluster (phase %q, primary %s). This apply took it over: "+
					"traffic went back to a serving copy, the primary kept its last promoted template, and any new template goes through the analysis. "+
					"If another Terraform configuration manages this release, remove it from one of them (terraform state rm, or a moved block).",
					rel.Namespace, rel.Name, rec.Phase, rel.PrimaryName()))
			r.st = rec
			return r.apply(ctx)
		}
		if existing {
			// An unfinished initialisation: its record says from which template it may finish.
			r.st = rec
			if err := r.takeOverRouting(ctx); err != nil {
				return r.st, err
			}
		}
		return r.walk(ctx, PhaseInitializing)
	})
}

// Apply reconciles the generated objects, recovers from any run that stopped half-way, and,
// when the target's pod template differs from the last promoted one, runs a rollout. A failed
// rollout returns *Failure.
func (e *Engine) Apply(ctx context.Context, rel Release, spec []byte, prior Status) (Status, error) {
	e.bindTarget(rel)
	return e.withLock(ctx, rel, false, func(ctx context.Context) (Status, error) {
		r := e.newRun(rel, prior, spec)
		defer r.drainNotifications(ctx)
		rec, existing, err := r.loadRecord(ctx)
		if err != nil {
			return prior, err
		}
		if existing && rec.Target != "" && rec.Target != rel.Target {
			return prior, fmt.Errorf("the cluster's record of canary_release %s/%s says it releases %s %q, not %q: its primary, Services and routes are named after %q. "+
				"Set the target back to %q, or remove this release first and add one for %q", rel.Namespace, rel.Name, rel.WorkloadKind(), rec.Target, rel.Target, rec.Target, rec.Target, rel.Target)
		}
		if err := r.claim(ctx); err != nil {
			return prior, err
		}
		if e.Owned != nil {
			if existing {
				r.st = rec
			}
			return r.ownedApply(ctx)
		}
		switch {
		case !existing:
			// The cluster holds nothing of the release (deleted out of band): it is
			// initialised again, but only from the template it last promoted (the
			// initialisation's proof, see initProof).
			if st, err := r.walk(ctx, PhaseInitializing); err != nil {
				return st, err
			}
		case rec.Phase == PhaseInitializing:
			// An initialisation never finished: finish it, from the template its record (or
			// else the Terraform state) says was last promoted, if any.
			r.st = rec
			if r.st.LastPromotedSpec == "" {
				r.st.LastPromotedSpec = prior.LastPromotedSpec
			}
			if st, err := r.walk(ctx, PhaseInitializing); err != nil {
				return st, err
			}
		default:
			r.st = rec
		}
		return r.apply(ctx)
	})
}

// apply takes back a route an interrupted destroy handed over (so that the live weights can be
// read) and the traffic from another router, recovers, prepares the target and the routes, then
// settles or releases.
func (r *run) apply(ctx context.Context) (Status, error) {
	if err := r.takeBackRoute(ctx); err != nil {
		return r.st, err
	}
	if err := r.takeOverRouting(ctx); err != nil {
		return r.st, err
	}
	if err := r.recover(ctx); err != nil {
		return r.st, err
	}
	// A revision a failed analysis rejected is refused before anything of it is written.
	if err := r.refuseRejected(ctx); err != nil {
		return r.st, err
	}
	if err := r.prepare(ctx); err != nil {
		return r.st, err
	}
	if r.hash == r.st.LastPromotedSpec {
		return r.settle(ctx)
	}
	if primary, err := r.primary(ctx); err != nil {
		return r.st, err
	} else if primary == nil {
		return r.st, fmt.Errorf("the primary %s %s/%s is missing, and the target's pod template is not the last promoted one, "+
			"so there is no analysed template to rebuild it from: set the target back to its last promoted template and apply, "+
			"which recreates the primary, then release the new template", r.rel.WorkloadKind(), r.rel.Namespace, r.rel.PrimaryName())
	}
	return r.walk(ctx, PhaseProgressing)
}

// prepare reads (or, for a manifest, applies) the target and reconciles Services and routes.
func (r *run) prepare(ctx context.Context) error {
	if _, _, _, err := r.prepareWorkload(ctx); err != nil {
		return err
	}
	return r.e.Router.Reconcile(ctx)
}

// prepareWorkload is prepare without the routing object: the target, its revision, the
// Services and the primary's autoscaler. It returns the target and its selector label.
func (r *run) prepareWorkload(ctx context.Context) (target *appsv1.Deployment, key, value string, err error) {
	if target, err = r.prepareTarget(ctx); err != nil {
		return nil, "", "", err
	}
	if key, value, err = kinds.Selector(target); err != nil {
		return nil, "", "", err
	}
	if r.hash, err = r.w.revision(ctx, target); err != nil {
		return nil, "", "", err
	}
	r.target = target
	r.replicas = r.primaryReplicas(ctx, target)
	if err := r.w.ensureServices(ctx, target, key, value, r.knownServices()); err != nil {
		return nil, "", "", err
	}
	return target, key, value, r.w.scalers().EnsurePrimary(ctx)
}

// prepareTarget returns the target, applying the manifest first when the release owns it.
func (r *run) prepareTarget(ctx context.Context) (*appsv1.Deployment, error) {
	if r.rel.Manifest == nil {
		return r.w.target(ctx)
	}
	var replicas int32
	// The listed copy serves once: this apply scales the target from here on.
	live := r.listedTarget
	r.listedTarget = nil
	if live == nil {
		if read, err := r.w.target(ctx); err == nil {
			live = read
		}
	}
	if live != nil && live.Spec.Replicas != nil {
		replicas = *live.Spec.Replicas
	}
	return r.w.applyManifest(ctx, replicas)
}

// primaryReplicas is the manifest's replica count, else the primary's, else the target's, else
// 1. With an autoscaler, the primary's HPA sizes a primary that exists: the manifest's count
// would reset it on every apply.
func (r *run) primaryReplicas(ctx context.Context, target *appsv1.Deployment) int32 {
	live := int32(0)
	if p, err := r.primary(ctx); err == nil && p != nil && p.Spec.Replicas != nil {
		live = *p.Spec.Replicas
	}
	if r.rel.Manifest != nil && r.rel.Manifest.Spec.Replicas != nil && (r.rel.Autoscaler == nil || live == 0) {
		return *r.rel.Manifest.Spec.Replicas
	}
	if live > 0 {
		return live
	}
	if r.rel.Manifest == nil && target.Spec.Replicas != nil && *target.Spec.Replicas > 0 {
		return *target.Spec.Replicas
	}
	return 1
}

// primary is the primary Deployment as this run last saw it, read when it has not yet; nil
// without error when it does not exist. Only this run (holding the lock) writes it.
func (r *run) primary(ctx context.Context) (*appsv1.Deployment, error) {
	if r.primaryLive != nil {
		return r.primaryLive, nil
	}
	p, err := r.w.primary(ctx)
	if err == nil {
		r.primaryLive = p
	}
	return p, err
}

// promote is the one way a template becomes the primary: it creates or updates the primary
// from target, which must run the revision proof admits, starting from the copy this run
// holds, and keeps the copy the API server returned.
func (r *run) promote(ctx context.Context, target *appsv1.Deployment, proof promotion.Proof) error {
	if r.e.Owned != nil {
		// A driver-owned target's primary is the revision its driver pins (owned_target.go).
		return r.e.Owned.PinPrimary(ctx, proof)
	}
	held, err := r.w.ensurePrimary(ctx, target, r.replicas, proof, r.primaryLive)
	r.primaryLive = held
	return err
}

// settle repairs a release with nothing new to roll out: the primary runs the promoted spec,
// all traffic goes to it and the canary is scaled to zero.
func (r *run) settle(ctx context.Context) (Status, error) {
	proof, err := promotion.PromotedBefore(r.st.LastPromotedSpec, r.hash)
	if err != nil {
		return r.st, err
	}
	if err := r.promote(ctx, r.target, proof); err != nil {
		return r.st, err
	}
	r.moveSettledOffLostPrimary(ctx)
	if err := r.w.waitReadyFrom(ctx, r.rel.PrimaryName(), r.rel.ProgressDeadline, r.primaryLive); err != nil {
		return r.st, err
	}
	r.sawPrimaryReady()
	r.st.PrimarySpec = r.hash
	if err := r.routeToPrimary(ctx); err != nil {
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

// cleanupContext outlives a cancelled apply just long enough to leave traffic on a serving copy,
// and never the release lock's validity (lock.ValidContext).
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return context.WithCancel(ctx)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	// After a lost lock another run may take the Lease over soon: write nothing past then.
	l := lock.FromContext(ctx)
	if l == nil {
		return cctx, cancel
	}
	vctx, vcancel := l.ValidContext(cctx)
	return vctx, func() { vcancel(); cancel() }
}

func interruptedReason(err error) string {
	switch {
	// First: a lost lock whose last renewal ran out of time wraps DeadlineExceeded too.
	case errors.Is(err, lock.ErrLost):
		return fmt.Sprintf("the run stopped: %v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return "the apply's timeout expired before the analysis finished"
	}
	return fmt.Sprintf("the apply was interrupted (%v)", err)
}

// normalEvent and warningEvent name the Event types for record.
const (
	normalEvent  = corev1.EventTypeNormal
	warningEvent = corev1.EventTypeWarning
)

// refuseUnanalysedInit stops a release that ran before from being initialised again with a
// template that never passed analysis: only a release's very first initialisation may promote
// without one. It reads the candidate without applying a manifest.
func (r *run) refuseUnanalysedInit(ctx context.Context) error {
	promoted := r.st.LastPromotedSpec
	if promoted == "" {
		return nil
	}
	candidate, err := r.candidateRevision(ctx)
	if err != nil {
		return err
	}
	if candidate == promoted {
		return nil
	}
	r.moveOffUnanalysedCanary(ctx)
	return r.unanalysedInit(candidate)
}

// moveOffUnanalysedCanary gives the primary, when it serves, the traffic a stopped run left on
// the canary, before a re-initialisation is refused: the target's template never passed
// analysis (a run killed in a blue/green switch, then the target changed, say).
func (r *run) moveOffUnanalysedCanary(ctx context.Context) {
	live, err := r.e.Router.GetRoutes(ctx)
	if err != nil || !canaryHasTraffic(live) {
		return
	}
	r.st.recordSplit(live)
	if err := r.routeToPrimary(ctx); err != nil {
		r.note("the canary %s has %s, and its template never passed analysis; it could not go to the primary: %v", r.rel.Target, splitText(live), err)
	}
}

// unanalysedInit is the refusal of a re-initialisation from a template other than the last
// promoted one.
func (r *run) unanalysedInit(candidate string) error {
	return &Failure{Status: r.st, Reason: fmt.Sprintf("release %s/%s must be initialised again (its primary %s or its state was lost, or an earlier "+
		"re-initialisation was interrupted), and it last promoted template %s; the target %s now has template %s, which never passed analysis, so it is not made the primary. "+
		"Set the target back to its last promoted template and apply, which initialises the release again, then release the new one; "+
		"or, to start over as a first install, delete the release's state ConfigMap %s and generated Services, run terraform state rm on the resource and apply",
		r.rel.Namespace, r.rel.Name, r.rel.WorkloadKind(), r.st.LastPromotedSpec, r.rel.Target, candidate, StateConfigMapName(r.rel.Name))}
}
