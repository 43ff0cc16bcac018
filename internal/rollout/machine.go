package rollout

import (
	"context"
	"fmt"
)

// phaseFunc does one phase's work and returns the phase that follows. The phase's record is
// written before its first action, so a killed run is found in the phase it was in.
type phaseFunc func(ctx context.Context) (Phase, error)

// phases is the state machine: every phase a run can be in and the function that runs it.
// Terminal phases (Initialized, Succeeded, Failed) have none. Other issues add phases here
// (gates, A/B and blue/green iterations) as functions of their own.
func (r *run) phases() map[Phase]phaseFunc {
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
	machine := r.phases()
	phase := from
	for {
		fn, ok := machine[phase]
		if !ok {
			break
		}
		next, err := fn(ctx)
		if err != nil {
			return r.st, err
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
