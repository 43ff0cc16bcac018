package provider

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// quietSeed is a seed none of whose keyed draws fire in commands 1 to 3 (controls, record
// tampering, phase-keyed edits, promote-now): what a scripted schedule does is all it does.
func quietSeed(t *testing.T) int64 {
	t.Helper()
	for seed := int64(1); seed < 10000; seed++ {
		quiet := true
		for _, process := range []string{"command 1", "command 2", "command 3"} {
			for _, key := range []string{"control command ", "control before ", "record tampering before ", "record tampering command ", "phase router edit ", "promote-now command "} {
				if keyedCoin(seed, key+process) < 0.2 {
					quiet = false
				}
			}
		}
		if quiet {
			return seed
		}
	}
	t.Fatal("no quiet seed")
	return 0
}

func scriptedCampaign(t *testing.T, ops ...campaignOp) *campaign {
	t.Helper()
	s := campaignSchedule{seed: quietSeed(t), shape: releaseShape{router: "osm", strategy: strategyCanary, steps: []int{30}, threshold: 1, iterations: 2, revertOnDeletion: true}, ops: ops}
	c := newCampaign(s)
	if err := c.setUpCluster(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// An operator's pause holds a new template's canary at no traffic until the operator resumes;
// then the release goes on and promotes it.
func TestCampaignPauseHoldsTheCanary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := scriptedCampaign(t)
		ctx := context.Background()
		c.runOperation(ctx, 1, campaignOp{kind: opCreate})
		c.writeControl(ctx, controlPause, writerOperator, "before command 2")
		// The most traffic the canary had before the resume, as every write left the router.
		var mu sync.Mutex
		most, resumed := 0, false
		next := c.server.onChange
		c.server.onChange = func(ch apiChange) {
			next(ch)
			if w, ok := c.liveCanaryWeight(); ok {
				mu.Lock()
				if !resumed {
					most = max(most, w)
				}
				mu.Unlock()
			}
		}
		var message string
		time.AfterFunc(20*time.Second, func() {
			st, _ := c.recordedStatus()
			message = st.Message
		})
		time.AfterFunc(30*time.Second, func() {
			mu.Lock()
			resumed = true
			mu.Unlock()
			c.writeControl(ctx, controlResume, writerOperator, "after 30s")
		})
		c.runOperation(ctx, 2, campaignOp{kind: opNewTemplate})
		trace := strings.Join(c.trace, "\n")
		if most != 0 {
			t.Errorf("before the resume the canary had up to %d%% of the traffic, want none\n%s", most, trace)
		}
		if !strings.Contains(message, "paused by the operator") {
			t.Errorf("20s into the pause the record said %q, want the operator's pause\n%s", message, trace)
		}
		if got := c.running(campaignPrimary); got != "podinfo:v2-good" {
			t.Errorf("after the resume the primary runs %s, want podinfo:v2-good\n%s", got, trace)
		}
		c.judge.mu.Lock()
		for _, v := range c.judge.violations {
			t.Errorf("violation: %s", v)
		}
		c.judge.mu.Unlock()
		time.Sleep(time.Hour)
	})
}

// With the control policy installed, the intruder's controls are refused and the ConfigMap
// keeps what it held; without it they land, as the plan's warning says they would.
func TestCampaignPolicyDeniesTheIntruder(t *testing.T) {
	for _, policy := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			c := scriptedCampaign(t)
			c.controls.policy = policy
			ctx := context.Background()
			c.runOperation(ctx, 1, campaignOp{kind: opCreate})
			for _, kind := range []string{controlPromoteNow, controlAbort, controlPause, controlApprovePromo} {
				c.writeControl(ctx, kind, writerIntruder, "test")
			}
			live := c.liveControls()
			if policy && len(live) != 0 {
				t.Errorf("with the policy, the intruder's controls landed: %v", live)
			}
			if !policy && (live[controls.PromoteNow] != "true" || live[controls.Pause] != "true") {
				t.Errorf("without the policy, the intruder's controls did not land: %v", live)
			}
			c.writeControl(ctx, controlPause, writerOperator, "test")
			if c.liveControls()[controls.Pause] != "true" {
				t.Errorf("the operator's pause did not land")
			}
			time.Sleep(time.Hour)
		})
	}
}

// The judge's pause check can fail: a run's write that finds the canary's weight raised
// long after a pause is a violation.
func TestCampaignJudgeSeesAPauseBroken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := scriptedCampaign(t)
		ctx := context.Background()
		status, err := json.Marshal(rollout.Status{Phase: rollout.PhaseProgressing})
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: rollout.StateConfigMapName(campaignRelease), Namespace: campaignNamespace},
			Data: map[string]string{"status.json": string(status)}}
		if _, err := c.harness.kube.CoreV1().ConfigMaps(campaignNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The harness's clients write: the observer's serve the judge's reads meanwhile.
		rt, err := registry.NewRouter("osm", router.Clients{Dynamic: c.harness.dynamic, Kube: c.harness.kube}, c.shape.routerSpec("osm"))
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rt.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
			t.Fatal(err)
		}
		c.writeControl(ctx, controlPause, writerOperator, "test")
		time.Sleep(controlGrace + time.Second)
		if err := rt.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
			t.Fatal(err)
		}
		c.controls.afterWrite(apiChange{by: "command 9", verb: "update", gvr: configMapsResource, name: cm.Name, after: cm})
		c.judge.mu.Lock()
		defer c.judge.mu.Unlock()
		for _, v := range c.judge.violations {
			if v.clause == "clause 4" && strings.Contains(v.text, "the canary went from 0% to 30%") {
				return
			}
		}
		t.Errorf("violations %v, want the canary raised after the operator's pause", c.judge.violations)
	})
}

// The judge's confirm-promotion check lets a revert within rollback_window by, which the gate
// does not hold (it has no step), and only that: a record that names no revert, or one to a
// template outside the window, still needs the gate's approval.
func TestCampaignJudgeGateAndRevert(t *testing.T) {
	for _, tc := range []struct {
		name    string
		st      rollout.Status
		allowed bool
	}{
		{"a revert one promotion back", rollout.Status{Phase: rollout.PhasePromoting, LastPromotedSpec: "h2", Promoted: []string{"h2", "h1"}, PassedSpec: "h1", Revert: "h1"}, true},
		{"a revert two promotions back", rollout.Status{Phase: rollout.PhasePromoting, LastPromotedSpec: "h3", Promoted: []string{"h3", "h2", "h1"}, PassedSpec: "h1", Revert: "h1"}, false},
		{"a revert the history does not hold", rollout.Status{Phase: rollout.PhasePromoting, LastPromotedSpec: "h2", Promoted: []string{"h2"}, PassedSpec: "h1", Revert: "h1"}, false},
		{"an analysis", rollout.Status{Phase: rollout.PhasePromoting, LastPromotedSpec: "h2", Promoted: []string{"h2", "h1"}, PassedSpec: "h1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scriptedCampaign(t)
			c.shape.gates, c.shape.rollbackWindow = []string{rollout.HookConfirmPromotion}, 1
			c.judge.allow(c.running(campaignTarget), "promoted before")
			c.controls.checkPromotionGate("command 9", tc.st)
			c.judge.mu.Lock()
			defer c.judge.mu.Unlock()
			if broken := len(c.judge.violations) > 0; broken == tc.allowed {
				t.Errorf("promotion without an approval: violations %v, want a violation: %v", c.judge.violations, !tc.allowed)
			}
		})
	}
}

// A promote-now of a revision the oracle allowed before (the release's first, brought back
// after a later one) makes it the promoted revision again: the apply that succeeds holds the
// primary to it, not to the one it replaced (seed 4692).
func TestCampaignJudgeFollowsAPromoteNowBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Pods Ready 5 s after they start: the operator's promote-now lands while the
		// canary starts, before any check.
		s := campaignSchedule{seed: quietSeed(t), shape: releaseShape{router: "osm", strategy: strategyCanary, steps: []int{30}, threshold: 1, iterations: 2, revertOnDeletion: true, readyDelay: 5 * time.Second}}
		c := newCampaign(s)
		ctx := context.Background()
		if err := c.setUpCluster(ctx); err != nil {
			t.Fatal(err)
		}
		c.runOperation(ctx, 1, campaignOp{kind: opCreate})
		first := c.ws.revision
		c.runOperation(ctx, 2, campaignOp{kind: opNewTemplate})
		if got := c.running(campaignPrimary); got == first.String() {
			t.Fatalf("command 2 left the primary on %s", got)
		}
		// Back to the first template, analysed (no rollback_window), which the operator
		// promotes now a moment into the run.
		c.ws.previous, c.ws.revision = c.ws.revision, first
		time.AfterFunc(2*time.Second, func() { c.operatorPromoteNow(ctx, "in command 3") })
		c.runOperation(ctx, 3, campaignOp{kind: opReapply})
		trace := strings.Join(c.trace, "\n")
		if got := c.running(campaignPrimary); got != first.String() {
			t.Fatalf("after the promote-now the primary runs %s, want %s\n%s", got, first, trace)
		}
		if !strings.Contains(trace, "operator, in command 3: promote-now") {
			t.Fatalf("no promote-now landed\n%s", trace)
		}
		c.judge.mu.Lock()
		for _, v := range c.judge.violations {
			t.Errorf("violation: %s\n%s", v, trace)
		}
		c.judge.mu.Unlock()
		time.Sleep(time.Hour)
	})
}
