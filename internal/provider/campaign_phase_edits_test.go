package provider

// Out-of-band edits of the router keyed to the phase the record holds (issue 32 item 4): the
// random requests at which the other edits fire rarely fall in a promotion, which is short,
// and the promotion is where a router reset meets a primary that lost its pods. One command
// in eight resets the router to 100/0, or deletes its object, a moment after the record says
// Promoting or Finalising (the phase of its readiness loss, when it has one).

import (
	"context"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// phaseEdits follows the record's writes and fires a command's phase-keyed router edit.
func (c *campaign) phaseEdits(next func(apiChange)) func(apiChange) {
	return func(ch apiChange) {
		next(ch)
		if ch.after == nil || ch.by == harnessWriter || ch.name != rollout.StateConfigMapName(campaignRelease) ||
			keyedCoin(c.seed, "phase router edit "+ch.by) >= 1.0/8 {
			return
		}
		e, armed := c.armedEvents(ch.by)
		st, ok := c.recordedStatus()
		if !armed || !ok {
			return
		}
		phase := e.lossPhase
		if phase != rollout.PhasePromoting && phase != rollout.PhaseFinalising {
			phase = []rollout.Phase{rollout.PhasePromoting, rollout.PhaseFinalising}[int(keyedCoin(c.seed, "phase router edit phase "+ch.by)*2)%2]
		}
		if st.Phase != phase {
			return
		}
		if _, due := c.fire(ch.by, "phase router edit", string(phase), 1000); !due {
			return
		}
		kind := oobResetRouter
		if keyedCoin(c.seed, "phase router edit kind "+ch.by) < 0.3 {
			kind = oobDeleteRouter
		}
		delay := time.Duration(keyedCoin(c.seed, "phase router edit delay "+ch.by)*3000) * time.Millisecond
		time.AfterFunc(delay, func() { c.outOfBand(context.Background(), kind, "after the record said "+string(phase)) })
	}
}
