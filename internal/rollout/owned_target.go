package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// A release whose driver owns its target kind (Engine.Owned, a mesh.Target) has no primary
// Deployment, no generated Services and no template copy: the target's own controller makes a
// revision of each template, with its pods, and the driver pins which revision is the primary
// and which the canary. The revision's name is the release's revision (LastPromotedSpec,
// PassedSpec, ...). Traffic still moves only through setSplit (its gate asks the target which
// revisions serve) and a revision becomes the primary only through promote's proofs.

// ownedApply is Initialize and Apply for a driver-owned target.
func (r *run) ownedApply(ctx context.Context) (Status, error) {
	inPlace := r.inPlace()
	if inPlace != nil {
		if err := r.checkInPlace(); err != nil {
			return r.st, err
		}
	}
	revs, err := r.ownedRevisions(ctx)
	if err != nil {
		return r.st, err
	}
	// A target released in place has a primary (the revision its pods run) before any
	// release: its record says whether the release initialised it.
	if revs.Primary == "" || (inPlace != nil && !r.st.Initialized) {
		if revs, err = r.ownedInitialise(ctx, revs); err != nil {
			return r.st, err
		}
	}
	if err := r.e.Router.Reconcile(ctx); err != nil {
		return r.st, err
	}
	if inPlace != nil {
		return r.inPlaceRelease(ctx, inPlace, revs)
	}
	if r.st.Phase.active() {
		// The record is not written per step: the live weights say where the stopped run left
		// the traffic (recover does the same for a Deployment).
		r.syncLiveWeight(ctx)
	}
	if r.st.Phase.active() && r.split() != (router.Weights{Primary: 100}) {
		// A run stopped half-way: the primary takes the traffic back before anything else.
		if err := r.setSplit(ctx, router.Weights{Primary: 100}); err != nil {
			return r.st, fmt.Errorf("recovering the run that stopped in phase %s: %w", r.st.Phase, err)
		}
	}
	// The primary is the pinned revision, whatever the record says (it has no primary Deployment).
	r.st.PrimarySpec = revs.Primary
	if r.pinnedByTheRecordedPromotion(revs.Primary) {
		// A run stopped after its promotion pinned the revision (a pin needs the promotion's
		// proof): that revision is the promoted one, as a primary Deployment's annotation
		// says for a Deployment.
		r.st.notePromoted(revs.Primary)
	}
	candidate := revs.LatestCreated
	r.hash = candidate
	if candidate == revs.Primary || candidate == "" {
		return r.ownedSettle(ctx)
	}
	// {{ route }} is the canary revision, as Flagger renders it for a driver-owned target.
	r.rel.RouteName = candidate
	r.rel.Analysis = ownedDefaults(r.rel.Analysis)
	return r.walk(ctx, PhaseProgressing)
}

// pinnedByTheRecordedPromotion reports a pinned primary that the record's promotion announced:
// the record says Promoting or Finalising, for that revision, which passed its analysis or
// was the operator's promote-now.
func (r *run) pinnedByTheRecordedPromotion(primary string) bool {
	if primary == "" || (r.st.Phase != PhasePromoting && r.st.Phase != PhaseFinalising) {
		return false
	}
	return r.st.PassedSpec == primary || (r.st.PromoteNow != nil && r.st.PromoteNow.Revision == primary)
}

// ownedDefaults are Flagger's step_weight 10 and max_weight 50 for a driver-owned target whose
// analysis names no steps.
func ownedDefaults(a Analysis) Analysis {
	if len(a.StepWeights) > 0 || a.Iterations > 0 {
		return a
	}
	if a.StepWeight <= 0 {
		a.StepWeight = 10
	}
	if a.MaxWeight <= 0 || a.MaxWeight > 100 {
		a.MaxWeight = 50
	}
	return a
}

// ownedRevisions waits, within the progress deadline, until the target's controller has made
// a revision of its latest template (LatestCreated stays empty until it has: a status read
// right after the user's apply still names the revision before).
func (r *run) ownedRevisions(ctx context.Context) (mesh.Revisions, error) {
	deadline := r.e.now().Add(r.rel.ProgressDeadline)
	for {
		revs, err := r.e.Owned.Revisions(ctx)
		if err == nil && revs.LatestCreated != "" {
			return revs, nil
		}
		if r.e.now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("the controller of %s made no revision of its latest template within progress_deadline (%s)", r.rel.Target, r.rel.ProgressDeadline)
			}
			return revs, err
		}
		if err := sleep(ctx, time.Second); err != nil {
			return revs, err
		}
	}
}

// ownedServing waits until revision has Ready pods, within the progress deadline.
func (r *run) ownedServing(ctx context.Context, revision string) error {
	deadline := r.e.now().Add(r.rel.ProgressDeadline)
	for {
		ok, err := r.e.Owned.Serving(ctx, revision)
		if err == nil && ok {
			return nil
		}
		if r.e.now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("revision %s has no Ready pods after progress_deadline (%s)", revision, r.rel.ProgressDeadline)
			}
			return err
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

// ownedInitialise pins the primary: the revision last promoted, or, on the release's very first
// initialisation, the target's latest revision.
func (r *run) ownedInitialise(ctx context.Context, revs mesh.Revisions) (mesh.Revisions, error) {
	candidate := revs.LatestCreated
	var proof promotion.Proof
	var err error
	if r.st.LastPromotedSpec != "" {
		proof, err = promotion.PromotedBefore(r.st.LastPromotedSpec, candidate)
		if err != nil {
			return revs, r.unanalysedInit(candidate)
		}
	} else if proof, err = promotion.FirstInitialisation(r.found, candidate); err != nil {
		return revs, err
	}
	if err := r.record(ctx, PhaseInitializing, normalEvent, fmt.Sprintf("pinning revision %s as the primary", candidate)); err != nil {
		return revs, err
	}
	if err := r.ownedServing(ctx, candidate); err != nil {
		return revs, err
	}
	if err := r.promote(ctx, nil, proof); err != nil {
		return revs, err
	}
	r.st.Initialized = true
	r.st.notePromoted(candidate)
	r.st.PrimarySpec, r.st.LastAppliedSpec = candidate, candidate
	r.st.recordSplit(router.Weights{Primary: 100})
	if err := r.record(ctx, PhaseInitialized, normalEvent, fmt.Sprintf("revision %s is the primary", candidate)); err != nil {
		return revs, err
	}
	revs.Primary = candidate
	return revs, nil
}

// ownedSettle leaves all traffic on the pinned primary.
func (r *run) ownedSettle(ctx context.Context) (Status, error) {
	if err := r.setSplit(ctx, router.Weights{Primary: 100}); err != nil {
		return r.st, err
	}
	r.st.CanaryWeight, r.st.FailedChecks = 0, 0
	if r.st.Phase != PhaseInitialized {
		r.st.Phase = PhaseSucceeded
	}
	r.st.Message = "nothing to release: the target's latest revision is the primary"
	return r.st, r.save(ctx)
}

// startOwnedCanary pins the candidate revision as the canary once it has Ready pods: the
// analysis (progressing) then moves the weights to it through the one traffic gate.
func (r *run) startOwnedCanary(ctx context.Context) (Phase, error) {
	if err := r.ownedServing(ctx, r.hash); err != nil {
		if ctx.Err() != nil {
			return r.rollBack(interruptedReason(context.Cause(ctx)))
		}
		return r.rollBack(fmt.Sprintf("the canary revision %s did not become Ready: %v", r.hash, err))
	}
	if err := r.e.Owned.PinCanary(ctx, r.hash); err != nil {
		return "", err
	}
	return "", nil
}

// ownedPromoting pins the revision that passed as the primary, with the run's one promotion
// proof (the primary's share moves to it in the same write), then gives it all traffic.
func (r *run) ownedPromoting(ctx context.Context) (Phase, error) {
	candidate := r.hash
	if err := r.record(ctx, PhasePromoting, normalEvent, fmt.Sprintf("revision %s passed the analysis, promoting it", candidate)); err != nil {
		return "", err
	}
	proof, err := r.promotionProof()
	if err != nil {
		return r.rollBack(fmt.Sprintf("promotion refused: %v", err))
	}
	if err := r.promote(ctx, nil, proof); err != nil {
		return r.rollBack(fmt.Sprintf("pinning revision %s as the primary failed: %v", candidate, err))
	}
	r.st.notePromoted(candidate)
	r.st.PrimarySpec = candidate
	if err := r.setSplit(ctx, router.Weights{Primary: 100}); err != nil {
		return "", err
	}
	r.st.CanaryWeight, r.st.FailedChecks = 0, 0
	done := fmt.Sprintf("revision %s promoted", candidate)
	if p := r.st.PromoteNow; p != nil && p.Revision == candidate {
		done += fmt.Sprintf(" (before its analysis completed, by the operator's promote-now: %s at %s)", controls.ManagerName(p.Manager), p.At.UTC().Format(time.RFC3339))
	}
	if err := r.record(ctx, PhaseSucceeded, normalEvent, done); err != nil {
		return "", err
	}
	r.postRollout(ctx, PhaseSucceeded)
	return PhaseSucceeded, nil
}

// ownedRollingBack gives the primary revision all traffic and fails the run.
func (r *run) ownedRollingBack(ctx context.Context) (Phase, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	weight := r.st.CanaryWeight
	reason := r.reason
	if reason == "" {
		reason = "rolling back"
	}
	if err := r.record(cctx, PhaseRollingBack, warningEvent, reason+". Rolling back"); err != nil {
		r.note("%v; rolling back all the same", err)
	}
	if err := r.setSplit(cctx, router.Weights{Primary: 100}); err != nil {
		return "", fmt.Errorf("%s; moving the traffic back to the primary revision failed: %w", reason, err)
	}
	r.st.CanaryWeight = 0
	r.rejection = nil // a driver-owned target's rejections are not recorded: its next revision is analysed
	message := fmt.Sprintf("%s. Rolled back at canary weight %d%%: 100%% of traffic is back on the primary revision %s.", reason, weight, r.st.PrimarySpec)
	if err := r.record(cctx, PhaseFailed, warningEvent, message); err != nil {
		return "", err
	}
	r.postRollout(cctx, PhaseFailed)
	return PhaseFailed, nil
}

// admitOwned is the gate for a driver-owned target: a side gets weight only while its pinned
// revision serves, and after the analysis passed the canary gets no more than it had unless
// it still is the revision that passed.
func (r *run) admitOwned(ctx context.Context, w router.Weights) error {
	revs, err := r.e.Owned.Revisions(ctx)
	if err != nil {
		return fmt.Errorf("reading %s's revisions before routing: %w", r.rel.Target, err)
	}
	if w.Canary > 0 {
		if revs.Canary == "" {
			return fmt.Errorf("%w: no canary revision is pinned (%s refused)", errCanaryNotServing, splitText(w))
		}
		if ok, err := r.e.Owned.Serving(ctx, revs.Canary); err != nil || !ok {
			return fmt.Errorf("%w: revision %s gets no traffic (%s refused): %v", errCanaryNotServing, revs.Canary, splitText(w), err)
		}
		if w.Canary > r.split().Canary && r.st.Phase.analysed() && revs.Canary != r.st.PassedSpec {
			return fmt.Errorf("%w: revision %s gets no more traffic (%s refused)", errCanaryNotPassed, revs.Canary, splitText(w))
		}
		if r.inPlace() != nil {
			if err := r.admitInPlace(revs, w); err != nil {
				return err
			}
		}
	}
	if gainsPrimaryTraffic(r.split(), w) && revs.Primary != "" {
		if ok, err := r.e.Owned.Serving(ctx, revs.Primary); err != nil || !ok {
			return fmt.Errorf("%w: revision %s gets no more traffic (%s refused): %v", errPrimaryNotServing, revs.Primary, splitText(w), err)
		}
	}
	return nil
}

// ownedDelete hands the target's traffic back (the driver's Finalize) and deletes the record.
func (r *run) ownedDelete(ctx context.Context) error {
	if err := r.e.Router.Finalize(ctx); err != nil {
		return err
	}
	return r.store.delete(ctx)
}

// ownedDrift is Drift for a driver-owned target: a revision not promoted yet, an interrupted
// run, and the router's live split against the record.
func (e *Engine) ownedDrift(ctx context.Context, rel Release, st Status) ([]string, error) {
	var out []string
	revs, err := e.Owned.Revisions(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s/%s's revisions: %w", rel.Namespace, rel.Target, err)
	}
	if st.LastPromotedSpec != "" && revs.LatestCreated != "" && revs.LatestCreated != st.LastPromotedSpec {
		out = append(out, fmt.Sprintf("%s %s/%s: its latest revision %s is not the last promoted one (%s); the next apply analyses it",
			rel.Target, rel.Namespace, rel.Target, revs.LatestCreated, st.LastPromotedSpec))
	}
	cs, ok, err := LoadState(ctx, e.Kube, rel.Namespace, rel.Name)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		out = append(out, fmt.Sprintf("the state ConfigMap %s/%s is missing; the next apply rebuilds it", rel.Namespace, StateConfigMapName(rel.Name)))
	case cs.Status.Phase.active():
		out = append(out, fmt.Sprintf("a rollout was interrupted in phase %s", cs.Status.Phase))
	default:
		st = cs.Status
	}
	if live, err := e.Router.GetRoutes(ctx); err == nil && live != st.recordedSplit() {
		out = append(out, fmt.Sprintf("the router holds %s, but the recorded status says %s", splitText(live), splitText(st.recordedSplit())))
	}
	rd, err := e.Router.Drift(ctx)
	if err != nil {
		return nil, err
	}
	return append(out, rd...), nil
}
