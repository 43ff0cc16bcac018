package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// stsChecks is what the checks of one StatefulSet analysis share.
type stsChecks struct {
	candidate   string
	pace        *pacer
	queryErrors map[string]int
	// overSince is when the checks of the step reached began to find more pods on the
	// candidate than the step allows (overStep); zero while they do not.
	overSince time.Time
}

// checkInterval waits for the next check and judges the updated pods at the step reached.
// The operator's controls act first (steer: an abort rolls back, a promote-now promotes). A
// check taken with more updated pods than the step allows does not count. passed means the
// step may advance; a next phase (RollingBack, with the run's reason, or Promoting) ends the
// analysis.
func (s *stsRun) checkInterval(ctx context.Context, c *stsChecks) (passed bool, next Phase, err error) {
	if err := c.pace.wait(ctx, nil); err != nil {
		next, err := s.rollBack(s.stopReason(ctx, err))
		return false, next, err
	}
	if next, err := s.steer(ctx); next != "" || err != nil {
		return false, next, err
	}
	set, err := s.readCandidate(ctx, c.candidate)
	if err != nil {
		next, err := s.rollBack(s.stopReason(ctx, err))
		return false, next, err
	}
	if over, next, err := s.overStep(ctx, set, c); over || next != "" || err != nil {
		return false, next, err
	}
	v := s.analyzer(set).interval(ctx, c.candidate, c.queryErrors)
	s.st.Iterations++
	switch {
	case v.halted != "":
		next, err := s.rollBack(s.stopReason(ctx, errors.New(v.halted)))
		return false, next, err
	case v.unavailable != nil:
		next, err := s.rollBack(s.stopReason(ctx, v.unavailable))
		return false, next, err
	case v.failure != nil:
		s.st.FailedChecks++
		s.st.LastCheck, s.lastFailure = v.failure.Message, v.failure.Message
		threshold := max(s.rel.Analysis.Threshold, 1)
		s.e.report(Progress{Kind: ProgressCheck, Namespace: s.rel.Namespace, Name: s.rel.Name,
			Message: fmt.Sprintf("%s (failed checks %d/%d)", v.failure.Message, s.st.FailedChecks, threshold)})
		if s.st.FailedChecks >= threshold {
			s.rejection = &Rejection{Check: v.failure.Check, Reason: v.failure.Message}
			n := replicasOf(set)
			next, err := s.rollBack(fmt.Sprintf("revision %s of StatefulSet %s failed its analysis at %d of %d pods: %s",
				c.candidate, s.rel.Target, PodsForWeight(s.stepWeight(), n), n, v.failure.Message))
			return false, next, err
		}
		return false, "", s.save(ctx)
	}
	return true, "", nil
}

// stepWeight is the weight of the step the record has reached.
func (s *stsRun) stepWeight() int {
	steps := canaryStrategy{s.rel.Analysis}.Steps()
	return steps[min(s.st.Step, len(steps)-1)]
}
