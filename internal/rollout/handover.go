package rollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
)

// AnnotationHandedOver on the apex Service marks an apex that a destroy made serve on its own,
// before it moved any route: with revert_on_deletion it selects the target's pods, and the
// routing objects go (or are handed over to it). The value is the Deployment it selects. A
// destroy that stops after that leaves the release's routes gone or not its own, so the live
// weights cannot be read; the next destroy carries on from there, and the next apply takes the
// route back once the primary serves (takeBackRoute).
const AnnotationHandedOver = "canary-release.dev/handed-over"

// handedTo is the Deployment a handed-over Service selects; empty when it is not handed over.
func handedTo(svc *corev1.Service) string {
	if svc == nil {
		return ""
	}
	return svc.Annotations[AnnotationHandedOver]
}

// ownedApex reads the apex Service; nil when it is missing or not the release's.
func (w workload) ownedApex(ctx context.Context) (*corev1.Service, error) {
	var apex *corev1.Service
	err := onAPIError(ctx, func() (err error) {
		apex, err = w.kube.CoreV1().Services(w.rel.Namespace).Get(ctx, w.rel.Apex(), metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Service %s/%s: %w", w.rel.Namespace, w.rel.Apex(), err)
	}
	if !w.owns(apex) {
		return nil, nil
	}
	return apex, nil
}

// handedOverApex is the Deployment the apex Service was handed over to by a destroy that did
// not finish; empty when the apex is the release's route (or missing, or not the release's).
func (w workload) handedOverApex(ctx context.Context) (string, error) {
	apex, err := w.ownedApex(ctx)
	return handedTo(apex), err
}

// knownApex is the apex Service as the run first read it (nil: missing, or not the release's),
// read by the list of the release's Services that the run's first ensureServices then starts
// from, so that a run reads its Services once (knownServices). Where the list is forbidden,
// the apex alone is read by name.
func (r *run) knownApex(ctx context.Context) (*corev1.Service, error) {
	if r.services == nil {
		r.services = r.w.listedServices(ctx)
		if r.services == nil {
			apex, err := r.w.ownedApex(ctx)
			if err != nil {
				return nil, err
			}
			r.services = map[string]*corev1.Service{}
			if apex != nil {
				r.services[apex.Name] = apex
			}
		}
	}
	apex := r.services[r.rel.Apex()]
	if apex == nil || !r.w.owns(apex) {
		return nil, nil
	}
	return apex, nil
}

// knownServices hands the Services knownApex read to one ensureServices, which starts from
// them instead of listing; nil when none are held. Copies serve once: a write makes them old.
func (r *run) knownServices() map[string]*corev1.Service {
	known := r.services
	r.services = nil
	return known
}

// takeBackRoute gives the release its route back after a destroy that stopped once it had
// handed the apex Service over: the Services and the primary are restored, and only once
// the primary has Ready pods do the routing object and the apex lead to it again. Until then
// the apex keeps serving from what it selects. Nothing to do when the apex is not handed over.
func (r *run) takeBackRoute(ctx context.Context) error {
	apex, err := r.knownApex(ctx)
	servedBy := handedTo(apex)
	if err != nil || servedBy == "" {
		return err
	}
	r.note("an earlier destroy stopped after handing Service %s over to %s; taking the route back", r.rel.Apex(), servedBy)
	// The destroy that handed the apex over recovered the run first: the record is settled.
	target, key, value, err := r.prepareWorkload(ctx)
	if err != nil {
		return err
	}
	stays := fmt.Sprintf("Service %s/%s keeps serving from %s %s, as the destroy that did not finish left it", r.rel.Namespace, r.rel.Apex(), r.rel.WorkloadKind(), servedBy)
	primary, err := r.primary(ctx)
	if err != nil {
		return err
	}
	if primary == nil {
		proof, err := promotion.PromotedBefore(r.st.LastPromotedSpec, r.hash)
		if err != nil {
			return fmt.Errorf("the primary %s %s/%s is missing, and the target's revision %s is not the last promoted one (%q), so there is no analysed "+
				"template to rebuild it from: %s. Set the target back to its last promoted template and apply, which recreates the primary and takes the route back",
				r.rel.WorkloadKind(), r.rel.Namespace, r.rel.PrimaryName(), r.hash, r.st.LastPromotedSpec, stays)
		}
		if err := r.promote(ctx, target, proof); err != nil {
			return fmt.Errorf("recreating the primary to take the route back (%s): %w", stays, err)
		}
	}
	if err := r.w.waitReadyFrom(ctx, r.rel.PrimaryName(), r.rel.ProgressDeadline, r.primaryLive); err != nil {
		return fmt.Errorf("taking the route back: %w; %s", err, stays)
	}
	r.sawPrimaryReady()
	if err := r.returnApex(ctx, key, value); err != nil {
		return err
	}
	// The pods the apex selected keep serving what the data plane still sends them before
	// anything scales them down.
	return sleep(ctx, r.e.drainDelay())
}
