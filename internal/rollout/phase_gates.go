package rollout

import (
	"context"
	"fmt"
	"time"
)

// awaitGate holds the run while a gate of hookType is closed: every interval it asks the
// gate's webhooks again, until all of them answer success (status ≤ 202). waiting is the
// phase recorded meanwhile. held, when set, keeps the analysis going at the current weight,
// so the threshold and the rollback webhooks still apply (Flagger's traffic-increase gate
// stops them, #1801). A gate closed for longer than analysis.gate_timeout rolls back; so does
// the apply's own timeout, and both name the gate.
func (r *run) awaitGate(ctx context.Context, a analyzer, hookType string, waiting Phase, pace *pacer, held *intervals) (Phase, error) {
	if len(a.hooksOf(hookType)) == 0 {
		return "", nil
	}
	var since time.Time
	for {
		closed := a.runHooks(ctx, hookType, r.st.Phase, r.st.LastAppliedSpec)
		if closed == nil {
			if !since.IsZero() {
				return "", r.gateOpened(ctx, hookType, waiting)
			}
			return "", nil
		}
		if since.IsZero() {
			since = r.e.now()
			if err := r.gateClosed(ctx, closed, waiting); err != nil {
				return "", err
			}
			if held == nil {
				pace.restart()
			}
		}
		if timeout := r.rel.Analysis.GateTimeout; timeout > 0 && r.e.now().Sub(since) >= timeout {
			return r.rollBack(fmt.Sprintf("the %s gate %s stayed closed for %s (analysis.gate_timeout): %s",
				hookType, closed.Check, timeout, closed.Message))
		}
		var next Phase
		var err error
		if held != nil {
			_, next, err = r.analyseInterval(ctx, held)
		} else if waitErr := pace.wait(ctx, nil); waitErr != nil {
			next, err = r.rollBack(interruptedReason(waitErr))
		}
		if next != "" || err != nil {
			if ctx.Err() != nil {
				r.reason += fmt.Sprintf(", while the %s gate %s was closed", hookType, closed.Check)
			}
			return next, err
		}
	}
}

// gateClosed tells that a gate holds the run: the phase, an Event, and the progress log.
func (r *run) gateClosed(ctx context.Context, closed *CheckFailure, waiting Phase) error {
	message := fmt.Sprintf("Waiting for the gate %s: %s", closed.Check, closed.Message)
	if r.st.Phase == waiting {
		// The phase does not change (a traffic-increase gate), so record would stay silent.
		r.event(ctx, normalEvent, "Waiting", message)
	}
	if err := r.record(ctx, waiting, normalEvent, message); err != nil {
		return err
	}
	if !r.gateMuted(closed.Check) {
		r.alert(ctx, "info", message)
	}
	return nil
}

// gateMuted reports a gate webhook with mute_alert.
func (r *run) gateMuted(name string) bool {
	for _, h := range r.rel.Analysis.Webhooks {
		if h.Name == name && h.MuteAlert {
			return true
		}
	}
	return false
}

// gateOpened ends a wait. A run held before its canary was scaled up is Progressing again.
func (r *run) gateOpened(ctx context.Context, hookType string, waiting Phase) error {
	message := fmt.Sprintf("The %s gate opened", hookType)
	if waiting == PhaseWaiting {
		return r.record(ctx, PhaseProgressing, normalEvent, message+fmt.Sprintf(": scaling up %s", r.rel.Target))
	}
	r.report(Progress{Kind: ProgressGate, Message: message})
	return nil
}

// postRollout calls the post-rollout webhooks after the verdict. A failure does not change
// the verdict, but it is not silent either: it joins the status message, a Warning Event and
// the apply's warnings.
func (r *run) postRollout(ctx context.Context, verdict Phase) {
	failed := r.analyzer().runHooks(ctx, HookPostRollout, verdict, r.st.LastAppliedSpec)
	if failed == nil {
		return
	}
	r.st.Message += fmt.Sprintf(" The %s (the verdict stands).", failed.Message)
	r.event(ctx, warningEvent, "PostRolloutFailed", failed.Message)
	if err := r.save(ctx); err != nil {
		r.note("%v", err)
	}
	r.e.warn(r.rel, "canary_release post-rollout webhook failed", fmt.Sprintf("The release %s/%s ended %s, and then the %s. The verdict stands.",
		r.rel.Namespace, r.rel.Name, verdict, failed.Message))
}
