package rollout

import (
	"context"
	"fmt"
	"time"

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
	revs, err := r.ownedRevisions(ctx)
	if err != nil {
		return r.st, err
	}
	if revs.Primary == "" {
		if revs, err = r.ownedInitialise(ctx, revs); err != nil {
			return r.st, err
		}
	}
	if err := r.e.Router.Reconcile(ctx); err != nil {
		return r.st, err
	}
	if r.st.Phase.active() && r.split() != (router.Weights{Primary: 100}) {
		// A run stopped half-way: the primary takes the traffic back before anything else.
		if err := r.setSplit(ctx, router.Weights{Primary: 100}); err != nil {
			return r.st, fmt.Errorf("recovering the run that stopped in phase %s: %w", r.st.Phase, err)
		}
	}
	// The primary is the pinned revision, whatever the record says (it has no primary Deployment).
	r.st.PrimarySpec = revs.Primary
	candidate := revs.LatestCreated
	r.hash = candidate
	if candidate == revs.Primary || candidate == "" {
		return r.ownedSettle(ctx)
	}
	return r.ownedProgress(ctx, candidate)
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
	r.st.LastPromotedSpec, r.st.PrimarySpec, r.st.LastAppliedSpec = candidate, candidate, candidate
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

// ownedProgress analyses candidate step by step and promotes it, or rolls back.
func (r *run) ownedProgress(ctx context.Context, candidate string) (Status, error) {
	if r.st.LastAppliedSpec != candidate {
		r.st.FailedChecks, r.st.Iterations = 0, 0
	}
	r.st.LastAppliedSpec, r.st.CanarySpec, r.st.PassedSpec = candidate, candidate, ""
	if err := r.record(ctx, PhaseProgressing, normalEvent, fmt.Sprintf("new revision %s detected, starting the analysis", candidate)); err != nil {
		return r.st, err
	}
	if err := r.ownedServing(ctx, candidate); err != nil {
		return r.ownedRollBack(ctx, fmt.Sprintf("the canary revision %s did not become Ready: %v", candidate, err))
	}
	if err := r.e.Owned.PinCanary(ctx, candidate); err != nil {
		return r.st, err
	}
	// {{ route }} is the canary revision, as Flagger renders it for a driver-owned target.
	r.rel.RouteName = candidate
	an := r.analyzer()
	if err := an.probe(ctx); err != nil {
		return r.ownedRollBack(ctx, err.Error())
	}
	steps := ownedSteps(r.rel.Analysis)
	queryErrors := map[string]int{}
	for i := 0; ; {
		weight := steps[i]
		if err := r.setCanaryWeight(ctx, weight); err != nil {
			return r.ownedRollBack(ctx, err.Error())
		}
		if err := r.save(ctx); err != nil {
			return r.st, err
		}
		if err := sleep(ctx, r.rel.Analysis.Interval); err != nil {
			return r.ownedRollBack(ctx, interruptedReason(err))
		}
		v := an.interval(ctx, candidate, queryErrors)
		switch {
		case v.unavailable != nil:
			return r.ownedRollBack(ctx, v.unavailable.Error())
		case v.failure != nil:
			// The same words and count as a Deployment's analysis (judge).
			if msg, reached := r.judge(ctx, v.failure); reached {
				return r.ownedRollBack(ctx, msg)
			}
			// The step is held.
		case v.halted != "":
		default:
			r.st.LastCheck = passedText(v.passed)
			if i++; i == len(steps) {
				return r.ownedPromote(ctx, candidate)
			}
		}
	}
}

// ownedSteps are the canary's weights, step by step: step_weights, else step_weight up to
// max_weight (Flagger's defaults 10 and 50 when unset).
func ownedSteps(a Analysis) []int {
	if len(a.StepWeights) > 0 {
		return a.StepWeights
	}
	step, top := a.StepWeight, a.MaxWeight
	if step <= 0 {
		step = 10
	}
	if top <= 0 || top > 100 {
		top = 50
	}
	var out []int
	for w := step; ; w += step {
		out = append(out, min(w, top))
		if w >= top {
			return out
		}
	}
}

// ownedPromote records the completed analysis, then pins the candidate as the primary (the
// primary's share moves to it in the same write) and gives it all traffic.
func (r *run) ownedPromote(ctx context.Context, candidate string) (Status, error) {
	r.st.PassedSpec = candidate
	if err := r.record(ctx, PhasePromoting, normalEvent, fmt.Sprintf("revision %s passed the analysis, promoting it", candidate)); err != nil {
		return r.st, err
	}
	proof, err := promotion.Analysis(r.st.PassedSpec, candidate)
	if err != nil {
		return r.st, err
	}
	if err := r.promote(ctx, nil, proof); err != nil {
		return r.ownedRollBack(ctx, fmt.Sprintf("pinning revision %s as the primary failed: %v", candidate, err))
	}
	r.st.LastPromotedSpec, r.st.PrimarySpec = candidate, candidate
	if err := r.setSplit(ctx, router.Weights{Primary: 100}); err != nil {
		return r.st, err
	}
	r.st.CanaryWeight = 0
	return r.st, r.record(ctx, PhaseSucceeded, normalEvent, fmt.Sprintf("revision %s promoted", candidate))
}

// ownedRollBack gives the primary all traffic and fails the run with reason.
func (r *run) ownedRollBack(ctx context.Context, reason string) (Status, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	weight := r.st.CanaryWeight
	if err := r.record(cctx, PhaseRollingBack, warningEvent, reason+". Rolling back"); err != nil {
		r.note("%v; rolling back all the same", err)
	}
	if err := r.setSplit(cctx, router.Weights{Primary: 100}); err != nil {
		return r.st, fmt.Errorf("%s; moving the traffic back to the primary revision failed: %w", reason, err)
	}
	r.st.CanaryWeight = 0
	r.rejection = nil // a driver-owned target's rejections are not recorded: its next revision is analysed
	message := fmt.Sprintf("%s. Rolled back at canary weight %d%%: 100%% of traffic is back on the primary revision %s.", reason, weight, r.st.PrimarySpec)
	if err := r.record(cctx, PhaseFailed, warningEvent, message); err != nil {
		return r.st, err
	}
	return r.st, &Failure{Status: r.st, Reason: message}
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
