package provider

// Events keyed to the analysis (issue 32 item 4): the random requests at which the other
// events fire fall in the analysis only as often as its requests are a share of a command's,
// and a release in place (a StatefulSet) analyses in few requests. In one command in four, a
// moment after the record first says Progressing, the operator (or the intruder) sets one of
// the seven controls; in three commands in four of a schedule with an autoscaler, its demand or
// maxReplicas changes then. Every kind and router draws them.

import (
	"context"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// analysisEvents follows the record's writes and fires a command's analysis-keyed events.
func (c *campaign) analysisEvents(next func(apiChange)) func(apiChange) {
	return func(ch apiChange) {
		next(ch)
		if ch.after == nil || ch.by == harnessWriter || ch.name != rollout.StateConfigMapName(campaignRelease) || c.converging() {
			return
		}
		st, ok := c.recordedStatus()
		if !ok || st.Phase != rollout.PhaseProgressing {
			return
		}
		when := "in the analysis of " + ch.by
		if keyedCoin(c.seed, "analysis control "+ch.by) < 1.0/4 {
			if _, due := c.fire(ch.by, "analysis control", "Progressing", 1000); due {
				delay := time.Duration(500+keyedCoin(c.seed, "analysis control delay "+ch.by)*3500) * time.Millisecond
				time.AfterFunc(delay, func() {
					if !c.converging() {
						c.setControl(context.Background(), when)
					}
				})
			}
		}
		if c.hpa != nil && keyedCoin(c.seed, "analysis autoscaler "+ch.by) < 3.0/4 {
			if _, due := c.fire(ch.by, "analysis autoscaler", "Progressing", 1000); due {
				delay := time.Duration(500+keyedCoin(c.seed, "analysis autoscaler delay "+ch.by)*6000) * time.Millisecond
				time.AfterFunc(delay, func() {
					if !c.converging() {
						c.autoscalerEvent(context.Background(), when)
					}
				})
			}
		}
	}
}
