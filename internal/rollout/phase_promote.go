package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// promoting records that the analysis passed, then copies the canary's template to the primary
// and waits for it. Cancelled while the primary rolls, it leaves traffic where both copies of
// the passed template serve (see interruptedPromotion).
func (r *run) promoting(ctx context.Context) (Phase, error) {
	rel := r.rel
	// A completed analysis (or skip_analysis, or a revert of a promoted template) lets the
	// canary take a pod-less primary's traffic at once, before the promotion is recorded. An
	// operator's promote-now does not: its template has not passed analysis, and only the
	// record makes it promotable (promotion.OperatorPromoteNow), so its canary takes that
	// traffic only once the record holds the promote-now and proves the promotion (campaign
	// seed 2036).
	promoteNow := r.st.PromoteNow != nil && !rel.SkipAnalysis && (r.st.Revert == "" || r.st.Revert != r.hash)
	if !promoteNow {
		r.moveOffLostPrimary(ctx)
	}
	if err := r.record(ctx, PhasePromoting, normalEvent, fmt.Sprintf("Copying %s template to %s", rel.Target, rel.PrimaryName())); err != nil {
		return "", err
	}
	proof, err := r.promotionProof()
	if err != nil {
		return r.rollBack(fmt.Sprintf("promotion refused: %v", err))
	}
	if promoteNow {
		r.moveOffLostPrimary(ctx)
	}
	r.moveOffLostCanary(ctx)
	if err := r.promote(ctx, r.target, proof); err != nil {
		if ctx.Err() != nil {
			return r.interruptedPromotion(ctx)
		}
		// The primary was not touched: it still runs the last promoted template.
		r.st.PrimarySpec = r.st.LastPromotedSpec
		return r.rollBack(fmt.Sprintf("promotion failed: updating the primary: %v", err))
	}
	if err := r.waitPrimaryWatchingCanary(ctx); err != nil {
		if ctx.Err() != nil {
			return r.interruptedPromotion(ctx)
		}
		return r.failedPromotion(ctx, err)
	}
	// Only now does the primary run the promoted revision on Ready pods.
	r.st.PrimarySpec = r.hash
	return PhaseFinalising, nil
}

// promotionProof is the proof the run's promotion takes, read from the record just written: a
// promotion follows only an analysis that completed (or was skipped) for this very revision,
// a revert within rollback_window, or the operator's recorded promote-now.
func (r *run) promotionProof() (promotion.Proof, error) {
	proof, err := promotion.Analysis(r.st.PassedSpec, r.hash)
	switch {
	case r.rel.SkipAnalysis:
		proof, err = promotion.SkipAnalysis(true, r.hash)
	case r.st.Revert != "" && r.st.Revert == r.hash:
		// A revert within rollback_window, recorded by the run before this promotion.
		proof, err = r.revertProof(r.hash)
	case r.st.PromoteNow != nil:
		// The operator's promote-now, recorded with the revision and the failed checks.
		proof, err = promotion.OperatorPromoteNow(r.st.PromoteNow.Revision, r.st.PromoteNow.FailedChecks, r.hash)
	}
	return proof, err
}

// finalising routes the traffic back to the primary, which now runs the passed template, and
// scales the canary to zero. Interrupted here, it finishes anyway: both sides serve the
// passed template, and finishing is the shortest way to a settled release. A primary that
// loses its Ready pods meanwhile gives its share to the canary until it is Ready again.
func (r *run) finalising(ctx context.Context) (Phase, error) {
	rel := r.rel
	if err := r.record(ctx, PhaseFinalising, normalEvent, "Routing all traffic to primary"); err != nil {
		return "", err
	}
	release := r.holdPrimaryScale(ctx)
	defer func() {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		release(cctx)
	}()
	for {
		err := r.returnTraffic(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, errPrimaryNotServing) {
			return "", err
		}
		// The primary lost its Ready pods before it had all traffic back: the side that
		// serves takes its share at once, and the promotion goes on once it is back.
		r.primaryLive = nil
		if ctx.Err() != nil {
			return r.interruptedPromotion(ctx)
		}
		if err := r.waitPrimaryWatchingCanary(ctx); err != nil {
			if ctx.Err() != nil {
				return r.interruptedPromotion(ctx)
			}
			return r.heldFinalising(ctx, err)
		}
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	r.st.notePromoted(r.st.PassedSpec)
	r.st.FailedChecks = 0
	done := fmt.Sprintf("Promotion completed! %s runs the new revision", rel.PrimaryName())
	if p := r.st.PromoteNow; p != nil && p.Revision == r.st.LastPromotedSpec {
		done += fmt.Sprintf(" (promoted before its analysis completed, by the operator's promote-now: %s at %s)", controls.ManagerName(p.Manager), p.At.UTC().Format(time.RFC3339))
	}
	if err := r.record(cctx, PhaseSucceeded, normalEvent, done); err != nil {
		return "", err
	}
	r.postRollout(cctx, PhaseSucceeded)
	if ctx.Err() != nil {
		return "", &Failure{Status: r.st, Reason: interruptedReason(context.Cause(ctx)) +
			fmt.Sprintf("; the new revision had already passed its analysis, so the promotion was completed: 100%% of traffic is on the primary %s, which runs it", rel.PrimaryName())}
	}
	return PhaseSucceeded, nil
}

// heldFinalising ends a run whose primary lost its Ready pods in Finalising and was not Ready
// again within the deadline. The primary runs the passed template, so the release is not
// failed: the phase stays Finalising, traffic stays on the side that serves, and the next
// apply (the plan shows one) finishes the promotion once the primary is Ready.
func (r *run) heldFinalising(ctx context.Context, cause error) (Phase, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	r.syncLiveWeight(cctx)
	r.st.Message = fmt.Sprintf("the promotion is held: the primary %s lost its Ready pods before it had all traffic back, and is not Ready again (%v): %s; the next apply finishes the promotion once the primary is Ready",
		r.rel.PrimaryName(), cause, r.whereTraffic(cctx))
	_ = r.save(cctx)
	return "", &Failure{Status: r.st, Reason: r.st.Message}
}

// returnTraffic walks the canary's weight down by step_weight_promotion, then routes all
// traffic to the primary and scales the canary to zero. A canary that lost its Ready pods, or
// no longer runs the passed template, skips the remaining steps. It fails with
// errPrimaryNotServing when the primary has no Ready pods to take more traffic.
func (r *run) returnTraffic(ctx context.Context) error {
	pace := pacer{interval: r.rel.Analysis.Interval}
	for i, w := range promotionSteps(r.st.CanaryWeight, r.rel.Analysis.StepWeightPromotion) {
		if w == 0 || r.canaryChanged {
			break
		}
		if i > 0 {
			if err := pace.wait(ctx, r.canaryWatch()); err != nil {
				// Cancelled, or the canary lost its Ready pods or its template: the primary
				// is Ready and runs the passed template, so the remaining steps are skipped.
				r.canaryChanged = r.canaryChanged || errors.Is(err, errTargetEdited)
				break
			}
		}
		pace.restart()
		if err := r.shift(ctx, router.Weights{Primary: 100 - w, Canary: w}, nil); err != nil {
			if errors.Is(err, errPrimaryNotServing) || (ctx.Err() == nil && !errors.Is(err, errCanaryNotServing)) {
				return err
			}
			break
		}
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	return r.routeToPrimaryWatchingIt(cctx)
}

// interruptedPromotion handles a cancel while the primary rolls to the passed template. Both
// copies now run templates that may serve: the canary runs the passed one, the primary a mix
// of the last promoted and the passed one. Traffic stays on the sides with Ready pods; the
// recorded phase stays Promoting, so the next run finishes the promotion.
func (r *run) interruptedPromotion(ctx context.Context) (Phase, error) {
	cause := interruptedReason(context.Cause(ctx))
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	primaryServes, err := r.w.serving(cctx, r.rel.PrimaryName())
	switch {
	case err == nil && !primaryServes && !r.canaryChanged:
		if err := r.routeToCanary(cctx); err != nil && !errors.Is(err, errCanaryNotPassed) {
			return "", fmt.Errorf("%s during promotion, and routing traffic to the canary failed: %w; %s", cause, err, r.whereTraffic(cctx))
		}
	case primaryServes && r.canaryChanged:
		r.moveOffChangedCanary(cctx)
	}
	during, canary := "was rolling to the promoted template", "the canary runs the template that passed analysis"
	if r.st.Phase == PhaseFinalising {
		during = "had no Ready pods"
	}
	if r.canaryChanged {
		canary = "the canary's template changed after its analysis passed, so it gets no more traffic"
	}
	r.st.Message = fmt.Sprintf("%s while the primary %s %s: %s (%s); the next apply finishes the promotion",
		cause, r.rel.PrimaryName(), during, r.whereTraffic(cctx), canary)
	_ = r.save(cctx)
	return "", &Failure{Status: r.st, Reason: r.st.Message}
}

// failedPromotion handles a primary that did not become ready after the copy (Flagger #1898):
// the canary runs the template that passed analysis and serves, so all traffic goes to it and
// it keeps running.
func (r *run) failedPromotion(ctx context.Context, cause error) (Phase, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := r.routeToCanary(cctx); err != nil {
		return "", fmt.Errorf("promotion failed: primary %s %s/%s did not become ready (%v), and routing traffic to the canary failed: %w; %s",
			r.rel.WorkloadKind(), r.rel.Namespace, r.rel.PrimaryName(), cause, err, r.whereTraffic(cctx))
	}
	reason := fmt.Sprintf("promotion failed: primary %s %s/%s did not become ready (%v); 100%% of traffic is on the canary %s, which keeps running",
		r.rel.WorkloadKind(), r.rel.Namespace, r.rel.PrimaryName(), cause, r.rel.Target)
	if err := r.record(cctx, PhaseFailed, warningEvent, reason); err != nil {
		return "", err
	}
	return PhaseFailed, nil
}
