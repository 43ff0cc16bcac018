package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"
)

// A workload kind released in place (kinds.InPlace: its revisions share the object's own pods,
// as a StatefulSet's partition splits them) is a driver-owned target of its own: the run
// walks the same phase machine as every release, and owned_target.go's path, with the few
// differences this file holds. Its traffic is its pods: a weight is a number of pods on the
// canary revision, written only through setSplit, which admits no more pods than the step
// reached; a revision becomes every pod's only through promote, with a proof; a rollback
// restores the last promoted revision through promote too. Between runs the driver holds the
// object so that no pod starts an unanalysed revision (Reconcile).

// errStepExceeded refuses more pods for the canary revision than the step reached allows, or
// any for a revision that is not under analysis.
var errStepExceeded = errors.New("pod change refused")

// InPlaceHookTypes are the webhook types a release in place runs: the checks of its steps, and
// the gates that hold it (with a url, or built in without one).
var InPlaceHookTypes = []string{HookRollout, HookConfirmRollout, HookConfirmTrafficIncrease, HookConfirmPromotion}

// bindTarget makes the release's own workload its target when its kind is released in place:
// the driver is then the release's target and its router.
func (e *Engine) bindTarget(rel Release) {
	t := kinds.InPlace(rel.TargetKind, e.Kube, rel.Namespace, rel.Target, kinds.InPlaceOptions{
		Deadline: rel.ProgressDeadline, Warn: func(summary, detail string) { e.warn(rel, summary, detail) }})
	if t != nil {
		e.Owned, e.Router = t, t
	}
}

// inPlace is the release's in-place target; nil for any other.
func (r *run) inPlace() mesh.InPlace {
	t, _ := r.e.Owned.(mesh.InPlace)
	return t
}

// checkInPlace refuses what a release in place cannot do, naming the attribute.
func (r *run) checkInPlace() error {
	a, kind := r.rel.Analysis, r.rel.WorkloadKind()
	switch {
	case r.rel.Manifest != nil:
		return fmt.Errorf("manifest: a %s is released through target_ref with kind = %q; manifest takes a Deployment only", kind, kind)
	case a.Iterations > 0:
		return fmt.Errorf("analysis.iterations: a %s is released in place, step by step (step_weight or step_weights); blue/green and A/B testing need a second copy, which a %s does not get", kind, kind)
	case !r.rel.SkipAnalysis && len(StepWeights(a)) == 0:
		return fmt.Errorf("analysis: a %s release needs step_weight or step_weights", kind)
	}
	for _, h := range a.Webhooks {
		if !slices.Contains(InPlaceHookTypes, h.Type) {
			return fmt.Errorf("analysis.webhooks[%q].type = %q: a %s release runs %s webhooks only", h.Name, h.Type, kind, strings.Join(InPlaceHookTypes, ", "))
		}
	}
	return nil
}

// inPlaceRelease finishes what an earlier run left, then settles or releases the target's
// latest revision (revs, read after the initialisation).
func (r *run) inPlaceRelease(ctx context.Context, t mesh.InPlace, revs mesh.Revisions) (Status, error) {
	candidate := revs.LatestCreated
	r.hash = candidate
	r.st.PrimarySpec = revs.Primary
	switch {
	case r.st.Phase == PhaseRollingBack && r.rejects(candidate):
		// A failed analysis rejected the revision the target makes: the rollback is finished
		// as it began, restoring the last promoted template. A rollback for any other reason
		// is finished below, as a Deployment's recovery does: the pods go back to the pinned
		// revision, and the template the user applies is analysed again from its first step.
		r.reason = r.st.Message
		return r.walk(ctx, PhaseRollingBack)
	case (r.st.Phase == PhasePromoting || r.st.Phase == PhaseFinalising) && r.st.PassedSpec == candidate:
		return r.walk(ctx, PhasePromoting)
	case candidate == r.st.LastPromotedSpec:
		// A run that stopped half-way may have left pods on another revision.
		proof, err := promotion.PromotedBefore(r.st.LastPromotedSpec, candidate)
		if err != nil {
			return r.st, err
		}
		if err := r.promote(ctx, nil, proof); err != nil {
			return r.st, err
		}
		r.st.PrimarySpec = candidate
		return r.ownedSettle(ctx)
	}
	// The live pods say where a run that stopped left its revision, when the record says one
	// was under way, or was rebuilt from the set after the state ConfigMap was lost (it then
	// says that nothing runs).
	stopped := r.st.Phase.active() || r.recordLost()
	if stopped {
		r.syncLiveWeight(ctx)
	}
	if stopped && r.split() != (router.Weights{Primary: 100}) {
		// A run stopped half-way: its revision's pods go back to the primary's before the
		// analysis starts again from its first step.
		if err := r.setSplit(ctx, router.Weights{Primary: 100}); err != nil {
			return r.st, fmt.Errorf("recovering the run that stopped in phase %s: %w", r.st.Phase, err)
		}
	}
	if r.rejects(candidate) {
		j := r.st.Rejected
		return r.st, &Failure{Status: r.st, Reason: fmt.Sprintf("revision %s of %s %s/%s failed its analysis before (%s); change the template, or retry_rejected to analyse it again",
			candidate, r.rel.WorkloadKind(), r.rel.Namespace, r.rel.Target, j.Reason)}
	}
	queries, variables, err := t.Queries(ctx)
	if err != nil {
		return r.st, err
	}
	r.rel.Analysis.Metrics = withBuiltIns(r.rel.Analysis.Metrics, queries, variables)
	return r.walk(ctx, PhaseProgressing)
}

// withBuiltIns fills the metrics without a query from the target's built-in queries, and gives
// every metric the target's variables (its own take precedence).
func withBuiltIns(metrics []Metric, queries, variables map[string]string) []Metric {
	out := make([]Metric, len(metrics))
	for i, m := range metrics {
		if m.Query == "" {
			m.Query = queries[m.Name]
		}
		vars := map[string]string{}
		for k, v := range variables {
			vars[k] = v
		}
		for k, v := range m.Variables {
			vars[k] = v
		}
		m.Variables = vars
		out[i] = m
	}
	return out
}

// admitInPlace is the in-place part of the traffic gate: the canary revision gets more pods
// only while it is the revision under analysis, and no more than the step reached allows.
func (r *run) admitInPlace(revs mesh.Revisions, w router.Weights) error {
	if w.Canary <= r.split().Canary {
		return nil
	}
	splits := StrategyFor(r.rel.Analysis).Splits()
	if r.st.Phase != PhaseProgressing || revs.Canary != r.st.CanarySpec || r.st.Step >= len(splits) {
		return fmt.Errorf("%w: %s %s/%s makes revision %s, which is not the one under analysis (%s): no more pods run it (%s refused)",
			errStepExceeded, r.rel.WorkloadKind(), r.rel.Namespace, r.rel.Target, revs.Canary, r.st.CanarySpec, splitText(w))
	}
	if step := splits[r.st.Step].Canary; w.Canary > step {
		return fmt.Errorf("%w: %s would give revision %s of %s %s/%s more than the step reached (%d%%)",
			errStepExceeded, splitText(w), revs.Canary, r.rel.WorkloadKind(), r.rel.Namespace, r.rel.Target, step)
	}
	return nil
}

// stepWeight is the canary's weight at the step the record has reached.
func (r *run) stepWeight() int {
	splits := StrategyFor(r.rel.Analysis).Splits()
	if len(splits) == 0 {
		return 0
	}
	return splits[min(r.st.Step, len(splits)-1)].Canary
}

// overStep re-reads, at every check of a release in place, the pods that run the revision
// under analysis: a scale-up gives each new pod the canary revision whatever the router wrote,
// so an autoscaler can put more pods on it than the step reached allows. A check taken so
// judges more than the step and does not count: over is true, the status says so and the step
// is held, and once that has lasted progress_deadline_seconds the run rolls back (next).
func (r *run) overStep(ctx context.Context) (over bool, next Phase, err error) {
	t := r.inPlace()
	if t == nil {
		return false, "", nil
	}
	w := r.stepWeight()
	share, err := t.Share(ctx, r.hash, w)
	if errors.Is(err, mesh.ErrTemplateChanged) {
		next, err := r.rollBack(fmt.Sprintf("%v (by kubectl or another tool?): %s %s no longer makes the revision this apply analyses; apply again to analyse the new one",
			err, r.rel.WorkloadKind(), r.rel.Target))
		return true, next, err
	}
	if err != nil {
		next, err := r.rollBack(fmt.Sprintf("the release of %s %s stopped: %v", r.rel.WorkloadKind(), r.rel.Target, err))
		return true, next, err
	}
	if share.On <= share.Allowed {
		r.overStepHeld.clear()
		return false, "", nil
	}
	if deadline, lasted := r.heldPastDeadline(&r.overStepHeld); lasted {
		next, err := r.rollBack(fmt.Sprintf("%d of the %d pods of %s %s ran revision %s for %s (progress_deadline_seconds), more than the %d its step of %d%% allows "+
			"(a scale-up gives every new pod the new revision): no check of the step could count", share.On, share.Of, r.rel.WorkloadKind(), r.rel.Target, r.hash, deadline, share.Allowed, w))
		return true, next, err
	}
	message := fmt.Sprintf("check does not count: %d of the %d pods of %s %s run revision %s, more than the %d its step of %d%% allows "+
		"(a scale-up gives every new pod the new revision); the step is held, and rolled back if this lasts progress_deadline_seconds (%s)",
		share.On, share.Of, r.rel.WorkloadKind(), r.rel.Target, r.hash, share.Allowed, w, r.progressDeadline())
	return true, "", r.record(ctx, r.st.Phase, normalEvent, message)
}

// inPlaceRollingBack restores the last promoted revision on every pod (through promote, with
// the proof that it was promoted), holds the target, records the rejection and fails the run.
func (r *run) inPlaceRollingBack(ctx context.Context) (Phase, error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	reason := r.reason
	if reason == "" {
		reason = "rolling back"
	}
	r.recordRejection()
	if err := r.record(cctx, PhaseRollingBack, warningEvent, reason); err != nil {
		r.note("%v; rolling back all the same", err)
	}
	promoted := r.st.LastPromotedSpec
	proof, err := promotion.PromotedBefore(promoted, promoted)
	if err != nil {
		return "", err
	}
	if err := r.promote(cctx, nil, proof); err != nil {
		return "", fmt.Errorf("%s; rolling %s %s/%s back to revision %s: %w", reason, r.rel.WorkloadKind(), r.rel.Namespace, r.rel.Target, promoted, err)
	}
	r.st.PrimarySpec = promoted
	if err := r.setSplit(cctx, router.Weights{Primary: 100}); err != nil {
		return "", fmt.Errorf("%s; holding %s %s/%s after the rollback: %w", reason, r.rel.WorkloadKind(), r.rel.Namespace, r.rel.Target, err)
	}
	r.st.CanaryWeight, r.st.Step = 0, 0
	message := fmt.Sprintf("%s: rolled back, every pod of %s %s/%s runs revision %s again and is Ready", reason, r.rel.WorkloadKind(), r.rel.Namespace, r.rel.Target, promoted)
	if err := r.record(cctx, PhaseFailed, warningEvent, message); err != nil {
		return "", err
	}
	r.postRollout(cctx, PhaseFailed)
	return PhaseFailed, nil
}

// rejects reports a revision that a failed analysis rejected, and that retry_rejected has not
// released since.
func (r *run) rejects(revision string) bool {
	j := r.st.Rejected
	return j != nil && j.Revision == revision && j.Retry == r.rel.RetryRejected
}

// recordLost reports a run whose record was rebuilt from the target, its state ConfigMap gone.
func (r *run) recordLost() bool {
	return !r.found.FirstInitRecord && !r.found.OtherRecord
}
