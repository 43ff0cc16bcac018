package provider

// The abort, judged by the checks (issue 32 item 4): an operator's abort rolls the run back at
// its next check, so a run that analyses its canary and checks it again once the abort had
// time to reach it must not go on to promote it. The time-based judge (campaign_controls_test.go)
// gives a control controlGrace, longer than a short analysis lasts after it; counting the
// checks holds every kind to the promise however short its analysis.

import (
	"strings"
	"sync"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// abortCheckGrace is how long after an abort landed a check must come to be judged by it.
const abortCheckGrace = 500 * time.Millisecond

// abortChecks is what the judge saw of the checks after an abort.
type abortChecks struct {
	mu sync.Mutex
	// process checked its canary at checkedAt, after the operator's abort of abortedAt had had
	// its grace.
	process              string
	abortedAt, checkedAt time.Time
	lastPhase            rollout.Phase
	// faultsAtAbort counts the faults when the abort landed.
	faultsAtAbort int
	aborted       bool
}

// checkAfterAbort notes a check that follows the operator's abort by more than its grace,
// while a run analyses its canary.
func (c *campaign) checkAfterAbort() {
	k := c.controls
	k.mu.Lock()
	abortedAt := k.abortedAt
	k.mu.Unlock()
	st, ok := c.recordedStatus()
	c.abortChecks.mu.Lock()
	faults := c.abortChecks.faultsAtAbort
	c.abortChecks.mu.Unlock()
	// The run watches its controls: without a fault, a check half a second after the abort
	// landed follows the run's read of it.
	grace := abortCheckGrace
	if c.faultsInjected() != faults {
		grace = faultGrace // a refused request costs the run's watch of the controls its backoff
	}
	if abortedAt.IsZero() || !ok || !analysing(st.Phase) || time.Since(abortedAt) <= grace || c.liveControls()[controls.Abort] != "true" {
		return
	}
	holder := c.currentLeaseHolder()
	c.abortChecks.mu.Lock()
	defer c.abortChecks.mu.Unlock()
	if c.abortChecks.process == "" {
		c.abortChecks.process, c.abortChecks.abortedAt, c.abortChecks.checkedAt = holder, abortedAt, time.Now()
		c.tracef("oracle: %s checks its canary %s after the operator's abort; it must roll back", holder, time.Since(abortedAt))
	}
}

// abortFollowing judges a run's record: a promotion after such a check breaks the abort.
func (c *campaign) abortFollowing(next func(apiChange)) func(apiChange) {
	return func(ch apiChange) {
		next(ch)
		if ch.after == nil || ch.name != rollout.StateConfigMapName(campaignRelease) {
			return
		}
		aborted := c.liveControls()[controls.Abort] == "true"
		c.abortChecks.mu.Lock()
		if aborted && !c.abortChecks.aborted {
			c.abortChecks.faultsAtAbort = c.faultsInjected()
		}
		c.abortChecks.aborted = aborted
		c.abortChecks.mu.Unlock()
		if ch.by == harnessWriter {
			return
		}
		st, ok := c.recordedStatus()
		if !ok {
			return
		}
		a := &c.abortChecks
		a.mu.Lock()
		previous := a.lastPhase
		a.lastPhase = st.Phase
		checked := a.process
		abortedAt, checkedAt := a.abortedAt, a.checkedAt
		if !analysing(st.Phase) && st.Phase != rollout.PhasePromoting || (checked != "" && checked != ch.by) {
			a.process = "" // the run left its analysis without promoting, or another run writes
		}
		a.mu.Unlock()
		if st.Phase == rollout.PhasePromoting && previous != rollout.PhasePromoting && checked == ch.by {
			c.cover("control: a promotion judged against a check after an abort")
			c.judge.fail("clause 4", "", "%s: the promotion started although the run checked its canary %s after the operator's abort (at %s), which rolls the run back at its next check",
				ch.by, checkedAt.Sub(abortedAt), abortedAt.Sub(c.start))
			a.mu.Lock()
			a.process = ""
			a.mu.Unlock()
		}
	}
}

// classifyControlBreak: C1 is a canary that takes its first step after an abort that landed
// before it had any traffic (the run reads the abort at its next check, and the first step
// comes before any).
func classifyControlBreak(text string) string {
	if strings.HasPrefix(text, "the canary went from 0% to ") && strings.Contains(text, "after the operator's abort") {
		return "C1"
	}
	return ""
}
