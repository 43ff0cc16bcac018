package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// errCanaryNotServing ends an analysis interval early: the canary lost its Ready pods.
var errCanaryNotServing = errors.New("the canary has no Ready pods")

// errTargetEdited ends an analysis: someone changed the target's pod template behind the
// apply, so the canary no longer runs the template being analysed.
var errTargetEdited = errors.New("the target's pod template changed during the analysis")

// progressing scales the canary up and walks the strategy's steps, analysing each. It ends in
// Promoting when the analysis completed (or was skipped) and in RollingBack otherwise. Gates
// (confirm-* webhooks) hold it where Flagger's do, but never longer than gate_timeout.
func (r *run) progressing(ctx context.Context) (Phase, error) {
	rel := r.rel
	r.recordPrimaryBaseline(ctx)
	r.st.LastAppliedSpec, r.st.CanarySpec, r.st.PassedSpec = r.hash, r.hash, ""
	r.st.FailedChecks, r.st.Iterations, r.st.CanaryWeight, r.st.Step = 0, 0, 0, 0
	r.st.PromoteNow, r.st.Revert, r.canaryReady = nil, "", false
	// A recovery in this process may have found an earlier passed canary changed: this
	// analysis is of another revision, whose promotion reads the target afresh.
	r.canaryChanged = false
	// The operator's one-shot controls set before this run are for another run: this first
	// record removes them, and the run follows the ones set from now on.
	r.store.clearOneShot = true
	if err := r.record(ctx, PhaseProgressing, normalEvent, fmt.Sprintf("New revision detected: scaling up %s", rel.Target)); err != nil {
		return "", err
	}
	r.logDroppedControls(r.store.dropped)
	r.store.dropped = nil
	r.followControls(ctx)
	a := r.analyzer()
	pace := pacer{interval: rel.Analysis.Interval}
	// Before the canary gets any pod: nothing to analyse while the gate holds.
	if next, err := r.awaitGate(ctx, a, HookConfirmRollout, PhaseWaiting, &pace, nil); next != "" || err != nil {
		return next, err
	}
	watch, next, err := r.startCanary(ctx)
	if next != "" || err != nil {
		return next, err
	}
	r.canaryReady = true
	if rel.SkipAnalysis || r.revertsWithinWindow(r.hash) {
		// No step follows to read the controls set while the canary started.
		if next, err := r.steerBeforePromotion(ctx, a, &pace); next != "" || err != nil {
			return next, err
		}
	}
	if rel.SkipAnalysis {
		r.st.PassedSpec = r.hash
		return PhasePromoting, nil
	}
	if r.revertsWithinWindow(r.hash) {
		// A revert within rollback_window: recorded, then promoted without analysis. The
		// canary is Ready, and gets no weight.
		r.st.PassedSpec, r.st.Revert = r.hash, r.hash
		msg := fmt.Sprintf("Revision %s was promoted %d promotion(s) ago, within rollback_window.revisions (%d): promoting it without analysis",
			r.hash, r.st.promotionsAgo(r.hash), rel.RollbackWindow)
		r.event(ctx, normalEvent, "RollbackWindow", msg)
		if err := r.record(ctx, PhaseProgressing, normalEvent, msg); err != nil {
			return r.rollBack(err.Error())
		}
		return PhasePromoting, nil
	}
	if err := a.probe(ctx); err != nil {
		return r.rollBack(err.Error())
	}
	pace.restart()
	for {
		msg, stop := r.judge(ctx, a.runHooks(ctx, HookPreRollout, PhaseProgressing, r.st.LastAppliedSpec))
		if stop {
			return r.rollBack(msg)
		}
		if msg == "" {
			break
		}
		if err := pace.wait(ctx, nil); err != nil {
			return r.rollBack(interruptedReason(err))
		}
		if next, err := r.steer(ctx); next != "" || err != nil {
			return next, err
		}
	}
	iv := &intervals{a: a, pace: &pace, watch: watch, queryErrors: map[string]int{}}
	strategy := StrategyFor(rel.Analysis)
	splits := strategy.Splits()
	for r.st.Step = 0; r.st.Step < len(splits); r.st.Step++ {
		split := splits[r.st.Step]
		if watch != nil && !watch.serving() {
			// Lost between the last check and this step: recover at the current split first.
			if next, err := r.canaryLost(ctx, r.split()); next != "" || err != nil {
				return next, err
			}
		}
		// Before the first shift there is nothing to judge while a gate or a pause holds;
		// after it, the checks go on at the current weight, and the threshold still applies.
		held := iv
		if !canaryHasTraffic(r.split()) {
			held = nil
		}
		gate := HookConfirmTrafficIncrease
		if split.Canary <= r.st.CanaryWeight || !strategy.Weighted() {
			gate = "" // no weight increase: only a pause holds the next step
		}
		if next, err := r.awaitGate(ctx, a, gate, PhaseProgressing, &pace, held); next != "" || err != nil {
			return next, err
		}
		pace.restart()
		// An abort or a promote-now set while the canary started, or the gate held, acts
		// before the weight moves.
		if next, err := r.steer(ctx); next != "" || err != nil {
			return next, err
		}
		if err := r.shift(ctx, split, strategy); err != nil {
			return r.rollBack(err.Error())
		}
		for {
			passed, next, err := r.analyseInterval(ctx, iv)
			if next != "" || err != nil {
				return next, err
			}
			if passed {
				break
			}
		}
	}
	if next, err := r.awaitGate(ctx, a, HookConfirmPromotion, PhaseWaitingPromotion, &pace, iv); next != "" || err != nil {
		return next, err
	}
	// The analysis completed: promoting records this before the primary is touched.
	r.st.PassedSpec = r.hash
	return PhasePromoting, nil
}

// startCanary gets the canary Ready to take its first step. It returns the watch that follows
// the canary's readiness for the rest of the run (nil where the target's own controller
// serves its revisions: a driver-owned target's gate asks the driver), or the next phase when
// the canary cannot start.
func (r *run) startCanary(ctx context.Context) (*deploymentWatch, Phase, error) {
	if r.e.Owned != nil {
		next, err := r.startOwnedCanary(ctx)
		return nil, next, err
	}
	rel := r.rel
	// One list and watch follows the canary from here to the end of the analysis. The watch
	// sees the template only: the canary's pods read the tracked configs when they start
	// (restartStaleCanary, configsChangedSinceStart), and a config edited later is not
	// promoted by this run (the promotion's proof is for r.hash), but by the next apply,
	// whose revision then differs.
	watch := r.w.followCanary(ctx, rel.Target, TemplateHash(r.target), r.target)
	// The watch lives until the run ends: the traffic gate and the promotion read it too.
	r.followCanary(watch)
	// Pods of an earlier scale-down still terminating would count as Ready in the
	// Deployment's status for a moment, yet serve nothing: let them go first.
	before, err := watch.scaledDown(ctx, rel.ProgressDeadline)
	if err == nil {
		before, err = r.restartStaleCanary(ctx, watch, before)
	}
	if err != nil {
		if ctx.Err() != nil {
			return r.canaryNotStarted(interruptedReason(context.Cause(ctx)))
		}
		return r.canaryNotStarted(fmt.Sprintf("canary %s %s/%s: %v", rel.WorkloadKind(), rel.Namespace, rel.Target, err))
	}
	// The readiness that counts is that of a copy newer than the scale-up: before it, the
	// canary's zero replicas would look ready.
	written := int64(-1)
	if replicas := r.canaryReplicas(ctx); before.Spec.Replicas == nil || *before.Spec.Replicas != replicas || r.w.needsApexLabel(before.Spec.Template) {
		if err := r.unshareApex(ctx); err != nil {
			return r.canaryNotStarted(err.Error())
		}
		if err := r.w.scaleCanary(ctx, before, replicas); err != nil {
			return r.canaryNotStarted(err.Error())
		}
		written = before.Generation
	}
	if err := watch.readyAfter(ctx, written, rel.ProgressDeadline); err != nil {
		if ctx.Err() != nil {
			return r.canaryNotStarted(interruptedReason(context.Cause(ctx)))
		}
		return r.canaryNotStarted(fmt.Sprintf("canary %s %s/%s is not ready: %v", rel.WorkloadKind(), rel.Namespace, rel.Target, err))
	}
	if msg, err := r.configsChangedSinceStart(ctx); err != nil || msg != "" {
		if err != nil {
			msg = fmt.Sprintf("reading the ConfigMaps and Secrets %s %s/%s uses: %v", rel.WorkloadKind(), rel.Namespace, rel.Target, err)
		}
		return r.canaryNotStarted(msg)
	}
	return &watch.deploymentWatch, "", nil
}

// canaryNotStarted rolls back a run whose canary could not start, for reason.
func (r *run) canaryNotStarted(reason string) (*deploymentWatch, Phase, error) {
	next, err := r.rollBack(reason)
	return nil, next, err
}

// intervals is what the analysis intervals of one run share.
type intervals struct {
	a           analyzer
	pace        *pacer
	watch       *deploymentWatch
	queryErrors map[string]int
}

// analyseInterval waits for the next check, then runs the rollback webhooks, the rollout
// webhooks and the metrics. passed means the step may advance; a next phase ends the run.
func (r *run) analyseInterval(ctx context.Context, iv *intervals) (passed bool, next Phase, err error) {
	rel := r.rel
	switch err := iv.pace.wait(ctx, iv.watch); {
	case errors.Is(err, errCanaryNotServing):
		if next, err := r.canaryLost(ctx, r.split()); next != "" || err != nil {
			return false, next, err
		}
		iv.pace.restart()
		return false, "", nil
	case errors.Is(err, errTargetEdited):
		next, err := r.rollBack(fmt.Sprintf("%v (by kubectl or another tool?): the canary %s no longer runs the template this apply analyses; apply again to analyse the new one",
			errTargetEdited, rel.Target))
		return false, next, err
	case err != nil:
		next, err := r.rollBack(interruptedReason(err))
		return false, next, err
	}
	// More pods on the revision of a release in place than its step allows: the check does
	// not count (in_place.go).
	if over, next, err := r.overStep(ctx); over || next != "" || err != nil {
		return false, next, err
	}
	// A primary that lost pods holds the step (ratio.go).
	short, next, err := r.keepRatio(ctx)
	if next != "" || err != nil {
		return false, next, err
	}
	r.st.Iterations++
	if next, err := r.steer(ctx); next != "" || err != nil {
		return false, next, err
	}
	if hook := iv.a.rollbackRequested(ctx, r.st.Phase, r.st.LastAppliedSpec); hook != "" {
		r.rejection = &Rejection{Check: "the rollback webhook " + hook, Reason: "it asked for a rollback"}
		next, err := r.rollBack(fmt.Sprintf("the rollback webhook %s asked for a rollback at %s", hook, splitText(r.split())))
		return false, next, err
	}
	v := iv.a.interval(ctx, r.st.LastAppliedSpec, iv.queryErrors)
	r.reportDryRun(ctx, v.dryRun)
	switch {
	case ctx.Err() != nil:
		next, err := r.rollBack(interruptedReason(context.Cause(ctx)))
		return false, next, err
	case v.unavailable != nil:
		next, err := r.rollBack(v.unavailable.Error())
		return false, next, err
	case v.halted != "":
		// A query error says nothing about the canary: hold the step and ask again.
		r.checked("held", v.halted)
		r.note("%s", v.halted)
		return false, "", nil
	case v.failure != nil:
		r.checked("failed", v.failure.Message)
	default:
		r.checked("passed", passedText(v.passed))
	}
	msg, stop := r.judge(ctx, v.failure)
	if stop {
		next, err := r.rollBack(msg)
		return false, next, err
	}
	if msg != "" || short {
		return false, "", nil
	}
	// The check passed, so the step is done: it counts only if the canary had the step's
	// traffic, which someone else may have taken from it since the run wrote it.
	moved, next, err := r.stepTakenBehind(ctx)
	return !moved, next, err
}

// stepTakenBehind reports a step whose weights the live router no longer holds: someone else
// wrote it (reset it to 100/0, say) since the run did, so the check just passed may have seen
// no canary traffic, or deleted it. The run writes the step again, and the check does not
// count. A target released in place is its own router: its pods are checked by overStep.
func (r *run) stepTakenBehind(ctx context.Context) (bool, Phase, error) {
	if r.inPlace() != nil || r.e.Owned != nil {
		return false, "", nil
	}
	want := r.split()
	live, err := r.e.Router.GetRoutes(ctx)
	switch {
	case err == nil && live.Canary == want.Canary:
		r.routerHeld.clear()
		return false, "", nil
	case err != nil && !router.IsNotFound(err):
		// Unread is not moved: the run's own write is what is known of the router.
		r.note("the step's check passed; the router could not be read back to confirm the step's weights: %v", err)
		return false, "", nil
	}
	found := fmt.Sprintf("%d%% on the canary", live.Canary)
	if err != nil {
		found = err.Error()
	}
	// A router that never reads back what was written (another controller owns it, say)
	// would hold the step for ever: the hold ends at the progress deadline.
	if deadline, lasted := r.heldPastDeadline(&r.routerHeld); lasted {
		next, err := r.rollBack(fmt.Sprintf("the router held %s where the run wrote %s for %s (progress_deadline_seconds): another controller or tool may be writing it, and no check of the step could count",
			found, splitText(want), deadline))
		return true, next, err
	}
	r.note("the step's check passed, but the router holds %s where the run wrote %s: writing the step again, and the check does not count (rolled back if this lasts progress_deadline_seconds, %s)", found, splitText(want), r.progressDeadline())
	if err := r.setSplit(ctx, r.stepSplit()); err != nil {
		next, err := r.rollBack(fmt.Sprintf("writing the step again after the router was changed behind the run (%s): %v", found, err))
		return true, next, err
	}
	return true, "", nil
}

// shift writes the step's split. The state ConfigMap is not written per step: the phase it
// records (written ahead of the phase) is what recovery needs, recovery and refresh read the
// step's weight from the router itself (see recover and the provider's Read), and one write
// fewer per step is most of what a step costs the API server.
func (r *run) shift(ctx context.Context, split router.Weights, strategy Strategy) error {
	if err := r.setSplit(ctx, split); err != nil {
		return err
	}
	message := fmt.Sprintf("Advance %s canary weight %d", r.rel.Name, split.Canary)
	if strategy != nil && !strategy.Weighted() {
		message = fmt.Sprintf("Advance %s %s iteration %d: %s", r.rel.Name, strategy.Kind(), r.st.Step+1, splitText(split))
	}
	r.stepEvent(ctx, message)
	r.showProgress(ctx)
	return nil
}

// judge counts a failed check; it reports the message and whether the threshold is reached.
func (r *run) judge(ctx context.Context, f *CheckFailure) (string, bool) {
	if f == nil {
		return "", false
	}
	threshold := max(r.rel.Analysis.Threshold, 1)
	r.st.FailedChecks++
	r.lastFailure = f.Message
	msg := fmt.Sprintf("%s (failed checks: %d of threshold %d)", f.Message, r.st.FailedChecks, threshold)
	if r.st.FailedChecks >= threshold {
		r.rejection = &Rejection{Check: f.Check, Reason: msg}
	}
	check := Progress{Kind: ProgressCheck, Metric: f.Check, Range: f.Range, Message: msg}
	if f.Value != 0 {
		check.Value = &f.Value
	}
	r.report(check)
	r.event(ctx, warningEvent, "Halted", "Halt advancement: "+msg)
	_ = r.save(ctx)
	return fmt.Sprintf("Canary analysis failed at %s: %s", splitText(r.split()), msg), r.st.FailedChecks >= threshold
}

// canaryLost takes the weight away from a canary that lost its Ready pods at once, then waits
// (within progress_deadline_seconds) for it to be Ready again. It returns "" to resume the same
// step, or the next phase. Like Flagger, this is not a failed check.
func (r *run) canaryLost(ctx context.Context, split router.Weights) (Phase, error) {
	rel := r.rel
	at := splitText(split)
	switch ok, err := r.w.serving(ctx, rel.PrimaryName()); {
	case err == nil && !ok:
		return r.rollBack(fmt.Sprintf("the canary %s lost its Ready pods at %s", rel.Target, at))
	case err != nil:
		// Unknown is not "no": the canary certainly serves nothing, and the primary served at
		// the last look, so its traffic goes where it is most likely served, without waiting
		// for more reads.
		r.note("the primary could not be read (%v); the canary has no Ready pods, so its traffic goes to the primary", err)
	}
	r.sawPrimaryReady()
	// The weight goes first, even before its record: a canary without Ready pods must not
	// keep traffic while the state ConfigMap is written, and recovery reads live weights.
	if err := r.setCanaryWeight(ctx, 0); err != nil {
		return r.rollBack(err.Error())
	}
	if err := r.record(ctx, PhaseProgressing, warningEvent, fmt.Sprintf(
		"Halt advancement: the canary %s lost its Ready pods at %s; its traffic went back to the primary while it recovers", rel.Target, at)); err != nil {
		return "", err
	}
	if err := r.w.waitReady(ctx, rel.Target, rel.ProgressDeadline); err != nil {
		if ctx.Err() != nil {
			return r.rollBack(interruptedReason(context.Cause(ctx)))
		}
		return r.rollBack(fmt.Sprintf("the canary %s lost its Ready pods at %s and was not Ready again within the progress deadline: %v", rel.Target, at, err))
	}
	if err := r.shift(ctx, split, nil); err != nil {
		return r.rollBack(err.Error())
	}
	return "", nil
}

// passedText words the metrics of a passed interval for the status's last check.
func passedText(metrics []string) string {
	if len(metrics) == 0 {
		return "the webhooks passed, and there are no metrics"
	}
	return strings.Join(metrics, "; ")
}
