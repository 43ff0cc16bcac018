package rollout

import (
	"context"
	"errors"
	"fmt"
)

// phaseFunc does one phase's work and returns the phase that follows. The phase's record is
// written before its first action, so a killed run is found in the phase it was in.
type phaseFunc func(ctx context.Context) (Phase, error)

// phases is the state machine: every phase a run can be in and the function that runs it.
// Terminal phases (Initialized, Succeeded, Failed) have none. Other issues add phases here
// (gates, A/B and blue/green iterations) as functions of their own.
func (r *run) phases() map[Phase]phaseFunc {
	if r.e.Owned != nil {
		// A driver-owned target has no primary copy to roll: its promotion pins a revision
		// and its rollback moves the weights (owned_target.go), or, released in place,
		// restores the promoted revision on every pod (in_place.go). The analysis is the same.
		rollingBack := r.ownedRollingBack
		if r.inPlace() != nil {
			rollingBack = r.inPlaceRollingBack
		}
		return map[Phase]phaseFunc{
			PhaseProgressing: r.progressing,
			PhasePromoting:   r.ownedPromoting,
			PhaseRollingBack: rollingBack,
		}
	}
	return map[Phase]phaseFunc{
		PhaseInitializing: r.initializing,
		PhaseProgressing:  r.progressing,
		PhasePromoting:    r.promoting,
		PhaseFinalising:   r.finalising,
		PhaseRollingBack:  r.rollingBack,
	}
}

// walk runs the machine from a phase until it reaches a terminal one. Ending in Failed is a
// *Failure whose reason is the recorded message: it says why, and where traffic is.
func (r *run) walk(ctx context.Context, from Phase) (Status, error) {
	defer func() {
		r.stopFollowingCanary()
		r.stopFollowingControls()
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		r.flushEvents(cctx)
	}()
	machine := r.phases()
	phase := from
	for {
		fn, ok := machine[phase]
		if !ok {
			break
		}
		next, err := fn(ctx)
		if err != nil {
			return r.st, r.stopped(ctx, phase, err)
		}
		phase = next
	}
	if phase == PhaseFailed {
		return r.st, &Failure{Status: r.st, Reason: r.st.Message}
	}
	if phase != r.st.Phase {
		return r.st, fmt.Errorf("internal error: the run ended in phase %s but recorded %s", phase, r.st.Phase)
	}
	return r.st, nil
}

// stopped turns an error that ended a phase early (a write the API server kept refusing, a
// lost lock) into a *Failure that says where traffic is. The status takes the live weights,
// and is saved when the cluster takes it, so the next run resumes from what is really there.
func (r *run) stopped(ctx context.Context, phase Phase, err error) error {
	var f *Failure
	if errors.As(err, &f) {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) && errors.Is(err, ctx.Err()) {
		// The API client only says "context canceled": say why (a lost lock, a timeout).
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if phase == PhaseInitializing {
		r.st.Message = fmt.Sprintf("the initialisation stopped: %v; the next apply initialises the release again", err)
	} else {
		if phase == PhasePromoting || phase == PhaseFinalising {
			// The analysis passed: a primary lost meanwhile (deleted with the record, say)
			// leaves its share to the canary, which runs the passed template.
			r.moveOffLostPrimary(cctx)
		}
		r.syncLiveWeight(cctx)
		r.st.Message = fmt.Sprintf("the run stopped in phase %s: %v; %s; %s", phase, err, r.whereTraffic(cctx), nextApplyAfter(phase))
	}
	_ = r.save(cctx)
	return &Failure{Status: r.st, Reason: r.st.Message}
}

// nextApplyAfter says what the recovery rule (recover.go) does with a run stopped in phase.
func nextApplyAfter(phase Phase) string {
	switch phase {
	case PhasePromoting, PhaseFinalising:
		return "the analysis had passed, so the next apply finishes the promotion"
	case PhaseProgressing, PhaseRollingBack:
		return "the next apply rolls it back first, then analyses the target again"
	}
	return "the next apply recovers from there"
}
