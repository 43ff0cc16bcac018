package provider

// Moments: faults keyed to what a command has done rather than to a random request, so that a
// schedule reaches the places a run passes only once and briefly. A kill right after the Nth
// landed write of an object (the Nth partition of a StatefulSet, a Knative Service's pin, the
// record's Nth phase), not only at a request drawn uniformly, which almost always kills a run
// in its first steps. Every draw is a keyed coin of its own, so the schedules' other draws
// stay what they were.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/lock"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/knative"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// writeKillShare is the share of the commands whose process is killed right after the Nth
// write of an object; writeKillObjectShare the share of the objects it writes that are drawn
// as that object, with N in 1..writeKillMaxN.
const (
	writeKillShare       = 0.25
	writeKillObjectShare = 0.35
	writeKillMaxN        = 4
)

// writtenObject names the object a write is of: group, resource and name (a core Service
// and a Knative one are different objects).
func writtenObject(action k8stesting.Action) string {
	gvr := action.GetResource()
	resource := gvr.Group + "/" + gvr.Resource
	if sub := action.GetSubresource(); sub != "" {
		resource += "/" + sub
	}
	return resource + "/" + objectName(actionObject(action))
}

// actionObject is what a write names: its object, or the name of a delete or patch.
func actionObject(action k8stesting.Action) any {
	switch a := action.(type) {
	case interface{ GetObject() runtime.Object }:
		return a.GetObject()
	case interface{ GetName() string }:
		return a
	}
	return nil
}

// afterWrite counts a landed write of the process, and arms the kill of its next request when
// it is the drawn Nth write of its object.
func (f *processFaults) afterWrite(action k8stesting.Action) {
	c := f.c
	if action.GetResource().Resource == "events" || c.converging() {
		return
	}
	if _, armed := c.armedEvents(f.process); !armed || keyedCoin(c.seed, "write kill command "+f.process) >= writeKillShare {
		return
	}
	object := writtenObject(action)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writes == nil {
		f.writes = map[string]int{}
	}
	f.writes[object]++
	coin := keyedCoin(c.seed, "write kill "+f.process+" "+object)
	if coin >= writeKillObjectShare || f.killAfter != "" {
		return
	}
	if n := 1 + int(coin/writeKillObjectShare*writeKillMaxN); f.writes[object] == n {
		f.killAfter = action.GetVerb() + " " + strings.TrimPrefix(object, "/") + " #" + strconv.Itoa(n)
	}
}

// takeKillAfterWrite is the write after which the process is killed now, if any.
func (f *processFaults) takeKillAfterWrite() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	after := f.killAfter
	if after != "" {
		// "update apps/statefulsets/podinfo #2" counts as "write #2 of apps/statefulsets".
		verbObject, n, _ := strings.Cut(after, " #")
		object := strings.Fields(verbObject)[len(strings.Fields(verbObject))-1]
		f.c.cover("kill right after write #" + n + " of " + object[:max(0, strings.LastIndex(object, "/"))])
	}
	return after
}

// foreignWriterShare is the share of the commands in which another controller takes over the
// router object at a random request, for the rest of the command: whatever a run writes, it
// puts its own weights (all to the primary) back a moment later, as a second tool that
// manages the same object would. A run then never reads back its step; it must give up at
// its progress deadline, not hold until the apply's timeout (the liveness oracle,
// checkCommandTime).
const foreignWriterShare = 1.0 / 15

// foreignWriterPeriod is how often the other controller reconciles the object.
const foreignWriterPeriod = 700 * time.Millisecond

// foreignWriterAtRequest starts the other controller at a random request of one command in
// fifteen. A StatefulSet or a Knative Service is its own router: the schedules draw no other
// controller for them.
func (c *campaign) foreignWriterAtRequest(f *processFaults, at string) {
	if c.shape.statefulSet || c.shape.knative || c.converging() || keyedCoin(c.seed, "foreign router writer command "+f.process) >= foreignWriterShare {
		return
	}
	if _, due := c.fire(f.process, "foreign router writer", at, 20); due {
		c.tracef("another controller takes over the router object of %s from %s, until the command ends", c.currentRouter(), at)
		c.cover("another controller keeps writing the router object")
		time.AfterFunc(time.Millisecond, func() { c.foreignWriterTick(f.process) })
	}
}

// foreignWriterTick is one reconciliation of the other controller: the object back to 100/0
// when a run moved it. It ends with the command.
func (c *campaign) foreignWriterTick(process string) {
	if _, armed := c.armedEvents(process); !armed || c.converging() {
		return
	}
	if weight, ok := c.liveCanaryWeight(); ok && weight > 0 {
		c.outOfBand(context.Background(), oobResetRouter, "by the other controller in "+process)
	}
	time.AfterFunc(foreignWriterPeriod, func() { c.foreignWriterTick(process) })
}

// commandBudget bounds how long a command may take in fake time: its analyses take seconds,
// and every hold of a run ends at progress_deadline_seconds (30s), gate_timeout (20s) or the
// lock's lease (60s), so an apply that runs on towards its Terraform timeout (20 or 60
// minutes) holds for no reason the release gives.
const commandBudget = 15 * time.Minute

// checkCommandTime is the liveness oracle: a command ends within commandBudget, unless it
// waited for a side that lost its Ready pods and never got them back (the run keeps the
// traffic on the side that serves and says that the next apply finishes; seed 5748).
func (c *campaign) checkCommandTime(process string, took time.Duration, result commandResult) {
	if result.err != nil && strings.Contains(result.err.Error(), "had no Ready pods") {
		return
	}
	if took > commandBudget {
		c.judge.fail("liveness", "", "%s took %s of fake time: every hold of a run is bounded by progress_deadline_seconds, gate_timeout or the lock's lease, so no apply runs on towards its Terraform timeout",
			process, took.Round(time.Second))
	}
}

// controlAtPhaseShare is the share of the commands in which an operator (or an intruder) sets
// a control a moment after the record says a run entered a drawn phase: the moments a
// random request seldom hits (a revert or a skip_analysis release starting its canary, a
// promotion's first write), since a run passes them once.
const controlAtPhaseShare = 1.0 / 2

// controlPhases are the phases drawn; Progressing, which every run with a new template enters
// (and where a run without analysis decides alone), most often.
var controlPhases = []rollout.Phase{rollout.PhaseProgressing, rollout.PhaseProgressing, rollout.PhaseProgressing, rollout.PhasePromoting,
	rollout.PhaseFinalising, rollout.PhaseRollingBack, rollout.PhaseWaiting, rollout.PhaseWaitingPromotion}

// momentsFollowing sets the controls drawn for a phase when a run's record enters it.
func (c *campaign) momentsFollowing(next func(apiChange)) func(apiChange) {
	var mu sync.Mutex
	last := rollout.Phase("")
	return func(ch apiChange) {
		next(ch)
		c.followQuietWait(ch)
		if ch.gvr == knative.ServiceResource && ch.by != harnessWriter {
			c.mu.Lock()
			c.knativeWrittenAt = time.Now()
			c.mu.Unlock()
		}
		if ch.gvr != configMapsResource || ch.name != rollout.StateConfigMapName(campaignRelease) || ch.by == harnessWriter || ch.after == nil {
			return
		}
		c.mu.Lock()
		c.recordUnverifiable = false // written afresh, and signed, by a run
		c.mu.Unlock()
		st, ok := c.recordedStatus()
		if !ok {
			return
		}
		mu.Lock()
		entered := st.Phase != last
		last = st.Phase
		mu.Unlock()
		if !entered || c.converging() || keyedCoin(c.seed, "control at phase command "+ch.by) >= controlAtPhaseShare {
			return
		}
		phase := controlPhases[int(keyedCoin(c.seed, "control phase "+ch.by)*float64(len(controlPhases)))%len(controlPhases)]
		if st.Phase != phase {
			return
		}
		if _, due := c.fire(ch.by, "control at phase", string(phase), 1000); !due {
			return
		}
		when := fmt.Sprintf("%s, as its record entered %s", ch.by, phase)
		delay := time.Millisecond + time.Duration(keyedCoin(c.seed, "control phase delay "+ch.by)*float64(3*time.Second))
		time.AfterFunc(delay, func() {
			if _, armed := c.armedEvents(ch.by); armed {
				c.setControl(context.Background(), when)
			}
		})
	}
}

// leaseCleanupShare is the share of the commands after a killed one before which the user
// deletes the release's Lease, as one cleans up a lock a crashed apply left; the next run
// then waits out a lease duration before it writes (rollout's awaitDeletedLease).
const leaseCleanupShare = 0.5

// timedLossShare is the share of the commands in which a side loses its Ready pods at a
// random moment of fake time (up to timedLossWithin after the command starts), rather than at
// a request: a run that waits (for a lock, a gate, a pause) makes few requests.
const (
	timedLossShare  = 1.0 / 5
	timedLossWithin = 50 * time.Second
)

// slowPullShare is the share of the commands in which the pods started take slowPull to
// become Ready (an image pull from a slow registry, a long startup probe), whatever the
// shape's own delay: the moments a run waits for its canary's pods last long enough for
// events to land in them.
const (
	slowPullShare = 1.0 / 4
	slowPull      = 8 * time.Second
)

// momentsBeforeCommand is what the schedule does before a command at moments of its own: it
// deletes the Lease a killed command left, makes the command's pods slow to start, and arms a
// readiness loss at a moment of the command.
func (c *campaign) momentsBeforeCommand(ctx context.Context, process string, previousKilled bool) {
	cleanup := previousKilled && keyedCoin(c.seed, "lease cleanup before "+process) < leaseCleanupShare
	c.mu.Lock()
	c.leaseCleanedAfterKill = cleanup
	c.mu.Unlock()
	if cleanup {
		c.outOfBand(ctx, oobDeleteLease, "before "+process+", after the killed command")
	}
	delay := c.shape.readyDelay
	if keyedCoin(c.seed, "slow pull "+process) < slowPullShare {
		delay = slowPull
		c.tracef("the pods started in %s take %s to become Ready", process, slowPull)
		c.cover("pods slow to start in a command")
	}
	c.server.mu.Lock()
	c.server.pods.readyDelay = delay
	c.server.mu.Unlock()
	if keyedCoin(c.seed, "timed loss "+process) >= timedLossShare {
		return
	}
	side := []string{"canary", "primary"}[int(keyedCoin(c.seed, "timed loss side "+process)*2)%2]
	recovery := []time.Duration{0, 3 * time.Second, 40 * time.Second}[int(keyedCoin(c.seed, "timed loss recovery "+process)*3)%3]
	delay = time.Duration(keyedCoin(c.seed, "timed loss at "+process) * float64(timedLossWithin))
	time.AfterFunc(delay, func() {
		if _, armed := c.armedEvents(process); armed && !c.converging() {
			c.loseReadiness(side, recovery, fmt.Sprintf("%s into %s", delay.Round(time.Millisecond), process))
		}
	})
}

// knativeRunWritesNothing reports a Knative release whose Service no run wrote since the last
// disruption (a revision's pods lost): the run holds (a deleted Lease's quiet period, a pause,
// a gate, a metrics outage), and the owned path looks at its revisions' pods only when it
// writes traffic (open item K1).
func (c *campaign) knativeRunWritesNothing() bool {
	if !c.shape.knative {
		return false
	}
	last := c.lastDisruption()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.knativeWrittenAt.Before(last)
}

// recordTrustedByRun reports that the run in charge can verify the record: a run that holds
// no key for it (after state rm or import) takes nothing it says as passed until it wrote the
// record afresh, so a canary the record alone says passed may not take the primary's traffic
// (rollout's moveOffLostSideWhileQuiet).
func (c *campaign) recordTrustedByRun() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.recordUnverifiable && !c.forgedRecord
}

// quietWaitSlack is how long past a lease duration a quiet wait may last (the record changed
// during it, which starts it again, is not followed here).
const quietWaitSlack = 10 * time.Second

// followQuietWait notes the quiet periods: a run that creates the Lease the schedule deleted
// waits a lease duration before it writes anything else (rollout's awaitDeletedLease).
func (c *campaign) followQuietWait(ch apiChange) {
	if ch.gvr != leasesResource {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ch.by == harnessWriter && ch.after == nil:
		c.leaseGoneByHand = true
	case ch.by != harnessWriter && ch.before == nil && c.leaseGoneByHand:
		c.leaseGoneByHand, c.quietUntil = false, time.Now().Add(lock.LeaseDuration+quietWaitSlack)
	}
}

// inQuietWait reports that a run may be waiting out a Lease the schedule deleted.
func (c *campaign) inQuietWait() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Before(c.quietUntil) || c.leaseDeleted
}

// quietWaitUnverified reports a run that may wait out the Lease the schedule deleted while it
// cannot verify the record (open item Q1).
func (c *campaign) quietWaitUnverified() bool {
	quiet := c.inQuietWait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return quiet && c.recordUnverifiable
}

// leaseDeletedThisCommand reports a run that may wait out a quiet period (open item Q2).
func (c *campaign) leaseDeletedThisCommand() bool { return c.inQuietWait() }

// quietWaitAfterKilledRun reports a run that may wait out the Lease the user deleted after a
// killed apply, whose run wrote the record last (open item Q3).
func (c *campaign) quietWaitAfterKilledRun() bool {
	quiet := c.inQuietWait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return quiet && c.leaseCleanedAfterKill
}
