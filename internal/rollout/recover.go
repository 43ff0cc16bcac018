package rollout

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"
)

// Recovery. Every run, holding the release's lock, first reads the record an earlier run left
// (the state ConfigMap; without it, the primary's own annotation) and the router's live
// weights, and applies one rule before it touches the target:
//
//   - Initializing: nothing was ever promoted; the initialisation is done again.
//   - Waiting, Progressing, WaitingPromotion or RollingBack (the analysis had not completed):
//     roll back. Traffic goes to the primary if it serves, then the canary is scaled to zero.
//     The new run then analyses the target again from the first step.
//   - Promoting or Finalising (the analysis had completed): the template that passed may
//     become the primary. The promotion is finished when the target still runs that template
//     or the primary already does; otherwise it is rolled back.
//   - Any other phase whose live weights send traffic to the canary: rolled back as above.
//
// The primary's annotation is the fallback truth of what was promoted: it is written in the
// same update as the primary's template, so a lost ConfigMap never promotes anything. A target
// released in place has no primary: the revision it shows a release pinned (mesh.InPlace's
// Pinned) is its fallback truth, and the sign that its next initialisation is not a first one.

// loadRecord reads the cluster's record of the release. existing is false when the cluster
// holds nothing of it (no state ConfigMap and no primary). A record it cannot verify is read
// as untrusted.go says, against the Terraform state the run started from (r.st).
func (r *run) loadRecord(ctx context.Context) (Status, bool, error) {
	cs, cm, ok, err := loadState(ctx, r.e.Kube, r.rel.Namespace, r.rel.Name)
	if err != nil {
		return Status{}, false, err
	}
	// The first save updates the ConfigMap just read; a conflict reads it again.
	r.store.last = cm
	r.recordedSpec = cs.Spec
	primary, target, err := r.w.ownedDeployments(ctx)
	if err != nil {
		return Status{}, false, err
	}
	r.primaryLive, r.listedTarget = primary, target
	// A target released in place has no primary Deployment: the target itself shows the
	// revision a release pinned, which is the fallback truth of what was promoted.
	if t := r.inPlace(); t != nil {
		if r.pinned, err = t.Pinned(ctx); err != nil {
			return Status{}, false, err
		}
	}
	firstInit := ok && cs.Status.claimsFirstInit()
	if ok {
		if why := cs.Verify(r.rel.Seal); why != nil {
			primaryRuns := r.pinned
			if primary != nil {
				primaryRuns = primary.Annotations[AnnotationPrimarySpec]
			}
			if cs.Status, firstInit, err = r.distrust(ctx, cs.Status, primaryRuns, why); err != nil {
				return Status{}, false, err
			}
		} else {
			r.rel.Seal.trustedSequence(cs)
		}
	}
	r.found = promotion.Evidence{FirstInitRecord: firstInit, OtherRecord: ok && !firstInit, Primary: primary != nil, Pinned: r.pinned != ""}
	if !ok {
		if primary == nil && r.pinned != "" {
			return Status{
				Initialized: true, LastPromotedSpec: r.pinned, PrimarySpec: r.pinned, LastAppliedSpec: r.pinned,
				Message: "the state ConfigMap was missing; rebuilt from the revision the target shows was pinned as its primary",
			}, true, nil
		}
		if primary == nil {
			return Status{}, false, nil
		}
		spec := primary.Annotations[AnnotationPrimarySpec]
		return Status{
			Initialized: true, LastPromotedSpec: spec, PrimarySpec: spec, LastAppliedSpec: spec,
			Owner:   primary.Annotations[AnnotationOwner],
			Router:  primary.Annotations[AnnotationRouter],
			Message: "the state ConfigMap was missing; rebuilt from the primary " + r.rel.WorkloadKind(),
		}, true, nil
	}
	st := cs.Status
	if primary == nil {
		// Deleted behind the release: it runs nothing, whatever the record says, so that
		// recovery rebuilds it (from a template with a proof) instead of waiting for it.
		st.PrimarySpec = ""
	} else {
		// The primary only ever receives a promoted or passed template, so what it runs is
		// what was last promoted, even when a run died between the copy and its record.
		if spec := primary.Annotations[AnnotationPrimarySpec]; spec != "" && st.Initialized {
			st.PrimarySpec = spec
			if spec == st.PassedSpec || spec == st.LastPromotedSpec {
				st.LastPromotedSpec = spec
			}
		}
	}
	return st, true, nil
}

// recover brings a release that an earlier run left half-way to a settled state.
func (r *run) recover(ctx context.Context) error {
	phase := r.st.Phase
	live, err := r.e.Router.GetRoutes(ctx)
	if router.IsNotFound(err) {
		if !phase.active() {
			// No router object yet: Reconcile creates it at 100/0.
			return nil
		}
		// Deleted behind a run that stopped: rebuilt at 100/0, and recovered from there.
		if err := r.e.Router.Reconcile(ctx); err != nil {
			return fmt.Errorf("recreating the deleted router object to recover the run that stopped in phase %s: %w", phase, err)
		}
		live, err = r.e.Router.GetRoutes(ctx)
	}
	if err != nil {
		return fmt.Errorf("reading the live weights to recover the run that stopped in phase %s: %w", phase, err)
	}
	if !phase.active() && !canaryHasTraffic(live) {
		return nil
	}
	// What follows may scale the target: its listed copy is no longer current.
	r.listedTarget = nil
	r.note("recovering: the last run stopped in phase %q with %d%% of traffic on the canary", phase, live.Canary)
	r.st.recordSplit(live)
	switch phase {
	case PhaseInitializing:
		return nil
	case PhasePromoting, PhaseFinalising:
		if r.st.PassedSpec != "" {
			finished, err := r.finishPromotion(ctx)
			if finished || err != nil {
				return err
			}
		}
	}
	r.reason = fmt.Sprintf("an earlier run stopped in phase %s at canary weight %d%% before its analysis completed", phaseName(phase), live.Canary)
	next, err := r.rollingBack(ctx)
	if err != nil {
		return err
	}
	if next == PhaseFailed && canaryHasTraffic(r.split()) {
		// The rollback was held: do not analyse anything new until it completes.
		return &Failure{Status: r.st, Reason: r.st.Message}
	}
	return nil
}

// finishPromotion completes a promotion whose analysis passed. It reports false when neither
// the primary nor the target runs the passed template any more, so nothing can be finished.
func (r *run) finishPromotion(ctx context.Context) (bool, error) {
	target, err := r.w.target(ctx)
	if err != nil {
		return false, err
	}
	revision, err := r.w.revision(ctx, target)
	if err != nil {
		return false, err
	}
	if r.st.PrimarySpec != r.st.PassedSpec && revision != r.st.PassedSpec {
		return false, nil
	}
	if r.st.PrimarySpec != r.st.PassedSpec {
		r.target, r.hash = target, r.st.PassedSpec
		r.replicas = r.primaryReplicas(ctx, target)
		next, err := r.promoting(ctx)
		if err != nil || next != PhaseFinalising {
			if err == nil {
				_, err = r.walk(ctx, next)
			}
			return true, err
		}
	} else {
		// The primary runs the passed template. A target changed since gets none of the
		// traffic (the promotion finishes without its steps, and the new template is then
		// analysed); meanwhile traffic stays on the sides with Ready pods.
		r.canaryChanged = revision != r.st.PassedSpec
		if err := r.waitPrimaryWatchingCanary(ctx); err != nil {
			return true, fmt.Errorf("finishing the promotion that an earlier run started: %w", err)
		}
	}
	_, err = r.walk(ctx, PhaseFinalising)
	return true, err
}

func phaseName(p Phase) string {
	if p == "" {
		return "unknown"
	}
	return string(p)
}

// Remnant is what the cluster still holds of a release whose state ConfigMap is gone.
type Remnant struct {
	// PrimarySpec is the template hash the primary runs; empty without a primary.
	PrimarySpec string
	// Found is false when nothing labelled as the release's is left.
	Found bool
}

// FindRemnant looks for the objects a release leaves behind without its state ConfigMap: its
// primary Deployment, else its generated Services; for a target the driver owns (owned, nil
// for none) or one released in place, the revision the release pinned on it. A release with
// remnants still exists; the next apply rebuilds it and never initialises it afresh from an
// unanalysed template.
func FindRemnant(ctx context.Context, kube kubernetes.Interface, rel Release, owned mesh.Target) (Remnant, error) {
	if t := kinds.InPlace(rel.TargetKind, kube, rel.Namespace, rel.Target, kinds.InPlaceOptions{Deadline: rel.ProgressDeadline}); t != nil {
		pinned, err := t.Pinned(ctx)
		return Remnant{PrimarySpec: pinned, Found: pinned != ""}, err
	}
	if owned != nil {
		revs, err := owned.Revisions(ctx)
		if router.IsNotFound(err) {
			return Remnant{}, nil
		}
		return Remnant{PrimarySpec: revs.Primary, Found: revs.Primary != ""}, err
	}
	w := workload{kube: kube, rel: rel}
	primary, err := w.ownedPrimary(ctx)
	if err != nil {
		return Remnant{}, err
	}
	if primary != nil {
		return Remnant{PrimarySpec: primary.Annotations[AnnotationPrimarySpec], Found: true}, nil
	}
	svc, err := kube.CoreV1().Services(rel.Namespace).Get(ctx, rel.Apex()+"-primary", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Remnant{}, nil
	case err != nil:
		return Remnant{}, err
	}
	return Remnant{Found: w.checkOwned(svc, "Service") == nil}, nil
}

// ownedDeployments finds, by one list of the Deployments labelled as this release's, the
// primary and, when the release owns it (manifest), the target; nil for one that is missing.
// The list is a consistent read (recovery decides on it), and a right every Role already
// grants for the readiness waits.
func (w workload) ownedDeployments(ctx context.Context) (primary, target *appsv1.Deployment, err error) {
	var list *appsv1.DeploymentList
	err = onAPIError(ctx, func() (err error) {
		list, err = w.workloads().List(ctx, metav1.ListOptions{LabelSelector: w.releaseSelector()})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	for i := range list.Items {
		switch d := &list.Items[i]; {
		case d.Name == w.rel.PrimaryName():
			primary = d
		case d.Name == w.rel.Target && w.rel.Manifest != nil:
			target = d
		}
	}
	return primary, target, nil
}

// ownedPrimary reads the primary Deployment; nil when it is missing or is not this release's.
func (w workload) ownedPrimary(ctx context.Context) (*appsv1.Deployment, error) {
	primary, err := w.primary(ctx)
	if err != nil || primary == nil || w.checkOwned(primary, "Deployment") != nil {
		return nil, err
	}
	return primary, nil
}
