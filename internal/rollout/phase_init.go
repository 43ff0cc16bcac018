package rollout

import (
	"context"
	"fmt"
	"strings"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
)

// initializing creates the primary from the target, then the Services and the router object,
// and scales the target to zero. Without an analysis, the primary may only take the template
// the release last promoted, or any template on the release's very first initialisation
// (initProof): it refuses before writing anything else.
func (r *run) initializing(ctx context.Context) (Phase, error) {
	if err := r.refuseInitWithoutProof(ctx); err != nil {
		return "", err
	}
	if err := r.record(ctx, PhaseInitializing, normalEvent, "Initializing: creating the primary copy of the target"); err != nil {
		return "", err
	}
	target, err := r.prepareTarget(ctx)
	if err != nil {
		return "", err
	}
	key, value, err := kinds.Selector(target)
	if err != nil {
		return "", err
	}
	if r.hash, err = r.w.revision(ctx, target); err != nil {
		return "", err
	}
	proof, err := r.initProof(r.hash)
	if err != nil {
		// The target changed since the check before the record.
		return "", err
	}
	r.target = target
	r.replicas = r.primaryReplicas(ctx, target)
	if err := r.promote(ctx, target, proof); err != nil {
		return "", err
	}
	if err := r.w.waitReadyFrom(ctx, r.rel.PrimaryName(), r.rel.ProgressDeadline, r.primaryLive); err != nil {
		return "", fmt.Errorf("primary %s %s/%s did not become ready: %w", r.rel.WorkloadKind(), r.rel.Namespace, r.rel.PrimaryName(), err)
	}
	r.sawPrimaryReady()
	// Services and routes go live only once the primary serves, so there is no gap in traffic;
	// an apex that an interrupted destroy handed over comes back through the gate.
	if err := r.w.ensureServices(ctx, target, key, value, r.knownServices()); err != nil {
		return "", err
	}
	if err := r.returnApex(ctx, key, value); err != nil {
		return "", err
	}
	if err := r.routeToPrimary(ctx); err != nil {
		return "", err
	}
	if err := r.w.scalers().EnsurePrimary(ctx); err != nil {
		return "", err
	}
	r.st.LastAppliedSpec, r.st.PrimarySpec = r.hash, r.hash
	r.st.notePromoted(r.hash)
	r.st.CanaryWeight, r.st.Initialized = 0, true
	return PhaseInitialized, r.record(ctx, PhaseInitialized, normalEvent,
		fmt.Sprintf("Initialization done: %s serves all traffic", r.rel.PrimaryName()))
}

// refuseInitWithoutProof checks, before the initialisation records or applies anything, that
// it will be able to prove its template may become the primary: the last promoted one when
// the release promoted before, else nothing in the cluster showing the release ever ran.
func (r *run) refuseInitWithoutProof(ctx context.Context) error {
	if r.st.LastPromotedSpec != "" {
		return r.refuseUnanalysedInit(ctx)
	}
	if !r.found.FirstInitRecord && !r.found.OtherRecord && !r.found.Primary {
		// Nothing else was found: the generated Services are the last sign of an earlier run.
		svc, err := r.e.Kube.CoreV1().Services(r.rel.Namespace).Get(ctx, r.rel.Apex()+"-primary", metav1.GetOptions{})
		if err == nil && r.w.checkOwned(svc, "Service") == nil {
			r.found.Services = true
		}
	}
	if ran := r.found.Ran(); len(ran) > 0 {
		return &Failure{Status: r.st, Reason: fmt.Sprintf("release %s/%s must be initialised again, but the cluster holds %s and neither its state nor the Terraform state "+
			"records which template it last promoted, so no template can be shown to have passed analysis. "+
			"Restore the state ConfigMap %s, or, to start over as a first install, delete the release's primary %s %s and its Services %s-primary and %s-canary, then apply",
			r.rel.Namespace, r.rel.Name, strings.Join(ran, " and "), StateConfigMapName(r.rel.Name), r.rel.WorkloadKind(), r.rel.PrimaryName(), r.rel.Apex(), r.rel.Apex())}
	}
	return nil
}

// initProof is the proof that the initialisation may make candidate the primary.
func (r *run) initProof(candidate string) (promotion.Proof, error) {
	if r.st.LastPromotedSpec != "" {
		proof, err := promotion.PromotedBefore(r.st.LastPromotedSpec, candidate)
		if err != nil {
			return proof, r.unanalysedInit(candidate)
		}
		return proof, nil
	}
	return promotion.FirstInitialisation(r.found, candidate)
}
