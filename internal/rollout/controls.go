package rollout

import (
	"context"
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
)

// The run's side of the operator's controls (package controls): it follows them on one watch
// during the analysis, logs each change, and acts on them at its checks.

// followControls starts following the state ConfigMap from the copy this run last wrote, so
// a change made after that write is seen; it replaces any earlier watch of the run.
func (r *run) followControls(ctx context.Context) {
	r.stopFollowingControls()
	r.ctl = controls.Follow(ctx, r.e.Kube.CoreV1().ConfigMaps(r.rel.Namespace), StateConfigMapName(r.rel.Name), r.store.last)
}

// stopFollowingControls ends the run's watch of the controls, if any.
func (r *run) stopFollowingControls() {
	if r.ctl != nil {
		r.ctl.Stop()
		r.ctl = nil
	}
}

// controls reads the controls as the watch last saw them, and logs what changed since the
// last look: who set or removed which control, and when.
func (r *run) controls() controls.Set {
	if r.ctl == nil {
		return controls.Set{}
	}
	set := r.ctl.Controls()
	for key, c := range set {
		if seen, ok := r.seenControls[key]; !ok || seen.Value != c.Value || !seen.At.Equal(c.At) {
			r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("control %s", c.By())})
		}
	}
	for key, seen := range r.seenControls {
		if _, ok := set[key]; !ok {
			r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("control %s removed (it was %s)", key, seen.By())})
		}
	}
	r.seenControls = set
	return set
}

// logDroppedControls tells of one-shot controls that the run's first record removed: they were
// set before this revision's run started, so they do not act on it.
func (r *run) logDroppedControls(dropped []controls.Control) {
	for _, c := range dropped {
		r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("ignored control %s: it was set before this revision's run started, and was removed", c.By())})
	}
}

// pausedBy reports a pause, as the gate that holds the run.
func (r *run) pausedBy(set controls.Set) *CheckFailure {
	c, ok := set.On(controls.Pause, "true")
	if !ok {
		return nil
	}
	return &CheckFailure{Check: controls.PauseCheck, Message: fmt.Sprintf("paused by the operator: %s; remove the annotation to resume", c.By())}
}

// builtInGateClosed reports the first built-in gate of hookType (a webhook without url) that
// no approval opened.
func (r *run) builtInGateClosed(ctx context.Context, a analyzer, set controls.Set, hookType string) *CheckFailure {
	for _, h := range a.hooksOf(hookType) {
		if h.URL != "" {
			continue
		}
		if c, ok := set.On(controls.ApprovalKey(hookType), controls.Approved); ok {
			r.noteApproval(ctx, c)
			continue
		}
		return &CheckFailure{Check: h.Name, Message: fmt.Sprintf("the built-in %s gate %s waits for an approval: kubectl annotate configmap -n %s %s %s=%s",
			hookType, h.Name, r.rel.Namespace, StateConfigMapName(r.rel.Name), controls.ApprovalKey(hookType), controls.Approved)}
	}
	return nil
}

// noteApproval records an Event the first time an approval opens a gate.
func (r *run) noteApproval(ctx context.Context, c controls.Control) {
	if r.approvals == nil {
		r.approvals = map[string]bool{}
	}
	if r.approvals[c.Key] {
		return
	}
	r.approvals[c.Key] = true
	r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("the built-in gates approved by the operator: %s", c.By())})
	r.event(ctx, normalEvent, "Approved", "Approved by the operator: "+c.By())
}

// steer acts on abort and promote-now at a check. It returns the next phase when the run ends
// or promotes; "" goes on. Promote-now acts only once the canary is Ready, and only while no
// check of the run has failed: then the run records it (with the revision and who asked)
// before the promotion, which is the proof the promotion chokepoint takes.
func (r *run) steer(ctx context.Context) (Phase, error) {
	set := r.controls()
	if c, ok := set.On(controls.Abort, "true"); ok {
		return r.aborted(c)
	}
	c, ok := set.On(controls.PromoteNow, "true")
	if !ok || !r.canaryReady {
		return "", nil
	}
	if r.st.FailedChecks > 0 {
		r.refusePromoteNow(ctx, c)
		return "", nil
	}
	r.st.PromoteNow = &OperatorAction{Revision: r.hash, Manager: c.Manager, At: c.At, FailedChecks: r.st.FailedChecks}
	r.st.PassedSpec = r.hash
	r.report(Progress{Kind: ProgressGate, Message: fmt.Sprintf("promoting now at %s, as the operator asked: %s", splitText(r.split()), c.By())})
	return PhasePromoting, nil
}

// aborted rolls the run back for the operator's abort c, rejecting its revision.
func (r *run) aborted(c controls.Control) (Phase, error) {
	r.rejection = &Rejection{Check: "abort", Reason: "aborted by the operator: " + c.By()}
	return r.rollBack(fmt.Sprintf("aborted by the operator at %s: %s", splitText(r.split()), c.By()))
}

// refusePromoteNow says, once per request, why a promote-now does not act.
func (r *run) refusePromoteNow(ctx context.Context, c controls.Control) {
	key := c.By()
	if r.refused == key {
		return
	}
	r.refused = key
	message := fmt.Sprintf("Promote-now refused: %d check(s) of this analysis failed so far (the last: %s), and a promotion now needs every check so far to have passed; "+
		"the analysis goes on. The request was %s", r.st.FailedChecks, r.lastFailure, c.By())
	r.event(ctx, warningEvent, "PromoteNowRefused", message)
	r.e.warn(r.rel, "canary_release promote-now refused", fmt.Sprintf("%s/%s: %s.", r.rel.Namespace, r.rel.Name, message))
}
