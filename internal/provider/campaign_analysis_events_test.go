package provider

// Events keyed to the analysis (issue 32 item 4): the random requests at which the other
// events fire fall in the analysis only as often as its requests are a share of a command's,
// and a release in place (a StatefulSet) analyses in few requests. In one command in four, a
// moment after the record first says Progressing, the operator (or the intruder) sets one of
// the seven controls (one in two); in three commands in four of a schedule with an autoscaler, its demand or
// maxReplicas changes then. Every kind and router draws them; a release in place draws them
// again a moment after a run lowered its partition, before the step's check.

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// analysisEvents follows the record's writes and fires a command's analysis-keyed events: a
// moment after the record first says Progressing, and a moment after a run gives the canary of
// a release in place its pods (the partition lowered: its traffic shifts).
func (c *campaign) analysisEvents(next func(apiChange)) func(apiChange) {
	return func(ch apiChange) {
		next(ch)
		if ch.after == nil || ch.by == harnessWriter || c.converging() {
			return
		}
		switch {
		case ch.name == rollout.StateConfigMapName(campaignRelease) && ch.gvr == configMapsResource:
			if st, ok := c.recordedStatus(); ok && st.Phase == rollout.PhaseProgressing {
				c.analysisEvent(ch.by, "analysis", 500*time.Millisecond, 4*time.Second)
			}
		case ch.gvr == statefulSetsResource && partitionLowered(ch):
			if st, ok := c.recordedStatus(); ok && analysing(st.Phase) {
				// The next check follows once the new pods are Ready and an interval passed.
				c.analysisEvent(ch.by, "shift", 0, c.server.pods.readyDelay+c.shape.interval())
			}
		}
	}
}

// analysisEvent fires, once per command and kind, a control (one command in two) and an
// autoscaler event (three in four, with an autoscaler) a keyed moment within [from, from+span).
// After a step, the autoscaler's event is a rise of its demand: the step's traffic brings load.
func (c *campaign) analysisEvent(process, kind string, from, span time.Duration) {
	when := "in the analysis of " + process
	if kind == "shift" {
		when = "after a step of " + process
	}
	if keyedCoin(c.seed, kind+" control "+process) < 1.0/2 {
		if _, due := c.fire(process, kind+" control", kind, 1000); due {
			delay := from + time.Duration(keyedCoin(c.seed, kind+" control delay "+process)*float64(span))
			time.AfterFunc(delay, func() {
				if !c.converging() {
					c.setControl(context.Background(), when)
				}
			})
		}
	}
	if c.hpa != nil && keyedCoin(c.seed, kind+" autoscaler "+process) < 3.0/4 {
		if _, due := c.fire(process, kind+" autoscaler", kind, 1000); due {
			delay := from + time.Duration(keyedCoin(c.seed, kind+" autoscaler delay "+process)*float64(span))
			time.AfterFunc(delay, func() {
				if !c.converging() {
					c.autoscalerEvent(context.Background(), when, kind == "shift")
				}
			})
		}
	}
}

// partitionLowered reports a write of a StatefulSet that lowers its partition.
func partitionLowered(ch apiChange) bool {
	before, _ := ch.before.(*appsv1.StatefulSet)
	after, _ := ch.after.(*appsv1.StatefulSet)
	return before != nil && after != nil && statefulset.Partition(after) < statefulset.Partition(before)
}
