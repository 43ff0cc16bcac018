package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
)

// awaitGate holds the run while a gate of hookType is closed, or while the operator paused
// it (hookType "" waits for a pause only): every interval it asks the gate's webhooks again,
// and reads the built-in gates' approvals and the pause, until all are open. waiting is the
// phase recorded meanwhile. held, when set, keeps the analysis going at the current weight,
// so the threshold and the rollback webhooks still apply (Flagger's traffic-increase gate
// stops them, #1801). A gate closed for longer than analysis.gate_timeout rolls back; so does
// the apply's own timeout, and both name the gate. A pause is the operator's: gate_timeout
// does not bound it. An abort or a promote-now acts at each of these checks too.
func (r *run) awaitGate(ctx context.Context, a analyzer, hookType string, waiting Phase, pace *pacer, held *intervals) (Phase, error) {
	var check heldCheck
	if held != nil {
		check = func(ctx context.Context) (Phase, error) {
			_, next, err := r.analyseInterval(ctx, held)
			return next, err
		}
	}
	return r.awaitGateChecking(ctx, a, hookType, waiting, pace, check)
}

// steerBeforePromotion answers the operator's controls once the canary is Ready, when no
// step follows to read them: a promotion without analysis (skip_analysis, a revert within
// rollback_window) starts only after a pause set while the canary started is removed, and an
// abort rolls it back instead. An analysed run reads them at its checks and at the
// confirm-promotion gate.
func (r *run) steerBeforePromotion(ctx context.Context, a analyzer, pace *pacer) (Phase, error) {
	if next, err := r.awaitGate(ctx, a, "", PhaseProgressing, pace, nil); next != "" || err != nil {
		return next, err
	}
	if c, ok := r.controls().On(controls.Abort, "true"); ok {
		return r.aborted(c)
	}
	return "", nil
}

// heldCheck runs one check of the analysis while a gate holds the run; a next phase ends the
// wait.
type heldCheck func(ctx context.Context) (Phase, error)

// awaitGateChecking is awaitGate with the held check given as a function; nil when the canary
// has no traffic yet, so the wait only paces and steers.
func (r *run) awaitGateChecking(ctx context.Context, a analyzer, hookType string, waiting Phase, pace *pacer, held heldCheck) (Phase, error) {
	var since, gateSince time.Time
	var holding string
	for {
		closed := r.closedGate(ctx, a, hookType)
		if closed == nil {
			if !since.IsZero() {
				return "", r.gateOpened(ctx, hookType, waiting)
			}
			return "", nil
		}
		if closed.Check != holding {
			holding = closed.Check
			first := since.IsZero()
			if first {
				since = r.e.now()
			}
			if err := r.gateClosed(ctx, closed, waiting); err != nil {
				return "", err
			}
			if first && held == nil {
				pace.restart()
			}
		}
		if closed.Check == controls.PauseCheck {
			gateSince = time.Time{}
		} else if gateSince.IsZero() {
			gateSince = r.e.now()
		}
		if timeout := r.rel.Analysis.GateTimeout; timeout > 0 && !gateSince.IsZero() && r.e.now().Sub(gateSince) >= timeout {
			return r.rollBack(fmt.Sprintf("the %s gate %s stayed closed for %s (analysis.gate_timeout): %s",
				hookType, closed.Check, timeout, closed.Message))
		}
		var next Phase
		var err error
		if held != nil {
			next, err = held(ctx)
		} else if waitErr := pace.wait(ctx, nil); waitErr != nil {
			next, err = r.rollBack(interruptedReason(waitErr))
		} else {
			next, err = r.steer(ctx)
		}
		if next != "" || err != nil {
			if ctx.Err() != nil {
				r.reason += fmt.Sprintf(", while the %s was closed", gateName(hookType, closed.Check))
			}
			return next, err
		}
	}
}

// closedGate is what holds the run at a gate of hookType now: the operator's pause, a built-in
// gate without approval, or a gate webhook that does not answer success; nil when all are open.
func (r *run) closedGate(ctx context.Context, a analyzer, hookType string) *CheckFailure {
	set := r.controls()
	if paused := r.pausedBy(set); paused != nil {
		return paused
	}
	if hookType == "" {
		return nil
	}
	if closed := r.builtInGateClosed(ctx, a, set, hookType); closed != nil {
		return closed
	}
	return a.runHooks(ctx, hookType, r.st.Phase, r.st.LastAppliedSpec)
}

// gateName names what held the run, for messages.
func gateName(hookType, check string) string {
	if check == controls.PauseCheck {
		return "operator's pause"
	}
	return fmt.Sprintf("%s gate %s", hookType, check)
}

// gateClosed tells that a gate holds the run: the phase, an Event, and the progress log.
func (r *run) gateClosed(ctx context.Context, closed *CheckFailure, waiting Phase) error {
	message := fmt.Sprintf("Waiting for the gate %s: %s", closed.Check, closed.Message)
	if closed.Check == controls.PauseCheck {
		message = "Paused: " + closed.Message
	}
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
	if hookType == "" {
		message = "The operator resumed the run"
	}
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
